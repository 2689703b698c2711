#!/usr/bin/env python3
"""Several apps in one gateway, with real processes: SIGHUP and kill -9.

1. starts `pushgate mock --record` (its APNs trusts mock-apns.p8 and two app keys, mock-apns-app1.p8
   kid MOCKAPP001 and mock-apns-app2.p8 kid MOCKAPP002, and records each request's JWT kid),
2. starts `pushgate serve` on a SQLite queue with one app, chat (app1's key, topic com.example.chat),
3. sends --tokens chat deliveries and, while they are being sent, adds the app wallet (app2's key,
   topic com.example.wallet) to the file and sends SIGHUP: wallet's key must work within a second,
   without a restart, and every chat delivery must still arrive,
4. sends --tokens wallet deliveries and kill -9s the gateway once some have arrived,
5. restarts it on the same store: every wallet delivery arrives, each under wallet's key and topic,
   and every chat delivery was sent under chat's.

Exit status 0 when all holds. Python 3 standard library only.

    Tests/system/multiapp-test.py [--pushgate .build/debug/pushgate] [--tokens 2000]
"""
import argparse
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Run, bench_token, find_pushgate, http, wait_for  # noqa: E402

ADMIN = "multiapp-admin-key-0123456789"
CHAT = "multiapp-chat-key-0123456789"
WALLET = "multiapp-wallet-key-0123456789"


def push(url, key, seqs, app=None):
    body = {"notifications": [{"tokens": [bench_token(s) for s in seqs], "platform": 1, "message": "multi-app"}]}
    if app:
        body["app_id"] = app
    req = urllib.request.Request(url + "/api/push", data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json", "authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def push_all(run, url, key, seqs, batch=500):
    seqs = list(seqs)
    i = 0
    while i < len(seqs):
        part = seqs[i:i + batch]
        status, text, headers = push(url, key, part)
        if status in (503, 429):
            time.sleep(float(headers.get("Retry-After", "1")))
            continue
        if status != 200:
            run.fail(f"/api/push answered {status}: {text}")
        i += len(part)


def app_yaml(run, app, key, n):
    return run.app_yaml(app, key, n, extra=", max_concurrent_pushes: 4")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushgate", default=None)
    ap.add_argument("--tokens", type=int, default=2000, help="deliveries per app")
    ap.add_argument("--timeout", type=float, default=180)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    n = args.tokens
    chat = range(0, n)
    wallet = range(n, 2 * n)

    run = Run("multiapp-test", find_pushgate(args.pushgate, "multiapp-test"), keep=args.keep)
    try:
        run.start_mock("--record", "--apns-latency-ms", "2")
        snippet = run.read_mock_apps()
        config = os.path.join(run.work, "multi.yml")
        base = snippet + "\napps:\n" + app_yaml(run, "chat", CHAT, 1)
        open(config, "w").write(base)
        run.snippet = config  # start_gateway serves `-c run.snippet`
        env = {
            "PUSHGATE_QUEUE_ENGINE": "sqlite",
            "PUSHGATE_QUEUE_SQLITE_PATH": os.path.join(run.work, "store", "pushgate.sqlite"),
            "PUSHGATE_CORE_ADMIN_KEYS": ADMIN,
            "PUSHGATE_CORE_SHUTDOWN_TIMEOUT": 1,
        }
        gw = run.start_gateway("1", env)
        status = push(gw.url, WALLET, [2 * n + 10])[0]
        if status != 401:
            run.fail(f"wallet's key before wallet exists: expected 401, got {status}")

        # chat's deliveries in flight while wallet is added by SIGHUP.
        push_all(run, gw.url, CHAT, chat)
        wait_for(lambda: run.stats()["ok"] >= n // 10, args.timeout, "some chat deliveries", interval=0.01, name=run.name)
        open(config, "w").write(base + app_yaml(run, "wallet", WALLET, 2))
        at_hup = run.stats()["ok"]
        t0 = time.time()
        os.kill(gw.pid, signal.SIGHUP)
        while True:
            sent = time.time()
            if push(gw.url, WALLET, [2 * n + 1])[0] == 200:
                break
            if time.time() - t0 > 1.0:
                run.dump_log("gateway-1.log")
                run.fail("wallet's key did not work within 1 s of SIGHUP")
            time.sleep(0.02)
        run.log(f"SIGHUP added wallet with {n - at_hup} chat deliveries still under way: a request sent "
                f"{sent - t0:.3f}s after it was accepted with wallet's key (same pid {gw.pid}, no restart)")
        if gw.poll() is not None:
            run.fail("the gateway exited on SIGHUP")
        # A bad file: the running configuration stays, one log line names the key.
        open(config, "w").write(base + app_yaml(run, "wallet", "short", 2))
        os.kill(gw.pid, signal.SIGHUP)
        log = os.path.join(run.work, "gateway-1.log")
        wait_for(lambda: "apps[wallet].api_keys" in open(log).read(), 10, "the reload error in the log", name=run.name)
        if push(gw.url, WALLET, [2 * n + 2])[0] != 200:
            run.fail("after a bad file, wallet's key must still work")
        run.log("SIGHUP with a bad file: refused, logged naming apps[wallet].api_keys, the running apps stay")
        open(config, "w").write(base + app_yaml(run, "wallet", WALLET, 2))

        # wallet's deliveries, then kill -9 while they are queued.
        ok_before = run.stats()["ok"]
        push_all(run, gw.url, WALLET, wallet)
        wait_for(lambda: run.stats()["ok"] >= ok_before + n // 10, args.timeout, "some wallet deliveries", interval=0.01, name=run.name)
        os.kill(gw.pid, signal.SIGKILL)
        gw.wait()
        delivered = run.stats()["ok"]
        run.log(f"kill -9 with {delivered} of {2 * n + 1} delivered")
        gw2 = run.start_gateway("2", env)
        wait_for(lambda: not run.missing(2 * n), args.timeout, "every delivery after the restart", interval=0.2, name=run.name)
        missing = run.missing(2 * n)
        if missing:
            run.fail(f"{len(missing)} deliveries lost, e.g. {missing[:5]}")

        # Every delivery went out under its own app's key and topic.
        reqs = json.loads(http("GET", run.control + "/__mock/apns-requests")[1])
        by_token = {}
        for r in reqs:
            by_token.setdefault(r["token"], []).append(r)
        wrong = []
        for seqs, kid, topic in ((chat, "MOCKAPP001", "com.example.chat"), (wallet, "MOCKAPP002", "com.example.wallet")):
            for s in seqs:
                rs = by_token.get(bench_token(s), [])
                if not any(r["status"] == 200 for r in rs):
                    wrong.append((s, "never answered 200"))
                for r in rs:
                    if r["kid"] != kid or r["topic"] != topic:
                        wrong.append((s, r["kid"], r["topic"]))
        if wrong:
            run.fail(f"{len(wrong)} deliveries under the wrong app or not delivered, e.g. {wrong[:5]}")
        after = sum(1 for s in wallet for r in by_token.get(bench_token(s), []) if r["status"] == 200)
        run.log(f"all {n} chat deliveries under MOCKAPP001/com.example.chat, all {n} wallet deliveries under "
                f"MOCKAPP002/com.example.wallet ({after} wallet answers OK in total, duplicates from the kill included)")
        run.stop_gracefully(gw2, "2")
        run.log("PASSED")
    finally:
        run.close()


if __name__ == "__main__":
    main()
