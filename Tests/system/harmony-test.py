#!/usr/bin/env python3
"""HarmonyOS Push Kit v3 and UnifiedPush AND_3 through a real gateway (docs/harmonyos.md).

`pushgate mock --record` serves HMS v1 and Push Kit v3 on one TLS server and writes the v3
service-account key file (mock-harmony.json) and its public key (mock-harmony-public.pem);
`pushgate serve` runs on the mock's config snippet. Checked here, independently of the Swift code:

1. Pushes to HarmonyOS tokens (platform "harmony") reach the mock's /v3/{projectId}/messages:send
   with a bearer JWT that PyJWT (installed into a venv at .build/harmony-venv) verifies with the
   service account's public key as PS256, with `kid` = key_id, `iss` = sub_account, `aud` = token_uri,
   exp - iat = 3600; and with the push-type of each notification (alert 0, background 6, VoIP 10).
2. A UnifiedPush message that would be over 4096 bytes encrypted is refused at ingest: 400 naming
   the field and the limit; one that fits is accepted.

    Tests/system/harmony-test.py [--pushgate .build/debug/pushgate] [--venv .build/harmony-venv]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import ROOT, Run, run_in_venv, find_pushgate, http, wait_for  # noqa: E402

NAME = "harmony-test"


def check(run, cond, what):
    if not cond:
        run.fail(what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushgate")
    ap.add_argument("--venv", default=os.path.join(ROOT, ".build", "harmony-venv"))
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    run = Run(NAME, find_pushgate(args.pushgate, NAME), keep=args.keep)
    run_in_venv(args.venv, run, "jwt, cryptography", "pyjwt[crypto]", "PUSHGATE_HARMONY_TEST_CHILD")
    import jwt  # PyJWT, from the venv

    try:
        run.start_mock("--record")
        mockdir = os.path.join(run.work, "mock")
        key = json.load(open(os.path.join(mockdir, "mock-harmony.json")))
        public_pem = open(os.path.join(mockdir, "mock-harmony-public.pem")).read()
        gw = run.start_gateway("harmony", {"PUSHGATE_CORE_SYNC": "true"})

        # 1. HarmonyOS: three message types, each to its own token.
        sends = [
            ({"tokens": ["harmony-alert-1"], "platform": "harmony", "title": "Hello", "message": "from Pushgate"}, 0),
            ({"tokens": ["harmony-bg-1"], "platform": 6, "data": {"sync": "now"}}, 6),
            ({"tokens": ["harmony-call-1"], "platform": 6, "push_type": "voip", "data": {"call": "c-1"}}, 10),
        ]
        status, body, _ = http("POST", gw.url + "/api/push", {"notifications": [n for n, _ in sends]})
        check(run, status == 200, f"/api/push answered {status}: {body}")
        answer = json.loads(body)
        check(run, answer.get("counts") == 3 and answer.get("logs") == [], f"sync answer: {body}")

        def received():
            return json.loads(http("GET", run.control + "/__mock/harmony-messages")[1])
        wait_for(lambda: len(received()) >= 3, 30, "three messages at the mock v3 endpoint", name=NAME)
        messages = {m["token"]: m for m in received()}
        for n, push_type in sends:
            token = n["tokens"][0]
            m = messages.get(token)
            check(run, m is not None, f"{token} did not reach the v3 endpoint: {list(messages)}")
            check(run, m["push_type"] == push_type, f"{token}: push-type {m['push_type']}, expected {push_type}")
            header = jwt.get_unverified_header(m["jwt"])
            check(run, header.get("alg") == "PS256" and header.get("kid") == key["key_id"] and header.get("typ") == "JWT",
                  f"{token}: JWT header {header}")
            try:
                claims = jwt.decode(m["jwt"], public_pem, algorithms=["PS256"], audience=key["token_uri"], issuer=key["sub_account"])
            except jwt.PyJWTError as e:
                run.fail(f"{token}: the JWT does not verify with the service account's public key: {e}")
            check(run, claims["exp"] - claims["iat"] == 3600, f"{token}: JWT lifetime {claims}")
        check(run, messages["harmony-alert-1"]["payload"]["notification"]["title"] == "Hello", f"alert payload: {messages['harmony-alert-1']}")
        check(run, json.loads(messages["harmony-bg-1"]["payload"]["extraData"]) == {"sync": "now"}, f"background payload: {messages['harmony-bg-1']}")
        # The same checks fail for a JWT signed with another key: the verification above means something.
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        try:
            jwt.decode(messages["harmony-alert-1"]["jwt"], other, algorithms=["PS256"], audience=key["token_uri"])
            run.fail("the JWT verified with an unrelated key")
        except jwt.InvalidSignatureError:
            pass
        run.log("3 HarmonyOS pushes: PS256 JWTs verified with the service account's public key; push-types 0, 6, 10")

        # 2. UnifiedPush AND_3: over 4096 bytes encrypted is refused at ingest.
        status, body, _ = http("POST", run.control + "/__mock/webpush/subscribe?count=1")
        check(run, status == 200, f"subscribe: {status} {body}")
        sub = json.loads(body)
        sub = sub[0] if isinstance(sub, list) else sub["subscriptions"][0]
        over = {"notifications": [{"platform": "unifiedpush", "subscriptions": [sub], "payload": "a" * 3994}]}
        status, body, _ = http("POST", gw.url + "/api/push", over)
        check(run, status == 400 and "payload" in body and "4096-byte limit" in body, f"oversized UnifiedPush: {status} {body}")
        fits = {"notifications": [{"platform": "unifiedpush", "subscriptions": [sub], "payload": "a" * 3993}]}
        status, body, _ = http("POST", gw.url + "/api/push", fits)
        check(run, status == 200 and json.loads(body).get("logs") == [], f"UnifiedPush at the limit: {status} {body}")
        run.log("UnifiedPush: 3994 bytes of plaintext (4097 encrypted) refused at ingest with 400; 3993 sent")

        run.stop_gracefully(gw, "harmony")
        print(f"{NAME}: PASSED", flush=True)
    finally:
        run.close()


if __name__ == "__main__":
    main()
