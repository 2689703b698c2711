#!/usr/bin/env python3
"""Encrypt a message for a Web Push subscription with pywebpush (aes128gcm, RFC 8291).

Usage: webpush_encrypt.py --p256dh B64URL --auth B64URL [--endpoint URL] [--message TEXT]
  --p256dh / --auth  the subscription keys (as in PushSubscription.toJSON())
  --message          plaintext (default: stdin bytes)
Writes the encrypted body, base64url without padding, to stdout.
"""
import argparse
import base64
import sys

from pywebpush import WebPusher


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--p256dh", required=True)
    ap.add_argument("--auth", required=True)
    ap.add_argument("--endpoint", default="https://push.example.invalid/push/interop")
    ap.add_argument("--message")
    a = ap.parse_args()
    data = a.message.encode() if a.message is not None else sys.stdin.buffer.read()
    sub = {"endpoint": a.endpoint, "keys": {"p256dh": a.p256dh, "auth": a.auth}}
    encoded = WebPusher(sub).encode(data, content_encoding="aes128gcm")
    body = encoded["body"]
    sys.stdout.write(base64.urlsafe_b64encode(body).decode().rstrip("="))
    return 0


if __name__ == "__main__":
    sys.exit(main())
