#!/usr/bin/env python3
"""Prints an OAuth2 access token for FCM HTTP v1 from a service-account JSON, the way Google's
client libraries get one (RFC 7523 JWT bearer grant: an RS256 assertion with iss = client_email,
scope = firebase.messaging, aud = token_uri, kid = private_key_id, posted to token_uri). Used by
bench/bench-references.sh to give the Go reference client the bearer token the mock FCM (pushgate
mock; Sources/MockProviders/MockFCM.swift, handleToken/handleSend) accepts: the mock's send endpoint
only takes "Bearer <token>" values its token endpoint issued.

Usage: .venv-bench/bin/python bench/fcm-access-token.py SERVICE_ACCOUNT.json CA.pem
Prints: <access_token> <project_id>
"""
import json, ssl, sys, time, urllib.parse, urllib.request

import jwt  # PyJWT (with cryptography for RS256)

sa = json.load(open(sys.argv[1]))
now = int(time.time())
assertion = jwt.encode(
    {"iss": sa["client_email"], "scope": "https://www.googleapis.com/auth/firebase.messaging",
     "aud": sa["token_uri"], "iat": now, "exp": now + 3600},
    sa["private_key"], algorithm="RS256", headers={"kid": sa["private_key_id"]})
body = urllib.parse.urlencode({"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": assertion}).encode()
req = urllib.request.Request(sa["token_uri"], data=body, headers={"content-type": "application/x-www-form-urlencoded"})
ctx = ssl.create_default_context(cafile=sys.argv[2])
with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
    token = json.load(r)["access_token"]
print(token, sa["project_id"])
