#!/usr/bin/env bash
# The figures of docs/benchmarks.md, side by side in one run on loopback:
#   idle RSS | the bare Go net/http HTTP/2 client (gorush's transport, bench/goclient) straight at
#   the mock APNs, then pushgate end to end (gorush JSON in over HTTP/1.1, APNs HTTP/2 out) on the
#   memory and sqlite engines, same mock, same payload, same in-flight limit, ROUNDS times, with the
#   ratios | h2load at the mock (when installed) | p99 ingest->provider at 2,000/s, both engines |
#   RSS with 100,000 queued | Web Push end to end on one gateway core.
# Needs Go (apt-get install golang-go) for the reference client and /usr/bin/time (Debian's time) for its
# CPU; h2load (nghttp2-client) optional.
# Usage: bench/bench-compare.sh [pushgate binary]   Env: ROUNDS (3), COUNT (100000), INFLIGHT (100)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-.build-release/release/pushgate}
ROUNDS=${ROUNDS:-3}; COUNT=${COUNT:-100000}; INFLIGHT=${INFLIGHT:-100}
# The release build of docs/benchmarks.md (flags and why: scripts/build-release.sh).
[ -x "$BIN" ] || scripts/build-release.sh
source bench/bench-lib.sh
GOCLIENT="$W/goclient"; (cd bench/goclient && go build -o "$GOCLIENT" .)

# 1. mock providers (one process) and two gateways (two more processes): the default engine
#    (sqlite, a fresh file) on 18088 and the memory engine on 18087
"$BIN" mock --dir "$W/m" --apns-port 18443 --fcm-port 18444 --webpush-port 18445 --stats-port 18446 --hms-port 18447 >"$W/mock.log" 2>&1 & MOCK=$!; PIDS+=($MOCK)
wait_for http://127.0.0.1:18446/__mock/stats
gateway_config "$W/m/gateway-snippet.yml" 18088 > "$W/gw.yml"
PUSHGATE_QUEUE_SQLITE_PATH="$W/gw.sqlite" PUSHGATE_IOS_MAX_CONCURRENT_PUSHES=$INFLIGHT "$BIN" serve --config "$W/gw.yml" >"$W/gw.log" 2>&1 & GW=$!; PIDS+=($GW)
wait_for http://127.0.0.1:18088/healthz
gateway_config "$W/m/gateway-snippet.yml" 18087 > "$W/gwm.yml"
PUSHGATE_QUEUE_ENGINE=memory PUSHGATE_IOS_MAX_CONCURRENT_PUSHES=$INFLIGHT "$BIN" serve --config "$W/gwm.yml" >"$W/gwm.log" 2>&1 & GWM=$!; PIDS+=($GWM)
wait_for http://127.0.0.1:18087/healthz
sleep 2
for g in "sqlite 18088 $GW" "memory 18087 $GWM"; do
  set -- $g
  echo "== idle RSS of the gateway, $1 engine"
  curl -s http://127.0.0.1:$2/api/stat/go | python3 -c 'import json,sys;d=json.load(sys.stdin);print("idle VmRSS %.1f MB" % (d["memory_rss_bytes"]/1048576))'
  grep -E "RssAnon|RssFile" /proc/$3/status
done

# 2. the Go reference and the gateway, ROUNDS times, in turn. The Go client posts the payload the
#    gateway renders for the bench notification (--payload-bytes 200: 265-268 bytes) with INFLIGHT
#    requests in flight (net/http opens one HTTP/2 connection while the mock's 1000 streams allow);
#    the gateways have ios.max_concurrent_pushes = INFLIGHT over ios.connections (2) connections.
#    First one run per gateway that is not counted (warm-up: the processes' heaps and the SQLite
#    file and WAL grow to their steady size once; printed all the same). Then per round: the Go
#    client, then the gateways in the order memory, sqlite, sqlite, memory (each run COUNT
#    deliveries), so that a machine getting faster or slower during the round weighs on both
#    engines alike; an engine's rate in a round is its deliveries over its runs' delivery time. The
#    last line adds up all rounds.
JWT=$(curl -s http://127.0.0.1:18446/__mock/apns-jwt)
python3 -c 'import sys; open(sys.argv[1], "w").write("{\"aps\":{\"alert\":{\"title\":\"Bench\",\"body\":\"" + "x" * 200 + "\"}},\"pgbt\":1234567890123456}")' "$W/apns.json"
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
# gateway_run NAME PORT PID OUT: one bench of COUNT deliveries through a gateway; prints its line and
# appends "name delivered delivery_seconds gateway_cpu_seconds" to OUT.
gateway_run() {
  local c0 c1
  c0=$(cpu $3)
  "$BIN" bench --gateway-url http://127.0.0.1:$2 --mock-url http://127.0.0.1:18446 --count "$COUNT" --tokens 100 --concurrency 4 \
    --payload-bytes 200 --quiet --json > "$W/$1.json"
  c1=$(cpu $3)
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); t=(int(sys.argv[5]) - int(sys.argv[4])); print("%s engine: %d of %d delivered, %.0f delivered/s, gateway CPU %.2f s" % (sys.argv[2], d["delivered"], int(sys.argv[3]), d["delivered_per_sec"], t / int(sys.argv[6]))); open(sys.argv[7], "a").write("%s %d %s %.3f\n" % (sys.argv[2], d["delivered"], d["delivery_seconds"], t / int(sys.argv[6])))' \
    "$W/$1.json" "$1" "$COUNT" "$c0" "$c1" "$(getconf CLK_TCK)" "$4"
}
# ratio_line LABEL GO GOCPU OUT: the ratios of the runs in OUT (each engine's deliveries over its
# delivery seconds) to each other and to GO, Go's rate described as in LABEL ("round 1: Go", "all 3
# rounds: Go ... (mean)"); then CPU per delivery, the headline on a shared 2-core machine: CPU-seconds
# per 100k deliveries of the Go client (GOCPU) and of each engine's gateway process, and their
# deliveries per CPU-second as ratios.
ratio_line() { python3 -c 'import sys; t={}
for l in open(sys.argv[4]):
    n, d, s, c = l.split(); a = t.setdefault(n, [0, 0.0, 0.0]); a[0] += int(d); a[1] += float(s); a[2] += float(c)
m, s = (t[e][0] / t[e][1] for e in ("memory", "sqlite")); g = float(sys.argv[2])
print("%s | memory %.0f/s = %.2f x Go | sqlite %.0f/s = %.2f x Go = %.2f x memory" % (sys.argv[1] % g, m, m / g, s, s / g, s / m))
gc = float(sys.argv[3]); mc, sc = (t[e][2] * 100000 / t[e][0] for e in ("memory", "sqlite"))
print("    CPU per 100k deliveries: Go client %.2f s | memory %.2f s | sqlite %.2f s; per CPU-second: memory %.2f x Go, sqlite %.2f x Go = %.2f x memory" % (gc, mc, sc, gc / mc, gc / sc, mc / sc))' "$@"; }
echo "== warm-up (not counted): $COUNT deliveries through each gateway"
gateway_run memory 18087 $GWM "$W/warmup.txt"; gateway_run sqlite 18088 $GW "$W/warmup.txt"
: > "$W/all.txt"; GOSUM=0; GOCPUSUM=0
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r: Go net/http HTTP/2 client, $COUNT POSTs, $INFLIGHT in flight, straight at the mock APNs"
  /usr/bin/time -f "%U %S" -o "$W/go-cpu.txt" "$GOCLIENT" -n "$COUNT" -c "$INFLIGHT" -url https://127.0.0.1:18443/3/device/ \
    -ca "$W/m/mock-ca.pem" -payload "$W/apns.json" -auth "bearer $JWT" | tee "$W/go.txt"
  GO=$(sed -n 's/.*= \([0-9]*\) req\/s.*/\1/p' "$W/go.txt"); GOSUM=$((GOSUM + GO))
  # the Go client's CPU per 100k of its successful POSTs
  GOCPU=$(awk -v ok="$(sed -n 's/^go-nethttp-h2: \([0-9]*\) ok.*/\1/p' "$W/go.txt")" '{printf "%.3f", ($1 + $2) * 100000 / ok}' "$W/go-cpu.txt")
  GOCPUSUM=$(awk -v a="$GOCPUSUM" -v b="$GOCPU" 'BEGIN {printf "%.3f", a + b}')
  : > "$W/round.txt"
  for g in "memory 18087 $GWM" "sqlite 18088 $GW" "sqlite 18088 $GW" "memory 18087 $GWM"; do
    gateway_run $g "$W/round.txt"
  done
  cat "$W/round.txt" >> "$W/all.txt"
  ratio_line "round $r: Go %.0f/s" "$GO" "$GOCPU" "$W/round.txt"
done
ratio_line "all $ROUNDS rounds: Go %.0f/s (mean)" "$(( GOSUM / ROUNDS ))" "$(awk -v a="$GOCPUSUM" -v r="$ROUNDS" 'BEGIN {printf "%.3f", a / r}')" "$W/all.txt"

# 3. h2load against the same mock APNs (another reference, when installed)
if command -v h2load >/dev/null; then
  echo "== h2load -c 2 -m 100, 200,000 POSTs straight at the mock APNs (the floor: C, nghttp2, no JSON, no queue)"
  /usr/bin/time -f "%U %S" -o "$W/h2-cpu.txt" h2load -n 200000 -c 2 -m 100 -d "$W/apns.json" -H "authorization: bearer $JWT" \
    -H 'apns-topic: com.example.app' -H 'apns-push-type: alert' \
    https://127.0.0.1:18443/3/device/a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90 > "$W/h2.txt" || true
  grep -E "finished in|succeeded" "$W/h2.txt"
  awk '{printf "    h2load CPU per 100k requests: %.2f s\n", ($1 + $2) * 100000 / 200000}' "$W/h2-cpu.txt"
fi

# 4. latency at 2,000 notifications/s (one token per request), each engine
for g in "sqlite 18088" "memory 18087"; do
  set -- $g
  echo "== 2,000 notifications/s for 20 s, one token each, $1 engine"
  "$BIN" bench --gateway-url http://127.0.0.1:$2 --mock-url http://127.0.0.1:18446 --rate 2000 --duration 20 --tokens 1 --concurrency 32 --quiet
done
kill $GWM

# 5. RSS with 100,000 queued: a second mock that holds every APNs answer for 5 minutes
"$BIN" mock --dir "$W/m2" --apns-port 19443 --fcm-port 19444 --webpush-port 19445 --stats-port 19446 --hms-port 19447 --apns-latency-ms 300000 >"$W/mock2.log" 2>&1 & PIDS+=($!)
wait_for http://127.0.0.1:19446/__mock/stats 60
gateway_config "$W/m2/gateway-snippet.yml" 18089 > "$W/gw2.yml"
PUSHGATE_QUEUE_SQLITE_PATH="$W/gw2.sqlite" "$BIN" serve --config "$W/gw2.yml" >"$W/gw2.log" 2>&1 & PIDS+=($!)
wait_for http://127.0.0.1:18089/healthz
echo "== 100,000 deliveries queued behind a stalled APNs"
"$BIN" bench --gateway-url http://127.0.0.1:18089 --count 100000 --tokens 100 --concurrency 4 --quiet | grep -E "accepted |RSS"
sleep 2
curl -s http://127.0.0.1:18089/api/stat/go | python3 -c 'import json,sys;d=json.load(sys.stdin);print("queued %d: VmRSS %.1f MB" % (d["queue_pending"], d["memory_rss_bytes"]/1048576))'

# 6. Web Push end to end on one core (webpush_one_core in bench-lib.sh: a third gateway pinned to
#    core 0, the mock and the bench to core 1).
if [ "$(nproc)" -ge 2 ]; then
  echo "== Web Push end to end, gateway on core 0 only, 50,000 deliveries (RFC 8291 + VAPID, the mock decrypts each)"
  webpush_one_core 18090 18446 50000 "$W/wp.json"
  WP_DELIVERED=$(json_get "$W/wp.json" delivered)
  echo "delivered $WP_DELIVERED of 50000 (missing $(json_get "$W/wp.json" missing)), $(json_get "$W/wp.json" delivered_per_sec)/s wall clock"
  echo "gateway CPU (user+system) for the run: $WP_CPU_MS ms -> $(( WP_DELIVERED * $(getconf CLK_TCK) / WP_TICKS )) deliveries per gateway CPU-second"
fi
