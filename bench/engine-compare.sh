#!/usr/bin/env bash
# Queue engines side by side, and an external load run as a cross-check of `pushgate bench`
# (docs/benchmarks.md, "Queue engines" and "External cross-check"), all on loopback:
#   1. one `pushgate mock` process; two `pushgate serve` processes: queue.engine memory (28090) and
#      sqlite (28091, a fresh file); PORT_BASE=28000 moves them;
#   2. `pushgate bench` at max rate against each (200,000 APNs deliveries, 100 tokens per request);
#   3. the same load from outside: h2load (HTTP/1.1, --h1) posting gorush JSON with 100 tokens to
#      each gateway; delivered/s read from the mock's own counters (OK answers / time from the first
#      request to the last OK).
# Needs h2load (apt-get install nghttp2-client). Usage: bench/engine-compare.sh [pushgate binary]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-.build-release/release/pushgate}
[ -x "$BIN" ] || scripts/build-release.sh
COUNT=${COUNT:-200000}
source bench/bench-lib.sh
P=${PORT_BASE:-28000}   # mock on P+443..P+446, gateways on P+90 (memory) and P+91 (sqlite)
CTL=http://127.0.0.1:$((P + 446))

"$BIN" mock --dir "$W/m" --apns-port $((P + 443)) --fcm-port $((P + 444)) --webpush-port $((P + 445)) --stats-port $((P + 446)) >"$W/mock.log" 2>&1 & PIDS+=($!)
wait_for $CTL/__mock/stats 20
for _ in $(seq 1 100); do [ -s "$W/m/gateway-snippet.yml" ] && break; sleep 0.1; done
for e in memory:$((P + 90)) sqlite:$((P + 91)); do
  engine=${e%%:*}; port=${e##*:}
  gateway_config "$W/m/gateway-snippet.yml" $port > "$W/$engine.yml"
  printf 'queue:\n  engine: %s\n  sqlite:\n    path: %s/%s.sqlite\n' "$engine" "$W" "$engine" >> "$W/$engine.yml"
  "$BIN" serve --config "$W/$engine.yml" >"$W/gw-$engine.log" 2>&1 & PIDS+=($!)
  wait_for http://127.0.0.1:$port/healthz 20
done

# gorush JSON with 100 bench tokens (the mock counts every OK answer)
python3 - "$W/push.json" <<'PY'
import json, sys
toks = ["bbbbbbbb" + "0" * 40 + format(900000000 + i, "016x") for i in range(100)]
json.dump({"notifications": [{"tokens": toks, "platform": 1, "title": "Bench", "message": "x" * 32, "topic": "com.example.app"}]},
          open(sys.argv[1], "w"))
PY

external() {  # $1 port -> delivered/s measured at the mock for COUNT deliveries posted by h2load
  curl -sf -XPOST $CTL/__mock/reset >/dev/null
  local start; start=$(curl -s $CTL/__mock/stats | python3 -c 'import json,sys;print(json.load(sys.stdin)["now_ns"])')
  h2load --h1 -n $((COUNT / 100)) -c 4 -d "$W/push.json" -H 'content-type: application/json' \
    "http://127.0.0.1:$1/api/push" | grep -E "finished in|succeeded|status codes" | sed 's/^/  h2load: /'
  for _ in $(seq 1 600); do
    ok=$(curl -s $CTL/__mock/stats | python3 -c 'import json,sys;print(json.load(sys.stdin)["ok"])')
    [ "$ok" -ge "$COUNT" ] && break; sleep 0.2
  done
  curl -s $CTL/__mock/stats | python3 -c "
import json,sys
d=json.load(sys.stdin); s=$start
print('  external: %d OK at the mock in %.2f s -> %.1fk delivered/s' % (d['ok'], (d['last_ok_ns']-s)/1e9, d['ok']/((d['last_ok_ns']-s)/1e9)/1000))"
}

for e in memory:$((P + 90)) sqlite:$((P + 91)); do
  engine=${e%%:*}; port=${e##*:}
  echo "== $engine engine: pushgate bench, max rate, $COUNT deliveries (100 tokens per request, 4 connections)"
  "$BIN" bench --gateway-url http://127.0.0.1:$port --mock-url $CTL --count $COUNT --tokens 100 --concurrency 4 --quiet \
    | grep -E "accepted|delivered|missing" | sed 's/^/  /'
  echo "== $engine engine: external load (h2load --h1 -c 4, gorush JSON, 100 tokens per request)"
  external $port
done
