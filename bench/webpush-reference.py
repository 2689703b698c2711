#!/usr/bin/env python3
"""Web Push reference: pywebpush's RFC 8291 aes128gcm encryption and RFC 8292
VAPID signing per second, on whatever core it is pinned to, without network.

Per message it does what pywebpush.webpush() does before the POST: WebPusher(sub).encode(payload,
"aes128gcm") (a fresh P-256 ephemeral key, ECDH with the subscription's p256dh, HKDF, AES-128-GCM)
and Vapid.sign(claims) (an ES256 JWT: one ECDSA signature). It reports encrypt-only and
encrypt+sign rates; the gateway caches its VAPID JWT per origin, so "encrypt only" is the closer
match to the gateway's per-message work and "encrypt+sign" is pywebpush's per-call cost.

Usage: taskset -c 0 .venv-bench/bin/python bench/webpush-reference.py N [PAYLOAD_BYTES] [--json]
  (needs pywebpush, py-vapid, cryptography: bench/bench-references.sh makes the venv)
"""
import base64, json, os, sys, time

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives import serialization
from py_vapid import Vapid
from pywebpush import WebPusher


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 2000
    size = int(args[1]) if len(args) > 1 else 100
    as_json = "--json" in sys.argv
    # A receiver (the browser side): P-256 key pair and 16-byte auth secret.
    recv = ec.generate_private_key(ec.SECP256R1())
    p256dh = recv.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    sub = {"endpoint": "https://push.example.net/push/abc", "keys": {"p256dh": b64u(p256dh), "auth": b64u(os.urandom(16))}}
    # The payload: a gorush-like JSON of about PAYLOAD_BYTES bytes.
    payload = json.dumps({"title": "Bench", "message": "x" * max(1, size - 40), "data": {"pgbt": 1}}).encode()
    vapid = Vapid()
    vapid.generate_keys()
    claims = {"sub": "mailto:bench@example.com", "aud": "https://push.example.net"}

    def run(sign, count=n):
        c0 = time.process_time()
        w0 = time.perf_counter()
        for _ in range(count):
            WebPusher(sub).encode(payload, content_encoding="aes128gcm")
            if sign:
                claims["exp"] = int(time.time()) + 43200
                vapid.sign(claims)
        return time.process_time() - c0, time.perf_counter() - w0

    run(True, min(n, 200))  # warm-up (imports, OpenSSL tables)
    enc_cpu, enc_wall = run(False)
    both_cpu, both_wall = run(True)
    out = {
        "messages": n, "payload_bytes": len(payload),
        "encrypt_per_cpu_sec": round(n / enc_cpu), "encrypt_per_wall_sec": round(n / enc_wall),
        "encrypt_sign_per_cpu_sec": round(n / both_cpu), "encrypt_sign_per_wall_sec": round(n / both_wall),
    }
    if as_json:
        print(json.dumps(out))
    else:
        print("pywebpush, %d messages of %d bytes, one core: encrypt %d/CPU-s, encrypt+VAPID sign %d/CPU-s"
              % (n, len(payload), out["encrypt_per_cpu_sec"], out["encrypt_sign_per_cpu_sec"]))


if __name__ == "__main__":
    main()
