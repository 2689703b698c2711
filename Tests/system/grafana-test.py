#!/usr/bin/env python3
"""contrib/grafana/pushgate.json against a live gateway: every metric a panel or variable queries,
and every label it filters or groups by, is on the gateway's /metrics.

Starts `pushgate mock` (a fifth of APNs requests answered 503, so retries happen) and
`pushgate serve`, sends what makes every series appear (deliveries to each provider, a dead token, a
retry, a `dedup_key` duplicate, an oversize notification sent as its fallback), then reads /metrics
and checks each query's metric names (histogram queries by their `_bucket` / `_sum` / `_count`
samples) and label names.

Python 3 standard library only.

    Tests/system/grafana-test.py [--pushgate .build/debug/pushgate] [--dashboard contrib/grafana/pushgate.json]
"""
import argparse
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import ROOT, Run, bench_token, find_pushgate, http, wait_for  # noqa: E402

DEAD = "dddddddd" + "0" * 55 + "1"
# PromQL words that are not metric names (functions, aggregations, keywords).
PROMQL_WORDS = {
    "sum", "rate", "increase", "max", "min", "avg", "by", "without", "or", "and", "unless", "on", "ignoring",
    "histogram_quantile", "label_values", "vector", "le", "count", "topk", "bottomk", "irate", "delta", "abs",
}


def queries(dashboard):
    """(where, expression) of every panel target and query variable."""
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((f"panel {p.get('title')!r}", t["expr"]))
            walk(p.get("panels", []))

    walk(dashboard.get("panels", []))
    for v in dashboard.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if q:
            out.append((f"variable ${v.get('name')}", q))
    return out


def exposed(metrics_text):
    """Sample name -> label names seen on it, from Prometheus text."""
    series = {}
    for line in metrics_text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s", line)
        if not m:
            continue
        labels = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(3) or ""))
        series.setdefault(m.group(1), set()).update(labels)
    return series


def check(expr, series):
    """Problems of one expression: metric names not exposed, labels not on the metrics it reads."""
    problems = []
    stripped = re.sub(r'"[^"]*"', '""', expr)  # label values and legend-like strings
    stripped = re.sub(r"\[[^\]]*\]", "", stripped)  # range selectors
    names = [n for n in re.findall(r"\b((?:pushgate|gorush)_[a-z0-9_]+)\b", stripped)]
    if not names:
        problems.append("queries no pushgate_* or gorush_* metric")
    labels = set(re.findall(r"\b([a-z_]+)\s*(?:=~|!~|!=|=)\s*\"", expr))
    for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
        labels.update(x.strip() for x in group.split(",") if x.strip())
    m = re.match(r"label_values\(\s*([a-z0-9_]+)\s*,\s*([a-z_]+)\s*\)", expr)
    if m:
        labels.add(m.group(2))
    known = set()
    for n in names:
        if n not in series:
            problems.append(f"{n} is not on /metrics")
        else:
            known |= series[n]
    known.add("le") if any(n.endswith("_bucket") for n in names) else None
    for label in sorted(labels - known - {"instance", "job"}):
        problems.append(f"label {label!r} is on none of {names}")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushgate", default=None)
    ap.add_argument("--dashboard", default=os.path.join(ROOT, "contrib", "grafana", "pushgate.json"))
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    dashboard = json.load(open(args.dashboard))
    run = Run("grafana-test", find_pushgate(args.pushgate, "grafana-test"), keep=args.keep)
    try:
        run.start_mock("--apns-error-rate", "0.2", "--apns-error-status", "503")
        gw = run.start_gateway("1", {"PUSHGATE_QUEUE_ENGINE": "memory", "PUSHGATE_CORE_RETRY_BACKOFF_MS": 20,
                                     "PUSHGATE_CORE_SHUTDOWN_TIMEOUT": 1})
        big = "x" * 5000
        body = {"notifications": [
            {"tokens": [bench_token(i) for i in range(40)] + [DEAD], "platform": 1, "message": "grafana", "topic": "com.example.app"},
            {"tokens": ["fcm-token-1", DEAD], "platform": 2, "message": "grafana"},
            {"tokens": ["hms-token-1"], "platform": 3, "message": "grafana"},
            {"tokens": [bench_token(100)], "platform": 1, "message": "dedup", "topic": "com.example.app", "dedup_key": "k1"},
            {"tokens": [bench_token(100)], "platform": 1, "message": "dedup", "topic": "com.example.app", "dedup_key": "k1"},
            {"tokens": [bench_token(101)], "platform": 1, "message": big, "topic": "com.example.app",
             "fallback": {"message": "short"}},
        ]}
        status, text, _ = http("POST", gw.url + "/api/push", body)
        if status != 200:
            run.fail(f"/api/push answered {status}: {text}")

        def settled():
            app = json.loads(http("GET", gw.url + "/api/stat/app")[1])
            return app["busy_workers"] == 0 and app["success_tasks"] + app["failure_tasks"] >= app["submitted_tasks"] - 1
        wait_for(settled, 60, "every delivery to end", interval=0.1, name=run.name)
        time.sleep(0.3)
        series = exposed(http("GET", gw.url + "/metrics")[1])
        failures = []
        checked = set()
        for where, expr in queries(dashboard):
            for p in check(expr, series):
                failures.append(f"{where}: {p}  [{expr}]")
            checked.update(re.findall(r"\b((?:pushgate|gorush)_[a-z0-9_]+)\b", expr))
        if failures:
            run.fail("the dashboard queries what the gateway does not expose:\n  " + "\n  ".join(failures))
        run.log(f"{len(queries(dashboard))} queries over {len(checked)} metric names, each on a live gateway's /metrics "
                f"with the labels they use")
        run.log("PASSED")
    finally:
        run.close()


if __name__ == "__main__":
    main()
