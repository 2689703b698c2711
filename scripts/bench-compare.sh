#!/usr/bin/env bash
# The figures of docs/benchmarks.md, side by side in one run on loopback:
#   idle RSS | h2load straight at the mock APNs | pushgate end to end (gorush JSON in, APNs HTTP/2
#   out) at max rate, memory and sqlite engines | p99 ingest->provider at 2,000/s, both engines |
#   RSS with 100,000 queued | Web Push end to end on one gateway core.
# Needs h2load (apt-get install nghttp2-client). Usage: scripts/bench-compare.sh [pushgate binary]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-.build-release/release/pushgate}
# The release build of docs/benchmarks.md (flags and why: scripts/build-release.sh).
[ -x "$BIN" ] || scripts/build-release.sh
source scripts/bench-lib.sh

# 1. mock providers (one process) and two gateways (two more processes): the default engine
#    (sqlite, a fresh file) on 18088 and the memory engine on 18087
"$BIN" mock --dir "$W/m" --apns-port 18443 --fcm-port 18444 --webpush-port 18445 --stats-port 18446 >"$W/mock.log" 2>&1 & MOCK=$!; PIDS+=($MOCK)
wait_for http://127.0.0.1:18446/__mock/stats
gateway_config "$W/m/gateway-snippet.yml" 18088 > "$W/gw.yml"
PUSHGATE_QUEUE_SQLITE_PATH="$W/gw.sqlite" "$BIN" serve --config "$W/gw.yml" >"$W/gw.log" 2>&1 & GW=$!; PIDS+=($GW)
wait_for http://127.0.0.1:18088/healthz
gateway_config "$W/m/gateway-snippet.yml" 18087 > "$W/gwm.yml"
PUSHGATE_QUEUE_ENGINE=memory "$BIN" serve --config "$W/gwm.yml" >"$W/gwm.log" 2>&1 & GWM=$!; PIDS+=($GWM)
wait_for http://127.0.0.1:18087/healthz
sleep 2
for g in "sqlite 18088 $GW" "memory 18087 $GWM"; do
  set -- $g
  echo "== idle RSS of the gateway, $1 engine"
  curl -s http://127.0.0.1:$2/api/stat/go | python3 -c 'import json,sys;d=json.load(sys.stdin);print("idle VmRSS %.1f MB" % (d["memory_rss_bytes"]/1048576))'
  grep -E "RssAnon|RssFile" /proc/$3/status
done

# 2. h2load against the same mock APNs
echo "== h2load -c 2 -m 100, 200,000 POSTs straight at the mock APNs"
JWT=$(curl -s http://127.0.0.1:18446/__mock/apns-jwt)
printf '{"aps":{"alert":{"title":"Bench","body":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}},"pgbt":1}' > "$W/apns.json"
h2load -n 200000 -c 2 -m 100 -d "$W/apns.json" -H "authorization: bearer $JWT" -H 'apns-topic: com.example.app' \
  -H 'apns-push-type: alert' https://127.0.0.1:18443/3/device/a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90 \
  | grep -E "finished in|succeeded"

# 3. end to end at max rate, each engine
for g in "memory 18087" "sqlite 18088"; do
  set -- $g
  echo "== pushgate end to end, $1 engine, max rate, 200,000 deliveries (100 tokens per request, 4 connections)"
  "$BIN" bench --gateway-url http://127.0.0.1:$2 --mock-url http://127.0.0.1:18446 --count 200000 --tokens 100 --concurrency 4 --quiet
done

# 4. latency at 2,000 notifications/s (one token per request), each engine
for g in "sqlite 18088" "memory 18087"; do
  set -- $g
  echo "== 2,000 notifications/s for 20 s, one token each, $1 engine"
  "$BIN" bench --gateway-url http://127.0.0.1:$2 --mock-url http://127.0.0.1:18446 --rate 2000 --duration 20 --tokens 1 --concurrency 32 --quiet
done
kill $GWM

# 5. RSS with 100,000 queued: a second mock that holds every APNs answer for 5 minutes
"$BIN" mock --dir "$W/m2" --apns-port 19443 --fcm-port 19444 --webpush-port 19445 --stats-port 19446 --apns-latency-ms 300000 >"$W/mock2.log" 2>&1 & PIDS+=($!)
wait_for http://127.0.0.1:19446/__mock/stats
gateway_config "$W/m2/gateway-snippet.yml" 18089 > "$W/gw2.yml"
PUSHGATE_QUEUE_SQLITE_PATH="$W/gw2.sqlite" "$BIN" serve --config "$W/gw2.yml" >"$W/gw2.log" 2>&1 & PIDS+=($!)
wait_for http://127.0.0.1:18089/healthz
echo "== 100,000 deliveries queued behind a stalled APNs"
"$BIN" bench --gateway-url http://127.0.0.1:18089 --count 100000 --tokens 100 --concurrency 4 --quiet | grep -E "accepted |RSS"
sleep 2
curl -s http://127.0.0.1:18089/api/stat/go | python3 -c 'import json,sys;d=json.load(sys.stdin);print("queued %d: VmRSS %.1f MB" % (d["queue_pending"], d["memory_rss_bytes"]/1048576))'

# 6. Web Push end to end on one core: a third gateway (own SQLite file) pinned to core 0, the mock
#    (decrypts every body and checks its VAPID JWT) and the bench pinned to core 1.
if [ "$(nproc)" -ge 2 ]; then
  taskset -a -p -c 1 "$MOCK" >/dev/null
  gateway_config "$W/m/gateway-snippet.yml" 18090 > "$W/gw3.yml"
  PUSHGATE_QUEUE_SQLITE_PATH="$W/wp.sqlite" taskset -c 0 "$BIN" serve --config "$W/gw3.yml" >"$W/gw3.log" 2>&1 & GW3=$!; PIDS+=($GW3)
  wait_for http://127.0.0.1:18090/healthz
  echo "== Web Push end to end, gateway on core 0 only, 50,000 deliveries (RFC 8291 + VAPID, the mock decrypts each)"
  cpu0=$(awk '{print $14+$15}' /proc/$GW3/stat)
  taskset -c 1 "$BIN" bench --gateway-url http://127.0.0.1:18090 --mock-url http://127.0.0.1:18446 --platforms webpush \
    --count 50000 --tokens 100 --concurrency 4 --quiet | grep -E "delivered|accepted "
  cpu1=$(awk '{print $14+$15}' /proc/$GW3/stat)
  TCK=$(getconf CLK_TCK); ticks=$(( cpu1 - cpu0 > 0 ? cpu1 - cpu0 : 1 ))
  echo "gateway CPU (user+system) for the run: $(( ticks * 1000 / TCK )) ms -> $(( 50000 * TCK / ticks )) deliveries per gateway CPU-second"
fi
