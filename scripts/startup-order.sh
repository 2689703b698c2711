#!/usr/bin/env bash
# Regenerates scripts/startup-order.txt, the linker symbol-ordering file of the release build
# (scripts/build-release.sh): the functions `pushgate serve` runs from start to idle first, then
# those one push per platform adds, each group in the executable's address order.
#
# Why: the kernel maps 64 KB of code around every page fault (fault-around), and the ~2 MB of code
# run at start is spread over the whole 35 MB text, so ~24 MB of text became resident at idle.
# Grouping the functions that run at start (compiled into separate sections) keeps it to a few MB.
#
# Needs valgrind (apt-get install valgrind) and a release executable (any ordering; names do not
# change). valgrind 3.19 cannot read the executable's DWARF 5, so it runs a copy without debug info.
# Usage: scripts/startup-order.sh [pushgate binary]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-.build-release/release/pushgate}
OUT=scripts/startup-order.txt
source bench/bench-lib.sh

llvm-objcopy --strip-debug "$BIN" "$W/pushgate"
"$BIN" mock --dir "$W/m" --apns-port 0 --fcm-port 0 --hms-port 0 --webpush-port 0 --stats-port 28996 >"$W/mock.log" 2>&1 & PIDS+=($!)
wait_for http://127.0.0.1:28996/__mock/stats 60
{ echo "queue:"; echo "  sqlite:"; echo "    path: $W/q.sqlite"; gateway_config "$W/m/gateway-snippet.yml" 28998; } > "$W/gw.yml"

valgrind --tool=callgrind --demangle=no --dump-instr=no --callgrind-out-file="$W/cg.out" \
  "$W/pushgate" serve --config "$W/gw.yml" >"$W/vg.log" 2>&1 & VG=$!; PIDS+=($VG)
wait_for http://127.0.0.1:28998/healthz 60
sleep 5
callgrind_control --dump=idle "$VG" >/dev/null
sleep 1
post() { curl -sf -X POST http://127.0.0.1:28998/api/push -d "$1" >/dev/null; }
TOKEN=a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90
SUB=$(curl -s -X POST "http://127.0.0.1:28996/__mock/webpush/subscribe?count=1" | python3 -c 'import json,sys;print(json.dumps(json.load(sys.stdin)[0]))')
for _ in 1 2 3; do
  post '{"notifications":[{"tokens":["'$TOKEN'"],"platform":1,"title":"Hi","message":"Hello","topic":"com.example.app"}]}'
  post '{"notifications":[{"tokens":["fcm-token-1"],"platform":2,"title":"Hi","message":"Hello","data":{"k":1}}]}'
  post '{"notifications":[{"platform":"webpush","subscriptions":['"$SUB"'],"title":"Hi","message":"Hello"}]}'
  sleep 1
done
kill -INT "$VG"; wait "$VG" || true

# function names of each dump ("fn=(id) name" on first use; "'N" marks recursion depth)
names() { grep -ohE '^c?fn=\([0-9]+\) .*' "$@" | sed -E "s/^c?fn=\([0-9]+\) //; s/'[0-9]+$//" | sort -u; }
names "$W"/cg.out.*idle* "$W"/cg.out.1 2>/dev/null > "$W/idle.txt" || true
[ -s "$W/idle.txt" ] || { echo "no idle dump from callgrind"; ls "$W"; exit 1; }
names "$W"/cg.out* > "$W/all.txt"
# the executable's functions in address order; keep the ones run, idle first
llvm-nm -n --defined-only "$W/pushgate" | awk '$2 ~ /^[tTwW]$/ {print $3}' > "$W/addr.txt"
{
  awk 'NR==FNR{u[$1]=1;next} ($1 in u) && !s[$1]++' "$W/idle.txt" "$W/addr.txt"
  awk 'NR==FNR{u[$1]=1;next} ($1 in u) && !s[$1]++' "$W/all.txt" "$W/addr.txt" | grep -vxFf "$W/idle.txt"
} > "$OUT"
echo "$(wc -l < "$W/idle.txt") functions at start + idle, $(wc -l < "$W/all.txt") with one push per platform; $(wc -l < "$OUT") written to $OUT"
