# Shared by the shell benchmarks of bench/ (bench-compare.sh, bench-references.sh, engine-compare.sh,
# backlog-memory.sh, scale-out.sh) and scripts/startup-order.sh; the process-level tests share
# Tests/system/harness.py instead. Source it after `set -euo pipefail`.
#
# W: a work directory, removed on exit; PIDS: processes started, killed on exit.
W=$(mktemp -d); PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null || true; done; rm -rf "$W"' EXIT

# wait_for URL [seconds, default 10]: until URL answers 2xx; exits the script on timeout.
wait_for() {
  local tries=$(( ${2:-10} * 10 ))
  for _ in $(seq 1 "$tries"); do curl -sf "$1" >/dev/null && return 0; sleep 0.1; done
  echo "timeout waiting for $1"; exit 1
}

# gateway_config SNIPPET PORT: the mock's gateway snippet with the gateway listening on PORT.
gateway_config() { sed "s/^core:\$/core:\n  port: $2/" "$1"; }

# json_get FILE KEY: a top-level value of a JSON file (0 when absent).
json_get() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get(sys.argv[2], 0))' "$@"; }

# webpush_one_core GATEWAY_PORT MOCK_STATS_PORT COUNT JSON_OUT: Web Push end to end with the gateway
# on one core. A gateway (its own SQLite file, from the mock's snippet in $W/m) pinned to core 0; the
# mock ($MOCK: it decrypts every body and checks its VAPID JWT) and `pushgate bench` (100
# subscriptions per request) pinned to core 1. Writes the bench's JSON to JSON_OUT and sets WP_TICKS
# (the gateway's CPU ticks, user+system, over the bench) and WP_CPU_MS. Uses $BIN.
webpush_one_core() {
  local port=$1 stats=$2 n=$3 out=$4 gw c0 c1
  taskset -a -p -c 1 "$MOCK" >/dev/null
  gateway_config "$W/m/gateway-snippet.yml" "$port" > "$W/gw-wp.yml"
  PUSHGATE_QUEUE_SQLITE_PATH="$W/wp.sqlite" taskset -c 0 "$BIN" serve --config "$W/gw-wp.yml" >"$W/gw-wp.log" 2>&1 & gw=$!; PIDS+=($gw)
  wait_for "http://127.0.0.1:$port/healthz"
  c0=$(awk '{print $14+$15}' /proc/$gw/stat)
  taskset -c 1 "$BIN" bench --gateway-url "http://127.0.0.1:$port" --mock-url "http://127.0.0.1:$stats" --platforms webpush \
    --count "$n" --tokens 100 --concurrency 4 --quiet --json > "$out" || true
  c1=$(awk '{print $14+$15}' /proc/$gw/stat)
  WP_TICKS=$(( c1 - c0 > 0 ? c1 - c0 : 1 )); WP_CPU_MS=$(( WP_TICKS * 1000 / $(getconf CLK_TCK) ))
}
