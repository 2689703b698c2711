#!/usr/bin/env python3
"""OpenTelemetry tracing end to end (docs/observability.md).

A small OTLP/HTTP receiver (protobuf decoded with PyPI's `opentelemetry-proto`, installed into a
venv at .build/otel-venv) takes the spans of `pushgate serve` gateways on the built-in mocks
(`pushgate mock`):

1. `tracing.enabled: true` (PUSHGATE_TRACING_*): a POST /api/push with a `traceparent` of a known
   trace id gives the ingest span (a child of the caller's span) and the delivery attempt's span (a
   child of the ingest span, linked through the queue), both under that trace id, with the app,
   counts, platform, attempt, status and outcome attributes; a dead token's attempt is an error
   span with the provider's status and reason; a push without `traceparent` (and one with a
   malformed one) gets a fresh trace with both spans.
2. Through the SQLite queue across a restart: an attempt made by the next process (the first
   failed with 503 before the stop) is still the ingest span's child.
3. A gateway whose batch delay is long: its spans arrive when it is stopped (flushed at shutdown).
4. `tracing.enabled: false`: nothing is exported.

    Tests/system/tracing-test.py [--pushgate .build/debug/pushgate] [--venv .build/otel-venv]
"""
import argparse
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import ROOT, Run, run_in_venv, find_pushgate, free_port, http, wait_for  # noqa: E402

NAME = "tracing-test"
LIVE = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
DEAD = "dddddddd00000000000000000000000000000000000000000000000000000001"  # the mock APNs answers 410 Unregistered


class Receiver:
    """OTLP/HTTP (protobuf) trace receiver on 127.0.0.1: every span received, decoded."""

    def __init__(self):
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
        self.pb = trace_service_pb2
        self.spans, self.posts, self.lock = [], [], threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with receiver.lock:
                    receiver.posts.append((self.path, self.headers.get("content-type", "")))
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver.take(body)
                out = receiver.pb.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"

    def take(self, body):
        req = self.pb.ExportTraceServiceRequest()
        req.ParseFromString(body)
        for rs in req.resource_spans:
            resource = {a.key: value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    span = {
                        "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(), "parent": s.parent_span_id.hex(),
                        "name": s.name, "kind": s.kind, "status": s.status.code, "trace_state": s.trace_state,
                        "attrs": {a.key: value(a.value) for a in s.attributes}, "service": resource.get("service.name"),
                    }
                    with self.lock:
                        self.spans.append(span)

    def find(self, **want):
        with self.lock:
            return [s for s in self.spans if all(s.get(k) == v for k, v in want.items())]

    def find_attr(self, key, val):
        with self.lock:
            return [s for s in self.spans if s["attrs"].get(key) == val]

    def stop(self):
        self.server.shutdown()


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def push(url, token, notif_id, headers=None):
    body = {"notifications": [{"tokens": [token], "platform": 1, "message": "traced", "topic": "com.example.app", "notif_id": notif_id}]}
    import json
    import urllib.request
    req = urllib.request.Request(url + "/api/push", data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status


def spans_of(receiver, notif_id, run, timeout=60):
    """The delivery span(s) of `notif_id` and the ingest span of their trace, once both arrived."""
    def ready():
        deliver = receiver.find_attr("pushgate.notif_id", notif_id)
        return deliver and receiver.find(trace_id=deliver[0]["trace_id"], span_id=deliver[0]["parent"])
    wait_for(ready, timeout, f"the spans of {notif_id}", name=NAME)
    deliver = receiver.find_attr("pushgate.notif_id", notif_id)
    ingest = receiver.find(trace_id=deliver[0]["trace_id"], span_id=deliver[0]["parent"])[0]
    return ingest, deliver


def check(run, cond, what):
    if not cond:
        run.fail(what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushgate")
    ap.add_argument("--venv", default=os.path.join(ROOT, ".build", "otel-venv"))
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    run = Run(NAME, find_pushgate(args.pushgate, NAME), keep=args.keep)
    run_in_venv(args.venv, run, "opentelemetry.proto.collector.trace.v1.trace_service_pb2", "opentelemetry-proto", "PUSHGATE_TRACING_TEST_CHILD")
    receiver = Receiver()
    off_receiver = Receiver()
    try:
        run.start_mock()
        traced = {
            "PUSHGATE_TRACING_ENABLED": "true", "PUSHGATE_TRACING_ENDPOINT": receiver.url,
            "PUSHGATE_TRACING_SERVICE_NAME": "pushgate-trace-test", "PUSHGATE_QUEUE_ENGINE": "sqlite",
            "PUSHGATE_QUEUE_SQLITE_PATH": os.path.join(run.work, "traced.sqlite"),
            # The SDK's own variable: a short batch delay, so the spans arrive soon.
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }
        for k in list(os.environ):
            if k.startswith("OTEL_"):
                del os.environ[k]
        gw = run.start_gateway("traced", traced)

        # 1. The caller's trace: ingest span under the caller's span, delivery span under the ingest span.
        trace_id, caller_span = uuid.uuid4().hex, uuid.uuid4().hex[:16]
        check(run, push(gw.url, LIVE, "traced-1", {"traceparent": f"00-{trace_id}-{caller_span}-01", "tracestate": "vendor=abc"}) == 200,
              "push with traceparent not accepted")
        ingest, deliver = spans_of(receiver, "traced-1", run)
        check(run, ingest["trace_id"] == trace_id, f"ingest span not in the caller's trace: {ingest}")
        check(run, ingest["parent"] == caller_span, f"ingest span not the child of the caller's span: {ingest}")
        check(run, ingest["name"] == "POST /api/push" and ingest["kind"] == 2, f"ingest span name/kind (SERVER): {ingest}")
        check(run, ingest["trace_state"] == "vendor=abc", f"tracestate not kept: {ingest}")
        a = ingest["attrs"]
        check(run, a.get("pushgate.outcome") == "accepted" and a.get("http.response.status_code") == 200, f"ingest attributes: {a}")
        check(run, a.get("pushgate.app") == "default" and a.get("pushgate.notifications") == 1 and a.get("pushgate.deliveries") == 1,
              f"ingest counts: {a}")
        check(run, ingest["service"] == "pushgate-trace-test", f"service.name: {ingest['service']}")
        check(run, len(deliver) == 1, f"one attempt expected: {deliver}")
        d = deliver[0]
        check(run, d["trace_id"] == trace_id and d["parent"] == ingest["span_id"], f"delivery span not the ingest span's child: {d}")
        check(run, d["kind"] == 3, f"delivery span kind (CLIENT): {d}")
        da = d["attrs"]
        check(run, da.get("pushgate.platform") == "ios" and da.get("pushgate.outcome") == "delivered" and da.get("pushgate.attempt") == 1,
              f"delivery attributes: {da}")
        check(run, da.get("pushgate.provider_message_id"), f"no provider message id: {da}")
        check(run, "pushgate.token" not in da and LIVE not in str(da), f"the token is in a span though log.hide_token: {da}")
        run.log(f"caller's trace {trace_id}: ingest span {ingest['span_id']} -> delivery span {d['span_id']} (delivered)")

        # A dead token: the attempt's span is an error with the provider's status and reason.
        trace_dead = uuid.uuid4().hex
        push(gw.url, DEAD, "traced-dead", {"traceparent": f"00-{trace_dead}-{uuid.uuid4().hex[:16]}-01"})
        ingest_dead, deliver_dead = spans_of(receiver, "traced-dead", run)
        dd = deliver_dead[0]
        check(run, ingest_dead["trace_id"] == trace_dead and dd["parent"] == ingest_dead["span_id"], f"dead token's spans: {dd}")
        check(run, dd["attrs"].get("http.response.status_code") == 410 and dd["attrs"].get("pushgate.outcome") == "failed"
              and dd["attrs"].get("pushgate.reason") == "Unregistered" and dd["status"] == 2, f"dead token's attempt span: {dd}")
        run.log("dead token: attempt span status ERROR, 410 Unregistered, outcome failed")

        # 2. No traceparent, and a malformed one: a fresh trace with both spans.
        for label, headers in (("fresh", {}), ("garbage", {"traceparent": "00-zz-not-a-trace" + "x" * 300})):
            notif = f"traced-{label}"
            check(run, push(gw.url, LIVE, notif, headers) == 200, f"push ({label}) not accepted")
            ing, dl = spans_of(receiver, notif, run)
            check(run, ing["parent"] == "" and ing["trace_id"] not in (trace_id, trace_dead), f"{label}: not a fresh trace: {ing}")
            check(run, dl[0]["trace_id"] == ing["trace_id"] and dl[0]["parent"] == ing["span_id"], f"{label}: delivery span: {dl[0]}")
            run.log(f"{label}: fresh trace {ing['trace_id']} with the ingest and the delivery span")
        check(run, all(p == ("/v1/traces", "application/x-protobuf") for p in receiver.posts), f"posts: {set(receiver.posts)}")

        # 3. Through the durable queue across a restart: the first attempt fails (the mock APNs answers
        # 503 to everything), the gateway stops with the delivery waiting to retry; a new gateway on
        # the same SQLite file delivers it, and that attempt's span is still the ingest span's child.
        durable = dict(traced, PUSHGATE_QUEUE_SQLITE_PATH=os.path.join(run.work, "restart.sqlite"), PUSHGATE_CORE_RETRY_BACKOFF_MS="3000")
        check(run, http("POST", run.control + "/__mock/failures?provider=apns&rate=1&status=503")[0] == 200, "mock failures")
        first = run.start_gateway("restart-1", durable)
        trace_restart, caller_restart = uuid.uuid4().hex, uuid.uuid4().hex[:16]
        push(first.url, LIVE, "restart-1", {"traceparent": f"00-{trace_restart}-{caller_restart}-01"})
        wait_for(lambda: receiver.find_attr("pushgate.notif_id", "restart-1"), 60, "the first (failed) attempt's span", name=NAME)
        run.stop_gracefully(first, "restart-1")
        check(run, http("POST", run.control + "/__mock/failures?provider=apns&rate=0&status=503")[0] == 200, "mock failures off")
        second = run.start_gateway("restart-2", durable)
        wait_for(lambda: any(s["attrs"].get("pushgate.outcome") == "delivered" for s in receiver.find_attr("pushgate.notif_id", "restart-1")),
                 60, "the attempt after the restart", name=NAME)
        attempts = receiver.find_attr("pushgate.notif_id", "restart-1")
        ingest_restart = receiver.find(trace_id=trace_restart, parent=caller_restart)
        check(run, len(ingest_restart) == 1, f"the ingest span of restart-1: {ingest_restart}")
        check(run, all(a["trace_id"] == trace_restart and a["parent"] == ingest_restart[0]["span_id"] for a in attempts),
              f"an attempt not under the ingest span: {attempts}")
        check(run, attempts[0]["attrs"].get("pushgate.outcome") == "retry" and attempts[0]["attrs"].get("http.response.status_code") == 503,
              f"first attempt: {attempts[0]}")
        last = attempts[-1]["attrs"]
        check(run, last.get("pushgate.outcome") == "delivered" and last.get("pushgate.attempt", 0) >= 2, f"attempt after the restart: {last}")
        run.stop_gracefully(second, "restart-2")
        run.log(f"across a restart: {len(attempts)} attempts, the last (#{last.get('pushgate.attempt')}, delivered) still under the ingest span")

        # 4. Spans waiting in the batch are flushed when the gateway stops.
        lazy = dict(traced, OTEL_BSP_SCHEDULE_DELAY="600000", PUSHGATE_QUEUE_SQLITE_PATH=os.path.join(run.work, "lazy.sqlite"))
        gw2 = run.start_gateway("lazy", lazy)
        trace_lazy = uuid.uuid4().hex
        push(gw2.url, LIVE, "lazy-1", {"traceparent": f"00-{trace_lazy}-{uuid.uuid4().hex[:16]}-01"})
        wait_for(lambda: http("GET", gw2.url + "/api/push/lazy-1")[1].count('"delivered"') >= 1, 60, "lazy-1 delivered", name=NAME)
        check(run, not receiver.find(trace_id=trace_lazy), "spans exported before the batch delay: the test proves nothing")
        run.stop_gracefully(gw2, "lazy")
        ingest_lazy, _ = spans_of(receiver, "lazy-1", run, timeout=10)
        check(run, ingest_lazy["trace_id"] == trace_lazy, f"flushed spans: {ingest_lazy}")
        run.log("spans still in the batch were flushed at shutdown")

        # 5. tracing.enabled: false: nothing is exported.
        off = dict(traced, PUSHGATE_TRACING_ENABLED="false", PUSHGATE_TRACING_ENDPOINT=off_receiver.url,
                   PUSHGATE_QUEUE_SQLITE_PATH=os.path.join(run.work, "off.sqlite"))
        gw3 = run.start_gateway("off", off)
        push(gw3.url, LIVE, "off-1", {"traceparent": f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"})
        wait_for(lambda: http("GET", gw3.url + "/api/push/off-1")[1].count('"delivered"') >= 1, 60, "off-1 delivered", name=NAME)
        run.stop_gracefully(gw3, "off")
        check(run, not off_receiver.posts, f"tracing off, yet {len(off_receiver.posts)} posts reached the collector")
        run.log("tracing.enabled false: nothing exported")
        run.stop_gracefully(gw, "traced")
        print(f"{NAME}: PASSED", flush=True)
    finally:
        receiver.stop()
        off_receiver.stop()
        run.close()


if __name__ == "__main__":
    main()
