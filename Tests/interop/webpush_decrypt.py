#!/usr/bin/env python3
"""Decrypt an RFC 8291 aes128gcm Web Push body with the independent `http_ece` implementation.

Usage: webpush_decrypt.py --private-key B64URL --auth B64URL [--body B64URL]
  --private-key  the receiver's (user agent's) raw 32-byte P-256 private scalar, base64url
  --auth         the 16-byte auth secret, base64url
  --body         the encrypted body, base64url (default: raw bytes read from stdin)
Writes the plaintext bytes to stdout; exits 1 with a message on stderr when decryption fails.
"""
import argparse
import base64
import sys

import http_ece
from cryptography.hazmat.primitives.asymmetric import ec


def b64u(s: str) -> bytes:
    s = "".join(s.split())
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--private-key", required=True)
    ap.add_argument("--auth", required=True)
    ap.add_argument("--body")
    a = ap.parse_args()
    body = b64u(a.body) if a.body else sys.stdin.buffer.read()
    key = ec.derive_private_key(int.from_bytes(b64u(a.private_key), "big"), ec.SECP256R1())
    try:
        plain = http_ece.decrypt(body, private_key=key, auth_secret=b64u(a.auth), version="aes128gcm")
    except Exception as e:  # noqa: BLE001 - report any failure
        print(f"decryption failed: {e!r}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(plain)
    return 0


if __name__ == "__main__":
    sys.exit(main())
