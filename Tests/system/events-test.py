#!/usr/bin/env python3
"""Delivery event webhook: the receiver is down for a while, then up: no event lost, each signed.

1. starts `pushgate mock` and `pushgate serve` (sqlite engine, fresh file) with `events.webhook_url`
   pointing at a port where nobody listens yet and `events.secret` set,
2. posts N/2 APNs tokens (N events: `accepted` and `sent` for each); all must be accepted (200),
3. keeps the receiver down for --down seconds (the gateway retries meanwhile; its
   pushgate_events_post_failures_total grows, /readyz stays 200),
4. starts the receiver (a plain-HTTP server in this script) and waits until it got every event,
5. checks: every id received (at least once), ids consecutive (none missing), each POST's
   X-Pushgate-Signature is the HMAC-SHA256 of its body under the secret, dropped_total 0, and the
   gateway exits 0 on SIGTERM.

Exit status 0 on success. Python 3 standard library only.

    Tests/system/events-test.py [--pushgate .build/debug/pushgate] [--events 10000] [--down 10]
"""
import argparse
import hashlib
import hmac
import http.server as httpserver
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Run, find_pushgate, free_port, http, metric, wait_for  # noqa: E402

SECRET = "events-test-secret-0123456789"


class Receiver:
    def __init__(self, port):
        self.port = port
        self.lock = threading.Lock()
        self.ids = {}
        self.posts = 0
        self.bad_signatures = 0
        self.server = None

    def start(self):
        receiver = self

        class Handler(httpserver.BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
                ok = hmac.compare_digest(expected, self.headers.get("X-Pushgate-Signature", ""))
                events = json.loads(body)
                with receiver.lock:
                    receiver.posts += 1
                    if not ok:
                        receiver.bad_signatures += 1
                    for e in events:
                        receiver.ids[e["id"]] = e["type"]
                self.send_response(200 if ok else 401)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = httpserver.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        if self.server:
            self.server.shutdown()

    def count(self):
        with self.lock:
            return len(self.ids)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushgate", default=None)
    ap.add_argument("--events", type=int, default=10000)
    ap.add_argument("--down", type=float, default=10, help="seconds the receiver stays down after every push was accepted")
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    tokens = max(1, args.events // 2)
    total = 2 * tokens
    run = Run("events-test", find_pushgate(args.pushgate, "events-test"), keep=args.keep)
    receiver = Receiver(free_port())
    try:
        run.start_mock()
        gw = run.start_gateway("1", {
            "PUSHGATE_QUEUE_ENGINE": "sqlite",
            "PUSHGATE_QUEUE_SQLITE_PATH": os.path.join(run.work, "store", "pushgate.sqlite"),
            "PUSHGATE_EVENTS_WEBHOOK_URL": f"http://127.0.0.1:{receiver.port}/events",
            "PUSHGATE_EVENTS_SECRET": SECRET,
            "PUSHGATE_EVENTS_BATCH_MAX": 500,
            "PUSHGATE_EVENTS_BATCH_MS": 50,
            "PUSHGATE_EVENTS_RETRY_MAX_MS": 1000,
        })
        t0 = time.time()
        run.post_tokens(gw.url, range(tokens), 500, message="events")
        run.log(f"{tokens} tokens accepted in {time.time() - t0:.1f}s; receiver down for {args.down:.0f}s")
        wait_for(lambda: metric(http("GET", gw.url + "/metrics")[1], "pushgate_events_post_failures_total") >= 1, 30,
                 "a failed webhook POST while the receiver is down", name=run.name)
        time.sleep(args.down)
        status, _, _ = http("GET", gw.url + "/readyz")
        if status != 200:
            run.fail(f"/readyz answered {status} during the webhook outage")
        if receiver.count() != 0:
            run.fail("events arrived while the receiver was down")
        receiver.start()
        t1 = time.time()
        wait_for(lambda: receiver.count() >= total, args.timeout, f"{total} events at the receiver", name=run.name)
        run.log(f"{total} events received {time.time() - t1:.1f}s after the receiver came up, in {receiver.posts} POSTs")
        ids = sorted(int(i) for i in receiver.ids)
        if len(ids) != total or ids[-1] - ids[0] + 1 != total:
            run.fail(f"ids: {len(ids)} distinct, span {ids[-1] - ids[0] + 1}, expected {total}")
        types = list(receiver.ids.values())
        if types.count("accepted") != tokens or types.count("sent") != tokens:
            run.fail(f"types: {types.count('accepted')} accepted, {types.count('sent')} sent, expected {tokens} each")
        if receiver.bad_signatures:
            run.fail(f"{receiver.bad_signatures} POSTs with a wrong X-Pushgate-Signature")
        m = http("GET", gw.url + "/metrics")[1]
        if metric(m, "pushgate_events_dropped_total") != 0:
            run.fail(f"dropped_total {metric(m, 'pushgate_events_dropped_total')}")
        wait_for(lambda: metric(http("GET", gw.url + "/metrics")[1], "pushgate_events_pending") == 0, 30, "pending 0", name=run.name)
        run.stop_gracefully(gw, "1")
        run.log(f"PASSED: {total} events, none lost, all signed; {metric(m, 'pushgate_events_post_failures_total'):.0f} failed POSTs during the outage")
    finally:
        receiver.stop()
        run.close()


if __name__ == "__main__":
    main()
