#!/usr/bin/env python3
"""No stop waits on a peer: SIGTERM exits within a bound while the event webhook's receiver or the
OpenTelemetry collector or the feedback hook accepts connections but never answers; nothing stored
is lost.

1. webhook, SQLite engine: the receiver is a socket that accepts and never answers. N APNs tokens
   are delivered (2N events stored, a POST hangs at the receiver), then SIGTERM: the gateway must
   exit (status 0) within --bound seconds. A second gateway on the same file, with a receiver that
   answers, must post all 2N events (ids consecutive), and stop within the bound too.
2. webhook, memory engine: the same silent receiver; exit within the bound, and the log says how
   many events the memory engine drops.
3. the feedback hook silent while every delivery fails: exit within the bound, the drop logged.
4. tracing on, the collector silent (an export in flight: `OTEL_BSP_SCHEDULE_DELAY` 200 ms): exit
   within the bound.

The bound is the 2 s a stop may take here plus slack for a loaded debug build: it bounds a stop, it
is not a speed figure. Before the stop grace these stops took 19 s (webhook: its 10 s drain plus
its POST timeout), 19 s (collector: export and flush timeouts) and over 60 s (feedback hook: five
10 s attempts per entry).

    Tests/system/shutdown-peers-test.py [--pushgate .build/debug/pushgate] [--tokens 200] [--bound 6]
                                        [--only webhook|memory|feedback|collector]
"""
import argparse
import http.server as httpserver
import json
import os
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Run, find_pushgate, free_port, http, wait_for  # noqa: E402

NAME = "shutdown-peers-test"


class SilentPeer:
    """Accepts TCP connections, reads what comes, never answers."""

    def __init__(self, port):
        self.port = port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(64)
        self.conns = []
        self.bytes = 0
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.conns.append(c)
            threading.Thread(target=self.read, args=(c,), daemon=True).start()

    def read(self, c):
        while True:
            try:
                b = c.recv(65536)
            except OSError:
                return
            if not b:
                return
            with self.lock:
                self.bytes += len(b)

    def received(self):
        with self.lock:
            return self.bytes

    def close(self):
        self.closed = True
        try:
            # Wakes the thread blocked in accept() (Linux), so the port is free at once.
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
        with self.lock:
            for c in self.conns:
                try:
                    c.close()
                except OSError:
                    pass


class Receiver:
    """An event webhook receiver that answers 200."""

    def __init__(self, port):
        receiver = self
        self.lock = threading.Lock()
        self.ids = {}

        class Handler(httpserver.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    for e in json.loads(body):
                        receiver.ids[e["id"]] = e["type"]
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        httpserver.ThreadingHTTPServer.allow_reuse_address = True
        self.server = httpserver.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self):
        with self.lock:
            return len(self.ids)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def delivered(run, gw):
    return json.loads(http("GET", gw.url + "/api/stat/app")[1])["ios"]["push_success"]


def timed_stop(run, gw, label, bound):
    """SIGTERM; the gateway must exit 0 within `bound` seconds. Returns the seconds it took."""
    t0 = time.monotonic()
    os.kill(gw.pid, signal.SIGTERM)
    try:
        rc = gw.wait(timeout=max(60, 4 * bound))
    except Exception:
        run.dump_log(f"gateway-{label}.log")
        run.fail(f"gateway {label} did not exit within {max(60, 4 * bound)} s of SIGTERM")
    took = time.monotonic() - t0
    if rc != 0:
        run.dump_log(f"gateway-{label}.log")
        run.fail(f"gateway {label} exited with {rc} after SIGTERM")
    run.log(f"gateway {label}: exited {took:.2f} s after SIGTERM")
    if took > bound:
        run.dump_log(f"gateway-{label}.log")
        run.fail(f"gateway {label} took {took:.2f} s to stop (bound {bound} s): it waited on a silent peer")
    return took


def log_text(run, label):
    with open(os.path.join(run.work, f"gateway-{label}.log")) as f:
        return f.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushgate", default=None)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--bound", type=float, default=6.0, help="seconds a stop may take (2 s plus slack)")
    ap.add_argument("--only", choices=["webhook", "memory", "feedback", "collector"], help="run one case only")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    for k in list(os.environ):
        if k.startswith("OTEL_"):
            del os.environ[k]
    run = Run(NAME, find_pushgate(args.pushgate, NAME), keep=args.keep)
    peers = []
    try:
        run.start_mock()
        if args.only in (None, "webhook"):
            webhook_case(run, args, peers)
        if args.only in (None, "memory"):
            memory_case(run, args, peers)
        if args.only in (None, "feedback"):
            feedback_case(run, args, peers)
        if args.only in (None, "collector"):
            collector_case(run, args, peers)
        run.log(f"PASSED: every stop within {args.bound} s with a silent peer; stored events posted after the restart")
    finally:
        for p in peers:
            try:
                p.stop() if isinstance(p, Receiver) else p.close()
            except Exception:
                pass
        run.close()


def webhook_case(run, args, peers):
    """Webhook silent, SQLite: a bounded stop, then every stored event posted after the restart."""
    n = args.tokens
    port = free_port()
    silent = SilentPeer(port)
    peers.append(silent)
    store = os.path.join(run.work, "store", "pushgate.sqlite")
    env = {
        "PUSHGATE_QUEUE_ENGINE": "sqlite", "PUSHGATE_QUEUE_SQLITE_PATH": store,
        "PUSHGATE_EVENTS_WEBHOOK_URL": f"http://127.0.0.1:{port}/events",
        "PUSHGATE_EVENTS_BATCH_MAX": 100, "PUSHGATE_EVENTS_BATCH_MS": 50,
    }
    gw = run.start_gateway("webhook-silent", env)
    run.post_tokens(gw.url, range(n), 100, message="shutdown")
    wait_for(lambda: delivered(run, gw) >= n, 120, f"{n} deliveries", name=run.name)
    wait_for(lambda: silent.received() > 0, 30, "a webhook POST at the silent receiver", name=run.name)
    timed_stop(run, gw, "webhook-silent", args.bound)
    text = log_text(run, "webhook-silent")
    if "kept in the store for the next start" not in text:
        run.fail("the stop did not log the events kept for the next start")
    silent.close()
    receiver = Receiver(port)
    peers.append(receiver)
    gw = run.start_gateway("webhook-up", env)
    wait_for(lambda: receiver.count() >= 2 * n, 120, f"{2 * n} events at the receiver after the restart", name=run.name)
    ids = sorted(int(i) for i in receiver.ids)
    types = list(receiver.ids.values())
    if len(ids) != 2 * n or ids[-1] - ids[0] + 1 != 2 * n:
        run.fail(f"ids: {len(ids)} distinct, span {ids[-1] - ids[0] + 1}, expected {2 * n}")
    if types.count("accepted") != n or types.count("sent") != n:
        run.fail(f"types: {types.count('accepted')} accepted, {types.count('sent')} sent, expected {n} each")
    run.log(f"after the restart: {2 * n} stored events posted, none lost")
    timed_stop(run, gw, "webhook-up", args.bound)
    receiver.stop()



def memory_case(run, args, peers):
    """Webhook silent, memory engine: a bounded stop that says what it drops."""
    n = args.tokens
    port = free_port()
    silent = SilentPeer(port)
    peers.append(silent)
    gw = run.start_gateway("memory-silent", {
        "PUSHGATE_QUEUE_ENGINE": "memory", "PUSHGATE_EVENTS_WEBHOOK_URL": f"http://127.0.0.1:{port}/events",
        "PUSHGATE_EVENTS_BATCH_MAX": 100, "PUSHGATE_EVENTS_BATCH_MS": 50,
    })
    run.post_tokens(gw.url, range(n, 2 * n), 100, message="shutdown")
    wait_for(lambda: delivered(run, gw) >= n, 120, f"{n} deliveries", name=run.name)
    wait_for(lambda: silent.received() > 0, 30, "a webhook POST at the silent receiver", name=run.name)
    timed_stop(run, gw, "memory-silent", args.bound)
    if "the memory engine drops them" not in log_text(run, "memory-silent"):
        run.dump_log("gateway-memory-silent.log")
        run.fail("the memory engine's stop did not log the events it drops")
    silent.close()



def feedback_case(run, args, peers):
    """The feedback hook silent while every delivery fails (410 Unregistered): a bounded stop that
    logs the entries it drops."""
    n = args.tokens
    port = free_port()
    silent = SilentPeer(port)
    peers.append(silent)
    if http("POST", run.control + "/__mock/failures?provider=apns&rate=1&status=410")[0] != 200:
        run.fail("the mock refused to inject failures")
    try:
        gw = run.start_gateway("feedback-silent", {
            "PUSHGATE_QUEUE_ENGINE": "memory", "PUSHGATE_CORE_FEEDBACK_HOOK_URL": f"http://127.0.0.1:{port}/feedback",
        })
        run.post_tokens(gw.url, range(4 * n, 5 * n), 100, message="shutdown")
        wait_for(lambda: json.loads(http("GET", gw.url + "/api/stat/app")[1])["ios"]["push_error"] >= n, 120,
                 f"{n} failed deliveries", name=run.name)
        wait_for(lambda: silent.received() > 0, 30, "a POST at the silent feedback hook", name=run.name)
        timed_stop(run, gw, "feedback-silent", args.bound)
        if "feedback hook did not take" not in log_text(run, "feedback-silent"):
            run.dump_log("gateway-feedback-silent.log")
            run.fail("the stop did not log the feedback entries it drops")
    finally:
        http("POST", run.control + "/__mock/failures?provider=apns&rate=0&status=410")
    silent.close()


def collector_case(run, args, peers):
    """The OpenTelemetry collector silent, an export in flight: a bounded stop."""
    n = args.tokens
    port = free_port()
    silent = SilentPeer(port)
    peers.append(silent)
    gw = run.start_gateway("collector-silent", {
        "PUSHGATE_QUEUE_ENGINE": "memory", "PUSHGATE_TRACING_ENABLED": "true",
        "PUSHGATE_TRACING_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_BSP_SCHEDULE_DELAY": "200",
    })
    run.post_tokens(gw.url, range(2 * n, 3 * n), 100, message="shutdown")
    wait_for(lambda: delivered(run, gw) >= n, 120, f"{n} deliveries", name=run.name)
    wait_for(lambda: silent.received() > 0, 30, "an export at the silent collector", name=run.name)
    # Spans made after the export that hangs: the stop's flush has some to send too.
    run.post_tokens(gw.url, range(3 * n, 3 * n + 10), 10, message="shutdown")
    wait_for(lambda: delivered(run, gw) >= n + 10, 120, f"{n + 10} deliveries", name=run.name)
    timed_stop(run, gw, "collector-silent", args.bound)
    silent.close()

if __name__ == "__main__":
    main()
