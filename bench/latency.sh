#!/usr/bin/env bash
# Latency costs concurrency, not throughput (docs/benchmarks.md, "Round trips"): each provider's mock
# answers after 0 ms, then after 100 ms (a data centre's round trip to APNs / FCM), with the streams
# per connection of the real services (APNs-like 1,000, FCM-like 100; HMS and Web Push 100 too). One
# `pushgate mock` and one `pushgate serve` (memory engine, the mock's snippet, defaults) per run;
# `pushgate bench` posts COUNT deliveries, 100 tokens a request. Printed next to the measured rate:
# the in-flight bound (min of `<platform>.max_concurrent_pushes` and `max_connections` x streams)
# and Little's bound at that latency (in flight / round trip), and the gateway's peak RSS.
#
# Tuning goes through the environment, which the gateway inherits, e.g.
#   PUSHGATE_ANDROID_MAX_CONCURRENT_PUSHES=5000 bench/latency.sh
# Usage: bench/latency.sh [pushgate binary]; COUNT (20000), LATENCIES ("0 100"),
# PROVIDERS ("apns fcm hms webpush"), PORT_BASE (29000).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-.build-release/release/pushgate}
[ -x "$BIN" ] || scripts/build-release.sh
COUNT=${COUNT:-20000}
LATENCIES=${LATENCIES:-"0 100"}
PROVIDERS=${PROVIDERS:-"apns fcm hms webpush"}
source bench/bench-lib.sh
P=${PORT_BASE:-29000}
CTL=http://127.0.0.1:$((P + 446))
GW=$((P + 88))

declare -A PLATFORM=([apns]=ios [fcm]=android [hms]=huawei [webpush]=webpush)
declare -A STREAMS=([apns]=1000 [fcm]=100 [hms]=100 [webpush]=100)

printf '%-8s %8s %8s %10s %9s %10s %12s %13s %9s\n' provider latency streams in-flight max-conn bound littles/s delivered/s peak-RSS
for prov in $PROVIDERS; do
  platform=${PLATFORM[$prov]}
  for lat in $LATENCIES; do
    rm -rf "$W/m"
    "$BIN" mock --dir "$W/m" --apns-port $((P + 443)) --fcm-port $((P + 444)) --webpush-port $((P + 445)) \
      --hms-port $((P + 447)) --stats-port $((P + 446)) --latency "$prov=$lat" \
      --max-concurrent-streams apns=1000 --max-concurrent-streams fcm=100 --max-concurrent-streams hms=100 \
      --max-concurrent-streams webpush=100 >"$W/mock.log" 2>&1 & mock=$!; PIDS+=($mock)
    wait_for $CTL/__mock/stats 20
    for _ in $(seq 1 100); do [ -s "$W/m/gateway-snippet.yml" ] && break; sleep 0.1; done
    gateway_config "$W/m/gateway-snippet.yml" $GW > "$W/gw.yml"
    PUSHGATE_QUEUE_ENGINE=memory "$BIN" serve --config "$W/gw.yml" >"$W/gw-$prov-$lat.log" 2>&1 & gw=$!; PIDS+=($gw)
    wait_for http://127.0.0.1:$GW/healthz 20
    curl -s http://127.0.0.1:$GW/api/config > "$W/config.json" || true
    "$BIN" bench --gateway-url http://127.0.0.1:$GW --mock-url $CTL --platforms "$platform" --count "$COUNT" \
      --tokens 100 --concurrency 4 --quiet --json > "$W/bench.json" || true
    python3 - "$W/config.json" "$W/bench.json" "$prov" "$platform" "$lat" "${STREAMS[$prov]}" <<'PY'
import json, sys
cfg_file, bench_file, prov, platform, lat, streams = sys.argv[1:]
lat, streams = int(lat), int(streams)
# GET /api/config answers YAML: "<section>:" then "  key: value" lines.
section, current = {}, None
try:
    for line in open(cfg_file):
        if line and not line[0].isspace():
            current = line.strip().rstrip(":")
        elif current == platform and line.startswith("  ") and not line.startswith("   ") and ":" in line:
            k, _, v = line.strip().partition(":")
            section[k] = v.strip()
except OSError:
    pass
mcp = section.get("max_concurrent_pushes", "?")
maxconn = section.get("max_connections", "?")
try:
    bound = min(int(mcp), int(maxconn) * streams)
except (TypeError, ValueError):
    bound = "?"
littles = "-" if lat == 0 or bound == "?" else f"{bound * 1000 / lat:,.0f}"
rss = "?"
try:
    b = json.load(open(bench_file))
    rate = f"{b.get('delivered_per_sec', 0):,.0f}"
    if b.get("delivered", 0) < b.get("accepted_deliveries", 0):
        rate += f" ({b.get('delivered', 0)}/{b.get('accepted_deliveries', 0)})"
    if b.get("rss_peak_bytes"):
        rss = f"{b['rss_peak_bytes'] / 1e6:.1f} MB"
except Exception:
    rate = "failed"
print(f"{prov:<8} {lat:>6}ms {streams:>8} {mcp!s:>10} {maxconn!s:>9} {bound!s:>10} {littles:>12} {rate:>13} {rss:>9}")
PY
    kill $gw $mock 2>/dev/null || true
    wait $gw $mock 2>/dev/null || true
  done
done
