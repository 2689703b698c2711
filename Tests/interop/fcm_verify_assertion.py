#!/usr/bin/env python3
"""Verify a Pushgate FCM OAuth2 assertion with Google's own google-auth library.

Usage: fcm_verify_assertion.py ASSERTION_FILE CERT_PEM_FILE TOKEN_URI [KID] [ISS]

Checks, with google.auth.jwt.decode: the RS256 signature against the service account's
X.509 certificate (looked up by `kid` when KID is given, as Google's cert endpoint does),
aud == TOKEN_URI, iat/exp validity; then iss, scope and exp - iat <= 3600.
Exit 0 and print "OK <claims json>" on success; exit 1 with the reason otherwise.
"""
import json
import sys

from google.auth import jwt

SCOPE = "https://www.googleapis.com/auth/firebase.messaging"


def main(argv):
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    assertion = open(argv[1]).read().strip()
    cert = open(argv[2]).read()
    token_uri = argv[3]
    kid = argv[4] if len(argv) > 4 and argv[4] else None
    iss = argv[5] if len(argv) > 5 and argv[5] else None

    certs = {kid: cert} if kid else cert
    try:
        header = jwt.decode_header(assertion)
        claims = jwt.decode(assertion, certs=certs, audience=token_uri)
    except Exception as e:  # google.auth.exceptions.* or ValueError
        print("FAIL google-auth: %s: %s" % (type(e).__name__, e))
        return 1

    problems = []
    if header.get("alg") != "RS256":
        problems.append("alg is %r" % header.get("alg"))
    if header.get("typ") not in (None, "JWT"):
        problems.append("typ is %r" % header.get("typ"))
    if kid and header.get("kid") != kid:
        problems.append("kid is %r, expected %r" % (header.get("kid"), kid))
    if iss and claims.get("iss") != iss:
        problems.append("iss is %r, expected %r" % (claims.get("iss"), iss))
    if SCOPE not in str(claims.get("scope", "")).split(" "):
        problems.append("scope is %r" % claims.get("scope"))
    iat, exp = claims.get("iat"), claims.get("exp")
    if not isinstance(iat, int) or not isinstance(exp, int) or not (0 < exp - iat <= 3600):
        problems.append("iat/exp are %r/%r" % (iat, exp))
    if problems:
        print("FAIL " + "; ".join(problems))
        return 1
    print("OK " + json.dumps(claims, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
