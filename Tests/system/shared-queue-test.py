#!/usr/bin/env python3
"""Two gateways, one PostgreSQL queue: 20,000 sends shared, no token sent twice.

1. starts `pushgate mock` (counts receptions and OK answers per bench token),
2. starts two `pushgate serve` processes with queue.engine postgres on the same database
   (a fresh database on the throwaway server of scripts/start-postgres.sh unless --postgres-url),
3. posts N (default 20,000) APNs tokens, alternating requests between the two gateways,
4. waits until every token was answered OK, then checks that the mock received every token
   exactly once (no retries are provoked, so any second reception is a double lease), that both
   gateways delivered part of the work (their own /metrics), and that both exit 0 on SIGTERM.

Exit status 0 on success. Python 3 standard library only.

    Tests/system/shared-queue-test.py [--pushgate .build/debug/pushgate] [--tokens 20000] [--postgres-url URL]
"""
import argparse
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import START_POSTGRES, Run, find_pushgate, http, metric, wait_for  # noqa: E402


def fresh_database():
    """A new database on the throwaway server (started if needed) -> its URL."""
    env = dict(os.environ, PUSHGATE_PG_DB=f"pushgate_share_{os.getpid()}_{int(time.time())}")
    out = subprocess.run([START_POSTGRES], env=env, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("export PUSHGATE_TEST_POSTGRES_URL="):
            return line.split("=", 1)[1]
    raise SystemExit("shared-queue-test: start-postgres.sh printed no URL")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushgate", default=None)
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=250, help="tokens per /api/push request")
    ap.add_argument("--apns-latency-ms", type=int, default=2)
    ap.add_argument("--postgres-url", default=None, help="an empty database (default: a fresh one from scripts/start-postgres.sh)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    n = args.tokens
    url = args.postgres_url or fresh_database()
    run = Run("shared-queue-test", find_pushgate(args.pushgate, "shared-queue-test"), keep=args.keep)
    try:
        run.start_mock("--apns-latency-ms", str(args.apns_latency_ms))
        env = {
            "PUSHGATE_QUEUE_ENGINE": "postgres",
            "PUSHGATE_QUEUE_POSTGRES_URL": url,
            "PUSHGATE_QUEUE_MAX_PENDING": max(200000, n),
            "PUSHGATE_CORE_SHUTDOWN_TIMEOUT": 5,
        }
        gws = [run.start_gateway("a", env), run.start_gateway("b", env)]
        run.log(f"gateways a (pid {gws[0].pid}) and b (pid {gws[1].pid}) on {url.split('@')[-1]}; sending {n} tokens")

        # Each gateway gets every other request; both post at the same time.
        batches = [range(i, min(n, i + args.batch)) for i in range(0, n, args.batch)]
        errors = []

        def feed(k):
            try:
                for j, b in enumerate(batches):
                    if j % 2 == k:
                        run.post_tokens(gws[k].url, b, args.batch, message="shared queue")
            except SystemExit as e:
                errors.append(str(e))

        t0 = time.time()
        threads = [threading.Thread(target=feed, args=(k,)) for k in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            run.fail("; ".join(errors))
        run.log(f"all {n} accepted (200) in {time.time() - t0:.2f}s")
        wait_for(lambda: run.stats()["bench_tokens"]["ok_distinct"] >= n, args.timeout, "every token to reach the mock",
                 interval=0.2, name=run.name)
        time.sleep(1.0)  # a token sent twice would arrive within the lease round trip; give it the chance
        end = run.stats()
        missing = run.missing(n)
        per_gateway = [metric(http("GET", g.url + "/metrics")[1], "pushgate_push_success_total") for g in gws]
        run.log(f"mock: received {end['apns']['received']} APNs requests, {end['bench_tokens']['distinct']} distinct tokens, "
                f"{end['ok']} OK, {end['bench_tokens']['ok_distinct']} distinct OK; missing {len(missing)}; "
                f"delivered by a: {per_gateway[0]:.0f}, by b: {per_gateway[1]:.0f}; {time.time() - t0:.1f}s")
        for label, g in zip("ab", gws):
            run.stop_gracefully(g, label)
        problems = []
        if missing:
            problems.append(f"{len(missing)} tokens never delivered, e.g. {missing[:10]}")
        if end["apns"]["received"] != n or end["ok"] != n:
            problems.append(f"{end['apns']['received'] - n} tokens sent more than once (received {end['apns']['received']}, OK {end['ok']}, tokens {n})")
        if sum(per_gateway) != n:
            problems.append(f"the gateways counted {sum(per_gateway):.0f} deliveries, not {n}")
        if min(per_gateway) == 0:
            problems.append("one gateway delivered nothing: the queue was not shared")
        if problems:
            run.fail("; ".join(problems))
        run.log(f"PASSED: {n} tokens, each sent exactly once, shared {per_gateway[0]:.0f}/{per_gateway[1]:.0f}; both exited 0")
    finally:
        run.close()


if __name__ == "__main__":
    main()
