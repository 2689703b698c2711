#!/usr/bin/env python3
"""Scheduled sends across a restart, and cancel, with real processes.

1. starts `pushgate mock` and `pushgate serve` on a SQLite queue,
2. posts notification A (`send_at` --ahead seconds from now) and notification B (same time),
3. cancels B with `DELETE /api/push/{notif_id}` (answer: cancelled 1),
4. stops the gateway (SIGTERM) before the time, starts a second one on the same store,
5. checks at every poll before the time that the mock has received nothing, then waits for A,
6. checks B never reaches the mock (past its time plus a few polls of the store) and both
   statuses (A delivered, B cancelled).

Exit status 0 on success. Python 3 standard library only.

    Tests/system/schedule-test.py [--pushgate .build/debug/pushgate] [--ahead 6]
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Run, bench_token, find_pushgate, http, wait_for  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushgate", default=None, help="pushgate executable (default: .build/release or .build/debug)")
    ap.add_argument("--ahead", type=float, default=6, help="seconds between the post and the scheduled time")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()

    run = Run("schedule-test", find_pushgate(args.pushgate, "schedule-test"), keep=args.keep)
    try:
        run.start_mock()
        env = {
            "PUSHGATE_QUEUE_ENGINE": "sqlite",
            "PUSHGATE_QUEUE_SQLITE_PATH": os.path.join(run.work, "store", "pushgate.sqlite"),
            "PUSHGATE_CORE_SHUTDOWN_TIMEOUT": 1,
        }
        gw = run.start_gateway("1", env)
        at = int(time.time() + args.ahead) + 1

        def post(notif_id, seq):
            body = {"notifications": [{"notif_id": notif_id, "tokens": [bench_token(seq)], "platform": 1, "message": "scheduled",
                                       "topic": "com.example.app", "send_at": at}]}
            status, text, _ = http("POST", gw.url + "/api/push", body)
            if status != 200:
                run.fail(f"/api/push answered {status}: {text}")

        post("sys-sched", 0)
        post("sys-cancel", 1)
        status, text, _ = http("DELETE", gw.url + "/api/push/sys-cancel")
        answer = json.loads(text) if status == 200 else {}
        if status != 200 or (time.time() < at and answer.get("cancelled") != 1):
            run.fail(f"DELETE answered {status}: {text}")
        run.log(f"scheduled for {at} (in {at - time.time():.1f} s); cancel answered {text}")
        run.stop_gracefully(gw, "1")
        if time.time() >= at:
            run.log("warning: the gateway stopped after the scheduled time (slow machine); the restart part is weaker")
        gw2 = run.start_gateway("2", env)
        run.log(f"gateway 2 pid {gw2.pid} on the same store")

        def not_before():
            ok = run.stats()["ok"]
            if time.time() < at - 0.2 and ok != 0:
                run.fail(f"{ok} deliveries reached the mock before the scheduled time")
            return ok >= 1

        wait_for(not_before, args.timeout, "the scheduled delivery", interval=0.05, name=run.name)
        run.log(f"delivered {time.time() - at:.2f} s after its time")
        # Past its time and several polls of the store: the cancelled one was never sent.
        while time.time() < at + 4:
            time.sleep(0.2)
        missing = run.missing(2)
        if missing != [1]:
            run.fail(f"expected only the cancelled token (seq 1) missing at the mock, got {missing}")
        _, s1, _ = http("GET", gw2.url + "/api/push/sys-sched")
        _, s2, _ = http("GET", gw2.url + "/api/push/sys-cancel")
        states = (json.loads(s1)["deliveries"][0]["state"], json.loads(s2)["deliveries"][0]["state"])
        if states != ("delivered", "cancelled"):
            run.fail(f"statuses {states}: {s1} {s2}")
        run.stop_gracefully(gw2, "2")
        run.log("PASSED: sent after its time across a restart, not before; the cancelled one never sent")
    finally:
        run.close()


if __name__ == "__main__":
    main()
