#!/usr/bin/env bash
# FCM and Web Push end to end next to their references, in one run.
#
# (a) FCM: one `pushgate mock` (HTTP/2 TLS mock FCM + OAuth token endpoint). The gateway (memory
#     engine, android.max_concurrent_pushes = INFLIGHT) end to end: `pushgate bench --platforms
#     android` (gorush JSON in over HTTP/1.1, 100 tokens per request), delivered/s at the mock. Next
#     to it the bare Go net/http HTTP/2 client (bench/goclient, -fixed) posting FCM v1 requests
#     (POST /v1/projects/<project>/messages:send, {"message":{"token":…,"notification":…,"data":…}},
#     a Bearer token from the mock's own OAuth endpoint via bench/fcm-access-token.py) to the same
#     mock with INFLIGHT requests in flight. Prints both and gateway / Go.
# (b) Web Push: the gateway (sqlite, its own file) pinned to core 0, the mock and the bench on core 1
#     (as bench/bench-compare.sh section 6); deliveries per gateway CPU-second (utime+stime from
#     /proc). Next to it pywebpush's encrypt (+ VAPID sign) per CPU-second on core 0
#     (bench/webpush-reference.py, no network). Prints both and the ratios.
#
# Usage: bench/bench-references.sh [FCM_COUNT] [WEBPUSH_COUNT] [PYWEBPUSH_COUNT]
#   full scale:  bench/bench-references.sh 200000 50000 20000
#   small scale: nice -n 19 bench/bench-references.sh 20000 5000 2000
# Env: PUSHGATE_BIN (default .build-release/release/pushgate), GOCLIENT (built from bench/goclient
#   when unset), INFLIGHT (default 100), ROUNDS (default 1: FCM Go+gateway pairs), VENV (default
#   .venv-bench; created with pywebpush, PyJWT, cryptography when missing).
# Ports: mock 28443-28447, gateways 28087 (FCM) and 28090 (Web Push).
set -euo pipefail
cd "$(dirname "$0")/.."
FCM_N=${1:-200000}; WP_N=${2:-50000}; PY_N=${3:-20000}
BIN=${PUSHGATE_BIN:-.build-release/release/pushgate}
INFLIGHT=${INFLIGHT:-100}; ROUNDS=${ROUNDS:-1}; VENV=${VENV:-.venv-bench}
[ -x "$BIN" ] || { echo "no pushgate binary at $BIN (scripts/build-release.sh, or set PUSHGATE_BIN)"; exit 1; }
source bench/bench-lib.sh
if [ -z "${GOCLIENT:-}" ]; then GOCLIENT="$W/goclient"; (cd bench/goclient && go build -o "$GOCLIENT" .); fi
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV" && "$VENV/bin/pip" install -q pywebpush py-vapid cryptography pyjwt; fi
PY="$VENV/bin/python"

"$BIN" mock --dir "$W/m" --apns-port 28443 --fcm-port 28444 --webpush-port 28445 --stats-port 28446 --hms-port 28447 >"$W/mock.log" 2>&1 & MOCK=$!; PIDS+=($MOCK)
wait_for http://127.0.0.1:28446/__mock/stats
gateway_config "$W/m/gateway-snippet.yml" 28087 > "$W/gwm.yml"
PUSHGATE_QUEUE_ENGINE=memory PUSHGATE_ANDROID_MAX_CONCURRENT_PUSHES=$INFLIGHT "$BIN" serve --config "$W/gwm.yml" >"$W/gwm.log" 2>&1 & GWM=$!; PIDS+=($GWM)
wait_for http://127.0.0.1:28087/healthz
sleep 1

# (a) FCM
read -r TOKEN PROJECT < <("$PY" bench/fcm-access-token.py "$W/m/mock-fcm.json" "$W/m/mock-ca.pem")
# The body the gateway sends for the bench notification (title, 32-byte message, data.pgbt as a string).
printf '{"message":{"token":"%%064x","notification":{"title":"Bench","body":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"},"data":{"pgbt":"1234567890123"}}}' > "$W/fcm.tmpl"
FCM_URL="https://127.0.0.1:28444/v1/projects/$PROJECT/messages:send"
for r in $(seq 1 "$ROUNDS"); do
  echo "== FCM round $r: Go net/http HTTP/2, $FCM_N POSTs, $INFLIGHT in flight, straight at the mock FCM"
  "$GOCLIENT" -fixed -n "$FCM_N" -c "$INFLIGHT" -url "$FCM_URL" -ca "$W/m/mock-ca.pem" -payload "$W/fcm.tmpl" -auth "Bearer $TOKEN" | tee "$W/go.txt"
  GO_RATE=$(sed -n 's/.*= \([0-9]*\) req\/s.*/\1/p' "$W/go.txt")
  GO_FAIL=$(sed -n 's/.* ok \([0-9]*\) fail.*/\1/p' "$W/go.txt")
  echo "== FCM round $r: pushgate end to end (memory engine, android.max_concurrent_pushes=$INFLIGHT), $FCM_N deliveries, 100 tokens/request, 4 connections"
  "$BIN" bench --gateway-url http://127.0.0.1:28087 --mock-url http://127.0.0.1:28446 --platforms android \
    --count "$FCM_N" --tokens 100 --concurrency 4 --quiet --json > "$W/gw.json" || true
  GW_RATE=$(json_get "$W/gw.json" delivered_per_sec); GW_MISSING=$(json_get "$W/gw.json" missing)
  echo "gateway: delivered $(json_get "$W/gw.json" delivered) (missing $GW_MISSING), $GW_RATE delivered/s, accepted $(json_get "$W/gw.json" accepted_per_sec)/s"
  python3 -c "import sys; g,r=float(sys.argv[1]),float(sys.argv[2]); print('FCM round %s: Go %.0f req/s (fail %s) | gateway %.0f delivered/s | gateway / Go = %.2f x' % (sys.argv[3], r, sys.argv[4], g, g/r if r else 0))" \
    "$GW_RATE" "$GO_RATE" "$r" "$GO_FAIL"
done
kill $GWM

# (b) Web Push, gateway on core 0
if [ "$(nproc)" -ge 2 ]; then
  echo "== Web Push end to end, gateway (sqlite) on core 0 only, $WP_N deliveries, 100 subscriptions/request"
  webpush_one_core 28090 28446 "$WP_N" "$W/wp.json"
  WP_DELIVERED=$(json_get "$W/wp.json" delivered)
  echo "gateway: delivered $WP_DELIVERED (missing $(json_get "$W/wp.json" missing)), $(json_get "$W/wp.json" delivered_per_sec)/s wall clock; gateway CPU $WP_CPU_MS ms"
  GW_PER_CPU=$(( WP_DELIVERED * $(getconf CLK_TCK) / WP_TICKS ))
  echo "== pywebpush on core 0: $PY_N messages, encrypt (RFC 8291 aes128gcm) and encrypt + VAPID sign (RFC 8292), no network"
  taskset -c 0 "$PY" bench/webpush-reference.py "$PY_N" --json | tee "$W/py.json"
  python3 - "$GW_PER_CPU" "$W/py.json" <<'PYEOF'
import json, sys
g = float(sys.argv[1]); p = json.load(open(sys.argv[2]))
e, s = p["encrypt_per_cpu_sec"], p["encrypt_sign_per_cpu_sec"]
print("Web Push per core: gateway %.0f deliveries per CPU-second (ingest+queue+encrypt+VAPID+HTTP/2) | pywebpush encrypt+sign %d/CPU-s, encrypt only %d/CPU-s | gateway / pywebpush encrypt+sign = %.2f x, / encrypt only = %.2f x"
      % (g, s, e, g / s, g / e))
PYEOF
fi
