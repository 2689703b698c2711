#!/usr/bin/env python3
"""Plots the results of bench/cost-growth.py: delivered/s and peak RSS by tokens per notification
(memory and sqlite engines, log x axis), and the status-lookup latencies with R retained rows.

Usage: bench/plot-cost-growth.py RESULTS.json OUT.png   (needs matplotlib: .venv-bench/bin/python)
"""
import json, sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

res = json.load(open(sys.argv[1]))
fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
for engine, style in (("memory", "o-"), ("sqlite", "s--")):
    pts = sorted((p for p in res["points"] if p["engine"] == engine), key=lambda p: p["tokens_per_notification"])
    if not pts:
        continue
    x = [p["tokens_per_notification"] for p in pts]
    axes[0].plot(x, [(p["delivered_per_sec"] or 0) / 1000 for p in pts], style, label=engine)
    axes[1].plot(x, [p["peak_rss_mb"] for p in pts], style, label=engine)
for ax, title, unit in ((axes[0], "delivered/s", "thousand deliveries/s"), (axes[1], "peak RSS (VmHWM)", "MB")):
    ax.set_xscale("log")
    ax.set_xlabel("tokens per notification")
    ax.set_ylabel(unit)
    ax.set_title("%s, %d deliveries per point" % (title, res["deliveries_per_point"]))
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
s = res.get("status")
if s:
    names = ["p50", "p90", "p99", "max"]
    vals = [s["p50_ms"], s["p90_ms"], s["p99_ms"], s["max_ms"]]
    axes[2].bar(names, vals, color="tab:gray")
    for i, v in enumerate(vals):
        axes[2].annotate("%.2f" % v, (i, v), ha="center", va="bottom")
    axes[2].set_ylabel("ms")
    axes[2].set_title("GET /api/push/<id>, %s rows, %d threads" % (format(s["rows"], ","), s["concurrency"]))
else:
    axes[2].axis("off")
fig.suptitle("Pushgate: how cost grows (%s, %d cores)" % (res.get("started", ""), res["machine"]["nproc"]))
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
print("wrote", sys.argv[2])
