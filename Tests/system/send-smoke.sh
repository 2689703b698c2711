#!/usr/bin/env bash
# Checks `pushgate send` against `pushgate mock` (a separate process, as an operator would run it):
# a delivery per provider prints the provider's answer and exits 0; a dead token exits 1 with the
# provider's reason (APNs 410 Unregistered, FCM 404 UNREGISTERED, HMS and HarmonyOS 80300007, Honor expireTokens, Web Push 410); an
# APNs broadcast to a channel made on the mock's channel-management host is delivered, one to a
# channel never made is refused (ChannelNotRegistered).
# Usage: Tests/system/send-smoke.sh [path/to/pushgate]   (default: builds and uses .build/debug/pushgate)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-}
if [ -z "$BIN" ]; then swift build --product pushgate >/dev/null; BIN=.build/debug/pushgate; fi
DIR=$(mktemp -d)
PORTS="--apns-port 0 --fcm-port 0 --hms-port 0 --webpush-port 0"
"$BIN" mock --dir "$DIR" $PORTS --stats-port 0 >"$DIR/mock.log" 2>&1 &
MOCK=$!
trap 'kill $MOCK 2>/dev/null || true; rm -rf "$DIR"' EXIT
for _ in $(seq 1 100); do [ -s "$DIR/gateway-snippet.yml" ] && grep -q "control" "$DIR/mock.log" && break; sleep 0.1; done
CTL=$(grep -o 'http://127.0.0.1:[0-9]*' "$DIR/mock.log" | head -1)
WP=$(grep -o 'https://127.0.0.1:[0-9]*/push' "$DIR/mock.log" | head -1)
CFG="$DIR/gateway-snippet.yml"
LIVE=a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90
DEAD=dddddddd00000000000000000000000000000000000000000000000000000001
fails=0
expect() { # expect <rc> <grep pattern> -- args...
  local want=$1 pattern=$2; shift 3
  local out rc=0
  out=$("$BIN" send -c "$CFG" "$@" 2>&1) || rc=$?
  if [ "$rc" = "$want" ] && grep -q -- "$pattern" <<<"$out"; then echo "ok   $*"; else echo "FAIL $* (rc $rc): $out"; fails=$((fails+1)); fi
}
expect 0 "apns-id: "        -- --platform ios --token $LIVE --title Hi --message Hello --topic com.example.app
expect 1 "HTTP 410 Unregistered" -- --platform ios --token $DEAD --message Hello
expect 0 "name: projects/"  -- --platform android --token fcm-token-1 --message Hello --data '{"n":1}'
expect 1 "HTTP 404 UNREGISTERED" -- --platform android --token $DEAD --message Hello
expect 0 "requestId: "      -- --platform huawei --token hms-token-1 --title Hi --message Hello
expect 1 "80300007"         -- --platform huawei --token $DEAD --message Hello
expect 0 "requestId: "      -- --platform harmony --token harmony-token-1 --title Hi --message Hello
expect 1 "80300007"         -- --platform harmony --token $DEAD --title Hi --message Hello
expect 0 "requestId: "      -- --platform honor --token honor-token-1 --title Hi --message Hello
expect 0 "requestId: "      -- --platform honor --token honor-token-1 --data '{"n":1}'
expect 1 "expireTokens"     -- --platform honor --token $DEAD --title Hi --message Hello
SUB=$(curl -s -X POST "$CTL/__mock/webpush/subscribe?count=1" | python3 -c 'import json,sys;print(json.dumps(json.load(sys.stdin)[0]))')
expect 0 "location: "       -- --platform webpush --subscription "$SUB" --title Hi --message Hello
expect 0 "location: "       -- --platform unifiedpush --endpoint "$WP/up-1" --message Hello
expect 1 "HTTP 410"         -- --platform unifiedpush --endpoint "$WP/$DEAD" --message Hello
expect 64 "give a target"    -- --platform ios --message Hello
# APNs broadcast (iOS 18 Live Activities): a channel made on the mock's management host, as
# `POST /api/apns/channels` would make it (curl speaks HTTP/2 with the mock's CA and JWT)
MANAGE=$(sed -n 's/.*broadcast channels \(https:[^)]*\)).*/\1/p' "$DIR/mock.log" | head -1)
JWT=$(curl -s "$CTL/__mock/apns-jwt")
CHANNEL=$(curl -s -D - -o /dev/null --http2 --cacert "$DIR/mock-ca.pem" -X POST "$MANAGE/1/apps/com.example.app/channels" \
  -H "authorization: bearer $JWT" -d '{"message-storage-policy":0,"push-type":"LiveActivity"}' | tr -d '\r' | sed -n 's/^apns-channel-id: //Ip')
LIVE_ACTIVITY='{"event":"update","timestamp":1700000000,"content-state":{"score":"1-0"}}'
if [ -n "$CHANNEL" ]; then
  expect 0 "delivered to $CHANNEL" -- --platform ios --channel "$CHANNEL" --notification "$LIVE_ACTIVITY"
else
  echo "FAIL the mock made no broadcast channel"; fails=$((fails+1))
fi
expect 1 "ChannelNotRegistered" -- --platform ios --channel bm90LWEtY2hhbm5lbA== --notification "$LIVE_ACTIVITY"
expect 64 "platform 1"       -- --platform android --channel bm90LWEtY2hhbm5lbA== --message Hello
STATS=$(curl -s "$CTL/__mock/stats?tokens=1")
grep -q "\"$LIVE\":1" <<<"$STATS" || { echo "FAIL mock stats do not count $LIVE: $STATS"; fails=$((fails+1)); }
[ $fails = 0 ] && echo "send-smoke: all passed" || { echo "send-smoke: $fails failed"; exit 1; }
