#!/usr/bin/env python3
"""Verify a VAPID (RFC 8292) Authorization header with PyJWT + cryptography.

Usage: webpush_vapid_verify.py --authorization 'vapid t=..., k=...' --audience https://push.example.com
       [--public-key B64URL]   expected application server key (k must match)
Checks: scheme vapid, ES256 signature with the k key, aud == audience, exp in the future and at
most 24 h ahead, sub is mailto: or https:. Prints the claims as JSON; exits 1 on any failure.
"""
import argparse
import base64
import json
import sys
import time

import jwt
from cryptography.hazmat.primitives.asymmetric import ec


def b64u(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def fail(msg: str) -> int:
    print(msg, file=sys.stderr)
    return 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--authorization", required=True)
    ap.add_argument("--audience", required=True)
    ap.add_argument("--public-key")
    a = ap.parse_args()
    h = a.authorization.strip()
    if not h.lower().startswith("vapid "):
        return fail("scheme is not vapid")
    params = {}
    for part in h[6:].split(","):
        k, _, v = part.strip().partition("=")
        params[k.strip()] = v.strip()
    if "t" not in params or "k" not in params:
        return fail("missing t= or k=")
    if a.public_key and a.public_key != params["k"]:
        return fail("k does not match the expected public key")
    raw = b64u(params["k"])
    if len(raw) != 65 or raw[0] != 4:
        return fail("k is not an uncompressed P-256 point")
    key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), raw)
    header = jwt.get_unverified_header(params["t"])
    if header.get("alg") != "ES256":
        return fail(f"alg is {header.get('alg')}, expected ES256")
    try:
        claims = jwt.decode(params["t"], key, algorithms=["ES256"], audience=a.audience,
                            options={"require": ["aud", "exp", "sub"]})
    except Exception as e:  # noqa: BLE001
        return fail(f"JWT rejected: {e!r}")
    now = time.time()
    if not (now < claims["exp"] <= now + 24 * 3600):
        return fail(f"exp {claims['exp']} not within 24 h")
    if not (claims["sub"].startswith("mailto:") or claims["sub"].startswith("https:")):
        return fail(f"sub {claims['sub']} is not mailto: or https:")
    print(json.dumps({"header": header, "claims": claims}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
