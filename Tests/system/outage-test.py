#!/usr/bin/env python3
"""Provider outage: APNs answers 503 for a minute, then recovers: nothing lost, memory flat.

1. starts `pushgate mock` and switches its APNs to answer every request 503 (ServiceUnavailable),
2. starts `pushgate serve` on the default durable engine (sqlite, fresh file), configured to ride out
   a minute-long outage: ios.max_retry 12 and core.retry_backoff_max_ms 10000 (the defaults, 3 retries
   and 1-2-4 s backoff, give up after ~7 s and report every token as failed instead),
3. posts N (default 10,000) APNs tokens; all must be accepted (200),
4. keeps the outage for --outage seconds and until every token met it (the mock answered N requests
   503; on a loaded machine that takes longer), sampling the gateway's RSS every second; fails when it
   grows by more than --rss-slack-mb between the first quarter of the outage and its end (retries
   must not leak),
5. ends the outage (mock answers 200 again) and waits until every token was answered OK,
6. checks no token is missing, the gateway reported 0 failures and retried, and it exits 0 on SIGTERM.

Exit status 0 on success. Python 3 standard library only.

    Tests/system/outage-test.py [--pushgate .build/debug/pushgate] [--tokens 10000] [--outage 60]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Run, find_pushgate, http, metric, rss_bytes, wait_for  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushgate", default=None)
    ap.add_argument("--tokens", type=int, default=10000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--outage", type=float, default=60, help="seconds of 503 answers")
    ap.add_argument("--engine", default="sqlite", choices=["sqlite", "memory", "postgres"])
    ap.add_argument("--rss-slack-mb", type=float, default=25)
    ap.add_argument("--timeout", type=float, default=300, help="seconds to deliver everything after the outage")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    n = args.tokens
    mb = 1024 * 1024
    run = Run("outage-test", find_pushgate(args.pushgate, "outage-test"), keep=args.keep)
    try:
        run.start_mock()
        status, text, _ = http("POST", run.control + "/__mock/failures?provider=apns&rate=1&status=503")
        if status != 200:
            run.fail(f"could not script the outage: {status} {text}")
        gw = run.start_gateway("1", {
            "PUSHGATE_QUEUE_ENGINE": args.engine,
            "PUSHGATE_QUEUE_SQLITE_PATH": os.path.join(run.work, "store", "pushgate.sqlite"),
            "PUSHGATE_IOS_MAX_RETRY": 12,
            "PUSHGATE_CORE_RETRY_BACKOFF_MAX_MS": 10000,
        })
        outage_start = time.time()
        run.log(f"APNs answers 503 from now for {args.outage:.0f}s; gateway pid {gw.pid}; sending {n} tokens")
        run.post_tokens(gw.url, range(n), args.batch, message="outage")
        run.log(f"all {n} accepted (200) in {time.time() - outage_start:.2f}s")

        # The outage lasts --outage seconds and, on a slow or loaded machine, until every token met it
        # at least once (the mock answered n requests 503): how long that takes is the machine's speed.
        samples = []  # (seconds into the outage, rss)

        def injected():
            # The mock is busy answering the retries: a slow answer here is "not yet", not a failure.
            try:
                return run.stats()["apns"]["injected"]
            except OSError:
                return 0

        while True:
            elapsed = time.time() - outage_start
            samples.append((elapsed, rss_bytes(gw.pid)))
            if elapsed >= args.outage and injected() >= n:
                break
            if elapsed >= args.outage + args.timeout:
                run.fail(f"the outage did not reach every token in {elapsed:.0f}s (was the mock scripted?)")
            time.sleep(1)
        outage_seconds = time.time() - outage_start
        during = run.stats()
        metrics = http("GET", gw.url + "/metrics")[1]
        retries = metric(metrics, "pushgate_push_retry_total")
        http("POST", run.control + "/__mock/failures?provider=apns&rate=0&status=503")
        recovered = time.time()
        warm = [r for t, r in samples if t >= outage_seconds / 4]
        base, peak = warm[0], max(warm)
        run.log(f"outage over: mock answered {during['apns']['injected']} requests 503, {during['ok']} OK; gateway retries {retries:.0f}; "
                f"{outage_seconds:.0f}s of outage; RSS {base / mb:.1f} MB at {outage_seconds / 4:.0f}s -> peak {peak / mb:.1f} MB -> {samples[-1][1] / mb:.1f} MB at the end")

        wait_for(lambda: run.stats()["bench_tokens"]["ok_distinct"] >= n, args.timeout, "every token to reach the mock",
                 interval=0.2, name=run.name)
        end = run.stats()
        missing = run.missing(n)
        metrics = http("GET", gw.url + "/metrics")[1]
        failed = metric(metrics, "pushgate_push_error_total")
        delivered = metric(metrics, "pushgate_push_success_total")
        after = rss_bytes(gw.pid)
        run.log(f"recovered: {end['bench_tokens']['ok_distinct']}/{n} delivered {time.time() - recovered:.1f}s after the outage; "
                f"gateway: {delivered:.0f} delivered, {failed:.0f} failed; RSS {after / mb:.1f} MB")
        run.stop_gracefully(gw, "1")
        problems = []
        if missing:
            problems.append(f"{len(missing)} tokens lost, e.g. {missing[:10]}")
        if failed:
            problems.append(f"the gateway gave up on {failed:.0f} deliveries")
        if during["apns"]["injected"] < n:
            problems.append("the outage did not reach every token (was the mock scripted?)")
        if peak - base > args.rss_slack_mb * mb:
            problems.append(f"RSS grew {(peak - base) / mb:.1f} MB during the outage (slack {args.rss_slack_mb} MB)")
        if problems:
            run.fail("; ".join(problems))
        run.log("PASSED: nothing lost, memory flat through the outage")
    finally:
        run.close()


if __name__ == "__main__":
    main()
