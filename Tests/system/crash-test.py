#!/usr/bin/env python3
"""Crash test for the durable queue: 0 tokens lost across kill -9; an Idempotency-Key
request made before the kill gets the same answer after it.

1. starts `pushgate mock` (external mock providers with a control port that counts, per bench
   token, whether it was ever answered OK),
2. starts `pushgate serve` on a SQLite queue (queue.engine sqlite, fresh file),
3. sends N (default 20,000) APNs tokens in requests of --batch tokens; every request must get 200
   (a 503 "queue full" is retried after Retry-After),
4. `kill -9`s the gateway once --kill-after deliveries have reached the mock,
5. restarts the gateway on the same store and waits until every token was answered OK,
6. checks /__mock/missing (tokens never delivered) is empty, reports duplicates,
7. sends SIGTERM to the second gateway and checks it exits 0.

Exit status 0 when no token was lost. Python 3 standard library only.

    Tests/system/crash-test.py [--pushgate .build/debug/pushgate] [--tokens 20000] [--kill-after 5000]
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
from harness import Run, bench_token, find_pushgate, wait_for  # noqa: E402


def post_with_key(url, body, key):
    """POST /api/push with an Idempotency-Key: (status, body, X-Pushgate-Request-Id, Idempotent-Replayed)."""
    req = urllib.request.Request(url + "/api/push", data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json", "Idempotency-Key": key})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode(), r.headers.get("X-Pushgate-Request-Id"), r.headers.get("Idempotent-Replayed")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers.get("X-Pushgate-Request-Id"), e.headers.get("Idempotent-Replayed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushgate", default=None, help="pushgate executable (default: .build/release or .build/debug)")
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=500, help="tokens per /api/push request")
    ap.add_argument("--kill-after", type=int, default=None, help="deliveries at the mock before kill -9 (default: tokens/4)")
    ap.add_argument("--apns-latency-ms", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=32, help="ios.max_concurrent_pushes of the gateway")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--signal", choices=["KILL", "TERM"], default="KILL",
                    help="how to stop gateway 1: KILL (crash) or TERM (graceful: must exit 0 and leave the rest in the store)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()

    n = args.tokens
    kill_after = args.kill_after if args.kill_after is not None else n // 4
    run = Run("crash-test", find_pushgate(args.pushgate, "crash-test"), keep=args.keep)
    try:
        run.start_mock("--apns-latency-ms", str(args.apns_latency_ms))
        env = {
            "PUSHGATE_QUEUE_ENGINE": "sqlite",
            "PUSHGATE_QUEUE_SQLITE_PATH": os.path.join(run.work, "store", "pushgate.sqlite"),
            "PUSHGATE_IOS_MAX_CONCURRENT_PUSHES": args.concurrency,
            "PUSHGATE_QUEUE_MAX_PENDING": max(200000, n),
            "PUSHGATE_CORE_SHUTDOWN_TIMEOUT": 1,
        }
        gw = run.start_gateway("1", env)
        # A request with an Idempotency-Key before the crash gets the same answer after it.
        idem_body = {"notifications": [{"tokens": [bench_token(n + i) for i in range(5)], "platform": 1, "message": "idempotent",
                                        "topic": "com.example.app"}]}
        first = post_with_key(gw.url, idem_body, "crash-test-key-1")
        if first[0] != 200:
            run.fail(f"the Idempotency-Key request answered {first[0]}: {first[1]}")
        run.log(f"gateway 1 pid {gw.pid}; sending {n} tokens in requests of {args.batch}")
        t0 = time.time()
        run.post_tokens(gw.url, range(n), args.batch, message="crash test")
        run.log(f"all {n} accepted (200) in {time.time() - t0:.2f}s")

        wait_for(lambda: run.stats()["ok"] >= kill_after, args.timeout, f"{kill_after} deliveries", interval=0.01, name=run.name)
        if args.signal == "KILL":
            os.kill(gw.pid, signal.SIGKILL)
            gw.wait()
        else:
            run.stop_gracefully(gw, "1")
        at_kill = run.stats()
        run.log(f"SIG{args.signal} after {at_kill['ok']} deliveries reached the mock ({at_kill['bench_tokens']['ok_distinct']} distinct)")
        if at_kill["bench_tokens"]["ok_distinct"] >= n:
            run.log("warning: everything was delivered before the kill; use more tokens or more --apns-latency-ms")

        gw2 = run.start_gateway("2", env)
        run.log(f"gateway 2 pid {gw2.pid} on the same store")
        again = post_with_key(gw2.url, idem_body, "crash-test-key-1")
        if again[0] != 200 or again[1] != first[1] or again[2] != first[2] or again[3] != "true":
            run.fail(f"Idempotency-Key after SIG{args.signal}: {again} vs first answer {first}")
        run.log(f"Idempotency-Key after SIG{args.signal}: the same answer again (request id {again[2]}, Idempotent-Replayed: true)")
        wait_for(lambda: run.stats()["bench_tokens"]["ok_distinct"] >= n + 5, args.timeout, "every token to reach the mock",
                 interval=0.2, name=run.name)
        end = run.stats()
        missing = run.missing(n + 5)
        dups = end["ok"] - end["bench_tokens"]["ok_distinct"]
        run.log(f"delivered distinct {end['bench_tokens']['ok_distinct']}/{n + 5}, answered OK {end['ok']} times, duplicates {dups}, missing {len(missing)}")
        run.stop_gracefully(gw2, "2")
        run.log("gateway 2 exited with 0 after SIGTERM")
        if missing:
            run.fail(f"{len(missing)} tokens lost, e.g. {missing[:10]}")
        run.log("PASSED: 0 tokens lost")
    finally:
        run.close()


if __name__ == "__main__":
    main()
