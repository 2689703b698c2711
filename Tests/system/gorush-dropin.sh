#!/usr/bin/env bash
# Pushgate started the way a gorush operator starts gorush.
# A gorush v1.22 config.yml (Tests/system/fixtures/gorush-v1.22-config.yml: ssl on, an APNs certificate
# with its password, an outbound CONNECT proxy, a custom push route), `pushgate -c it.yml`:
#   - serves HTTPS (HTTP/1.1 and HTTP/2); `--ping` exits 0 while it runs, 1 when none runs;
#   - a PascalCase gorush body with priority "10" and a platform 0 entry: 200, the valid
#     notifications delivered; the iOS one reaches the mock APNs over mutual TLS (the mock saw the
#     client certificate and no JWT) through the proxy (the proxy saw the CONNECT);
#   - `-ios -m hi -t <token> --topic …` delivers once and exits 0; a dead token exits 1 with the reason;
#   - /metrics carries gorush's 11 series; /api/config hides the password and the proxy;
#   - log.format json with log.access_log a file: JSON lines there; core.pid written and removed;
#   - gorush's gRPC API (GORUSH_GRPC_ENABLED/GORUSH_GRPC_PORT) over TLS with core.ssl's certificate:
#     a grpcio client generated from gorush.proto (when .venv or PUSHGATE_INTEROP_PYTHON has grpcio-tools).
# Once with the Keychain-style .p12 (RC2-40 / 3DES) + password, once with the .pem.
# The mocks (`pushgate mock`) and the gateway run as separate processes on loopback.
# Usage: Tests/system/gorush-dropin.sh [path/to/pushgate]   (default: builds and uses .build/debug/pushgate)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-}
if [ -z "$BIN" ]; then swift build --product pushgate >/dev/null; BIN=.build/debug/pushgate; fi
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
DIR=$(mktemp -d)
GW=""
"$BIN" mock --dir "$DIR" --apns-port 0 --fcm-port 0 --hms-port 0 --webpush-port 0 --stats-port 0 --proxy-port 0 \
  --apns-certificate --record >"$DIR/mock.log" 2>&1 &
MOCK=$!
cleanup() { [ -n "$GW" ] && kill "$GW" 2>/dev/null; kill $MOCK 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
for _ in $(seq 1 300); do grep -q "gateway config snippet" "$DIR/mock.log" 2>/dev/null && break; sleep 0.1; done
grep -q "gateway config snippet" "$DIR/mock.log" || { cat "$DIR/mock.log"; echo "FAIL pushgate mock did not start"; exit 1; }
CTL=$(grep -o 'control  *http://127.0.0.1:[0-9]*' "$DIR/mock.log" | grep -o 'http://.*')
APNS=$(grep -o 'APNs  *https://127.0.0.1:[0-9]*' "$DIR/mock.log" | grep -o 'https://.*')
FCM=$(grep -o 'FCM  *https://127.0.0.1:[0-9]*' "$DIR/mock.log" | grep -o 'https://.*')
PROXY=$(grep -o 'proxy  *http://127.0.0.1:[0-9]*' "$DIR/mock.log" | grep -o 'http://.*')
P12="$DIR/apns-client/apns-legacy.p12"
PEM="$DIR/apns-client/apns.pem"
PASSWORD=$(grep -o 'password [^)]*' "$DIR/mock.log" | head -1 | cut -d' ' -f2)
LIVE=a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90
DEAD=dddddddd00000000000000000000000000000000000000000000000000000001
LIVE2=a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f02
PY=${PUSHGATE_INTEROP_PYTHON:-$PWD/.venv/bin/python}
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails+1)); }
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run_case() { # run_case <name> <key file> <key_type> <password>
  local name=$1 key=$2 type=$3 pass=$4
  local cfg="$DIR/it-$name.yml" port gport up=0 try before=0
  # The ports are picked free here and bound by the gateway a moment later: another process may take
  # one in between. A gateway that exits on a bind is started again on other ports (three tries); one
  # that exits for any other reason, or never answers --ping, fails the case with its log.
  for try in 1 2 3; do
    port=$(freeport); gport=$(freeport)
    [ "$gport" = "$port" ] && gport=$(freeport)
    sed -e "s#@DIR@#$DIR#g" -e "s#@PORT@#$port#g" -e "s#@PROXY@#$PROXY#g" -e "s#@APNS@#$APNS#g" -e "s#@FCM@#$FCM#g" \
      -e "s#@IOS_KEY@#$key#g" -e "s#@IOS_KEY_TYPE@#$type#g" -e "s#@IOS_PASSWORD@#$pass#g" \
      -e "s#@IOS_KEY_ID@##g" -e "s#@IOS_TEAM_ID@##g" Tests/system/fixtures/gorush-v1.22-config.yml >"$cfg"
    if [ "$try" = 1 ]; then
      curl -s -X POST "$CTL/__mock/reset" >/dev/null
      before=$(curl -s "$CTL/__mock/apns-requests" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
      local rc=0
      "$BIN" -c "$cfg" --ping >/dev/null 2>&1 || rc=$?
      [ "$rc" = 1 ] && ok "$name: --ping with no gateway running exits 1" || bad "$name: --ping with no gateway exited $rc"
    fi
    GORUSH_GRPC_ENABLED=true GORUSH_GRPC_PORT=$gport "$BIN" -c "$cfg" >"$DIR/gw-$name.out" 2>&1 &
    GW=$!
    for _ in $(seq 1 200); do
      if "$BIN" -c "$cfg" --ping >/dev/null 2>&1; then up=1; break; fi
      kill -0 "$GW" 2>/dev/null || break
      sleep 0.1
    done
    [ $up = 1 ] && break
    kill -0 "$GW" 2>/dev/null || wait "$GW" 2>/dev/null
    grep -q "Address already in use" "$DIR/gw-$name.out" || break
    echo "     $name: a port was taken before the gateway bound it; again on other ports"
  done
  if [ $up = 1 ]; then ok "$name: pushgate -c it.yml serves; --ping exits 0"; else bad "$name: gateway not up: $(tail -5 "$DIR/gw-$name.out")"; return; fi
  [ "$(cat "$DIR/gorush.pid" 2>/dev/null)" = "$GW" ] && ok "$name: core.pid written" || bad "$name: pid file"

  local base="https://localhost:$port"
  local body
  body=$(cat <<EOF
{"Notifications":[
 {"Tokens":["$LIVE"],"Platform":1,"Message":"hello from gorush","Title":"Hi","Topic":"com.example.app","Priority":"10","Badge":1},
 {"Tokens":["fcm-token-1"],"Platform":2,"Message":"hello android","Priority":"high"},
 {"Tokens":["$LIVE"],"Platform":0,"Message":"skipped as gorush skips it"}
]}
EOF
)
  local out code
  out=$(curl -s --cacert "$DIR/mock-ca.pem" -w '\n%{http_code} %{http_version}' -H 'Content-Type: application/json' -d "$body" "$base/gorush/push")
  code=$(tail -1 <<<"$out")
  if [[ "$code" == "200 2" ]] && grep -q '"success":"ok"' <<<"$out"; then ok "$name: HTTPS (HTTP/2) PascalCase body, priority \"10\", platform 0 entry: 200"
  else bad "$name: push answered: $out"; fi
  [ "$(curl -s --http1.1 --cacert "$DIR/mock-ca.pem" -o /dev/null -w '%{http_code} %{http_version}' "$base/healthz")" = "200 1.1" ] \
    && ok "$name: HTTP/1.1 over TLS" || bad "$name: HTTP/1.1 over TLS"
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz" || true)" != "200" ] \
    && ok "$name: no plain HTTP on the TLS port" || bad "$name: plain HTTP answered"

  local seen
  seen=$(curl -s "$CTL/__mock/apns-requests")
  if python3 - "$seen" "$LIVE" "$before" <<'PY'
import json, sys
reqs = [r for r in json.loads(sys.argv[1])[int(sys.argv[3]):] if r["token"] == sys.argv[2]]
assert len(reqs) == 1, reqs
r = reqs[0]
assert r["status"] == 200 and r["client_certificate_subject"] and not r["authorization"] and r["topic"] == "com.example.app", r
PY
  then ok "$name: the mock APNs got the push once, over mutual TLS (client certificate, no JWT)"; else bad "$name: mock APNs saw: $seen"; fi
  local stats; stats=$(curl -s "$CTL/__mock/stats")
  python3 -c 'import json,sys; s=json.loads(sys.argv[1]); assert s["fcm"]["ok"] >= 1, s' "$stats" 2>/dev/null \
    && ok "$name: the Android notification reached the mock FCM" || bad "$name: mock FCM stats: $stats"
  local connects; connects=$(curl -s "$CTL/__mock/proxy")
  grep -q "\"target\":\"127.0.0.1:${APNS##*:}\"" <<<"$connects" && ok "$name: APNs traffic went through the CONNECT proxy" || bad "$name: proxy saw $connects"
  grep -q "\"target\":\"127.0.0.1:${FCM##*:}\"" <<<"$connects" && ok "$name: FCM traffic went through the CONNECT proxy" || bad "$name: proxy saw $connects"

  local metrics; metrics=$(curl -s --cacert "$DIR/mock-ca.pem" "$base/metrics")
  local missing=""
  for series in gorush_total_push_count gorush_ios_success gorush_ios_error gorush_android_success gorush_android_fail \
    gorush_huawei_success gorush_huawei_fail gorush_busy_workers gorush_success_tasks gorush_failure_tasks gorush_submitted_tasks; do
    grep -q "^# TYPE $series " <<<"$metrics" || missing="$missing $series"
  done
  [ -z "$missing" ] && ok "$name: /metrics carries gorush's 11 series" || bad "$name: /metrics lacks$missing"
  grep -q '^gorush_ios_success 1$' <<<"$metrics" && ok "$name: gorush_ios_success 1" || bad "$name: $(grep '^gorush_ios' <<<"$metrics")"
  local config; config=$(curl -s --cacert "$DIR/mock-ca.pem" "$base/api/config")
  if [ -n "$pass" ] && grep -q -- "$pass" <<<"$config"; then bad "$name: /api/config shows the password"; else ok "$name: /api/config hides the password"; fi
  grep -q "${PROXY##*/}" <<<"$config" && bad "$name: /api/config shows the proxy URL" || ok "$name: /api/config hides the proxy URL"

  # gorush's gRPC clients: Send and Health over TLS (the same certificate), a second iOS token.
  if "$PY" -c 'import grpc_tools' 2>/dev/null; then
    local rpc g0 count='import json,sys; print(sum(1 for r in json.load(sys.stdin) if r["token"] == sys.argv[1] and r["status"] == 200))'
    g0=$(curl -s "$CTL/__mock/apns-requests" | python3 -c "$count" "$LIVE2")
    rpc=$("$PY" Tests/interop/gorush_grpc_client.py --proto Sources/GorushRPC/Proto/gorush.proto --port "$gport" \
      --ios-token "$LIVE2" --android-token fcm-token-grpc --ca "$DIR/mock-ca.pem" 2>&1) || true
    if python3 -c '
import json, sys
r = json.loads(sys.argv[1])
assert r["health"] == "SERVING" and r["ios"] == {"counts": 1, "success": True} and r["android"] == {"counts": 1, "success": True}, r
assert r["errors"]["bad_platform"]["code"] == "INVALID_ARGUMENT" and r["errors"]["no_tokens"]["code"] == "INVALID_ARGUMENT", r
' "$rpc" 2>/dev/null; then ok "$name: gRPC over TLS (grpcio client from gorush.proto): health SERVING, Send accepted, bad input INVALID_ARGUMENT"
    else bad "$name: gRPC: $rpc"; fi
    local n=0
    for _ in $(seq 1 100); do
      n=$(( $(curl -s "$CTL/__mock/apns-requests" | python3 -c "$count" "$LIVE2") - g0 ))
      [ "$n" = 1 ] && break; sleep 0.1
    done
    [ "$n" = 1 ] && ok "$name: the gRPC Send reached the mock APNs" || bad "$name: gRPC Send at the mock APNs: $n"
  else
    echo "skip $name: gRPC client (no grpcio-tools in $PY; scripts/test.sh makes .venv)"
  fi

  kill -TERM "$GW"; wait "$GW" 2>/dev/null || true; GW=""
  python3 -c '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert lines and all("msg" in l and "level" in l and "time" in l for l in lines), lines[:3]
assert any("listening on https://" in l["msg"] for l in lines), [l["msg"] for l in lines]
' "$DIR/log/access.log" && ok "$name: log.format json, log.access_log file: JSON lines" || bad "$name: access log: $(head -3 "$DIR/log/access.log")"
  [ ! -e "$DIR/gorush.pid" ] && ok "$name: pid file removed at stop" || bad "$name: pid file left"

  # gorush's one-shot mode, with the same config.
  rc=0; out=$("$BIN" -c "$cfg" -ios -m hi -t "$LIVE" --topic com.example.app 2>&1) || rc=$?
  [ $rc = 0 ] && grep -q "apns-id" <<<"$out" && ok "$name: -ios -m hi -t <token> --topic: delivered, exit 0" || bad "$name: one-shot: rc $rc $out"
  rc=0; out=$("$BIN" -c "$cfg" -ios -m hi -t "$DEAD" --topic com.example.app 2>&1) || rc=$?
  [ $rc != 0 ] && grep -q "Unregistered" <<<"$out" && ok "$name: dead token: exit $rc with the reason" || bad "$name: dead one-shot: rc $rc $out"
}

[ -s "$P12" ] && [ -n "$PASSWORD" ] || { cat "$DIR/mock.log"; echo "FAIL no APNs client certificate"; exit 1; }
run_case p12 "$P12" p12 "$PASSWORD"
run_case pem "$PEM" pem ""
[ $fails = 0 ] && echo "gorush-dropin: all passed" || { echo "gorush-dropin: $fails failed"; exit 1; }
