#!/usr/bin/env bash
# Memory, accept rate and file size while a
# backlog builds up on the sqlite engine, then drain rate and time to drain.
#
# 1. `pushgate mock` whose APNs holds every answer for 10 minutes (--apns-latency-ms 600000), a
#    gateway (sqlite engine, fresh file, queue.max_pending = N + 100k) in front of it.
# 2. N APNs deliveries enqueued by `pushgate bench` (100 tokens per request, 4 connections) in ten
#    chunks of N/10; after each chunk: queue_pending and memory_rss_bytes from /api/stat/go, VmRSS /
#    RssAnon / VmHWM from /proc, the SQLite file + WAL size; the accept rate per chunk and overall.
# 3. Gateway stopped (SIGTERM, SIGKILL after 30 s), the slow mock replaced by a fast one on the same
#    ports (same --dir), the gateway restarted on the same file: every 0.5 s queue_pending, RSS and
#    the mock's OK count; time to drain (gateway start -> queue_pending 0 and the mock has N OKs) and
#    the drain rate; RSS printed at every 10 % drained.
#
# Usage: bench/backlog-memory.sh N
#   full scale:  bench/backlog-memory.sh 1000000     (and 10000000 for "still flat at 10M")
#   small scale: nice -n 19 bench/backlog-memory.sh 200000
# Env: PUSHGATE_BIN (default .build-release/release/pushgate), KEEP_DIR (copy the SQLite file there).
# Ports: mock 28543-28547, gateway 28188.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:?usage: bench/backlog-memory.sh N}
BIN=${PUSHGATE_BIN:-.build-release/release/pushgate}
[ -x "$BIN" ] || { echo "no pushgate binary at $BIN (scripts/build-release.sh, or set PUSHGATE_BIN)"; exit 1; }
source bench/bench-lib.sh
DB="$W/backlog.sqlite"; GWPORT=28188; CTL=http://127.0.0.1:28546
CHUNK=$(( (N + 9) / 10 ))

start_mock() {  # start_mock [extra mock args]
  "$BIN" mock --dir "$W/m" --apns-port 28543 --fcm-port 28544 --webpush-port 28545 --stats-port 28546 --hms-port 28547 "$@" >>"$W/mock.log" 2>&1 & MOCK=$!; PIDS+=($MOCK)
  wait_for $CTL/__mock/stats
}
start_gateway() {
  gateway_config "$W/m/gateway-snippet.yml" $GWPORT > "$W/gw.yml"
  PUSHGATE_QUEUE_SQLITE_PATH="$DB" PUSHGATE_QUEUE_MAX_PENDING=$(( N + 100000 )) "$BIN" serve --config "$W/gw.yml" >>"$W/gw.log" 2>&1 & GW=$!; PIDS+=($GW)
  wait_for http://127.0.0.1:$GWPORT/healthz 120
}
stop_pid() {  # SIGTERM, then SIGKILL after $2 seconds
  kill "$1" 2>/dev/null || return 0
  for _ in $(seq 1 $(( ${2:-30} * 10 ))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  echo "  (pid $1 still running after ${2:-30} s: SIGKILL)"; kill -9 "$1" 2>/dev/null || true; sleep 0.5
}
# snapshot LABEL: one line of memory, queue and file figures.
snapshot() {
  python3 - "$1" "$GW" "$DB" $GWPORT <<'PYEOF'
import json, os, sys, urllib.request
label, pid, db, port = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
d = json.load(urllib.request.urlopen("http://127.0.0.1:%s/api/stat/go" % port, timeout=30))
st = {l.split(":")[0]: int(l.split()[1]) for l in open("/proc/%s/status" % pid) if l.startswith(("VmRSS", "RssAnon", "VmHWM"))}
size = lambda p: os.path.getsize(p) if os.path.exists(p) else 0
print("%-22s pending %9d | RSS %7.1f MB (/api/stat/go) VmRSS %7.1f RssAnon %7.1f VmHWM %7.1f MB | sqlite %7.1f MB + WAL %6.1f MB"
      % (label, d.get("queue_pending", -1), d["memory_rss_bytes"] / 1048576, st["VmRSS"] / 1024, st["RssAnon"] / 1024, st["VmHWM"] / 1024,
         size(db) / 1048576, size(db + "-wal") / 1048576), flush=True)
PYEOF
}

echo "== backlog of $N APNs deliveries behind an APNs that answers after 10 minutes (sqlite engine)"
start_mock --apns-latency-ms 600000
start_gateway
sleep 2
snapshot "idle"
total_acc=0; total_sec=0
for i in $(seq 1 10); do
  "$BIN" bench --gateway-url http://127.0.0.1:$GWPORT --count $CHUNK --tokens 100 --concurrency 4 --quiet --json 2>/dev/null > "$W/b.json" || true
  read -r acc sec rate st < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["accepted_deliveries"], d["send_seconds"], d["accepted_per_sec"], ",".join("%s:%s" % kv for kv in sorted(d["http_statuses"].items())))' "$W/b.json")
  total_acc=$(( total_acc + acc )); total_sec=$(python3 -c "print($total_sec + $sec)")
  echo "  chunk $i: accepted $acc in $sec s = $rate/s (HTTP $st)"
  snapshot "after $(( i * 10 )) % ($total_acc)"
done
python3 -c "print('accept rate overall: %d deliveries in %.1f s = %.0f/s' % ($total_acc, $total_sec, $total_acc / $total_sec))"
sleep 3
snapshot "queued, settled"

echo "== restart on a fast mock: drain"
ts=$(date +%s.%N); stop_pid $GW 30; echo "gateway stopped in $(python3 -c "import time; print('%.1f' % (time.time() - $ts))") s"
snapshot_file() { python3 -c 'import os,sys; s=lambda p: os.path.getsize(p) if os.path.exists(p) else 0; print("sqlite file after stop: %.1f MB + WAL %.1f MB" % (s(sys.argv[1])/1048576, s(sys.argv[1]+"-wal")/1048576))' "$DB"; }
snapshot_file
ts=$(date +%s.%N); stop_pid $MOCK 10; echo "slow mock stopped in $(python3 -c "import time; print('%.1f' % (time.time() - $ts))") s"
start_mock
t0=$(date +%s.%N)
start_gateway
python3 - "$GW" "$total_acc" "$t0" $GWPORT $CTL <<'PYEOF'
import json, sys, time, urllib.request
pid, n, t0, port, ctl = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
get = lambda u: json.load(urllib.request.urlopen(u, timeout=30))
def rss():
    st = {l.split(":")[0]: int(l.split()[1]) for l in open("/proc/%s/status" % pid) if l.startswith(("VmRSS", "RssAnon", "VmHWM"))}
    return st["VmRSS"] / 1024, st["RssAnon"] / 1024, st["VmHWM"] / 1024
print("gateway up after %.2f s" % (time.time() - t0))
next_mark, peak, last_ok, first_pending = 0.1, 0.0, 0, None
while True:
    g = get("http://127.0.0.1:%s/api/stat/go" % port); m = get(ctl + "/__mock/stats")
    pending, ok = g.get("queue_pending", -1), m.get("ok", 0)
    if first_pending is None: first_pending = pending; print("pending at start: %d" % pending)
    vm, anon, hwm = rss(); peak = max(peak, vm)
    t = time.time() - t0
    while ok >= next_mark * n and next_mark <= 1.0001:
        print("  %3d %% drained at %6.1f s: mock OK %d, pending %d | VmRSS %.1f MB RssAnon %.1f MB (/api/stat/go %.1f MB)"
              % (round(next_mark * 100), t, ok, pending, vm, anon, g["memory_rss_bytes"] / 1048576), flush=True)
        next_mark += 0.1
    if pending == 0 and ok >= n:
        break
    if t > 3600 or (t > 60 and ok == last_ok and pending > 0 and ok == 0):
        print("drain stalled: pending %d, mock OK %d" % (pending, ok)); break
    last_ok = ok
    time.sleep(0.5)
t = time.time() - t0
m = get(ctl + "/__mock/stats")
first, last = m.get("first_ok_ns", 0), m.get("last_ok_ns", 0)
window = (last - first) / 1e9 if last > first else 0
print("drained %d in %.1f s from gateway start = %.0f/s (first to last OK at the mock %.1f s = %.0f/s); peak VmRSS while draining %.1f MB, VmHWM %.1f MB"
      % (m.get("ok", 0), t, m.get("ok", 0) / t, window, m.get("ok", 0) / window if window else 0, peak, rss()[2]))
PYEOF
snapshot "drained"
if [ -n "${KEEP_DIR:-}" ]; then stop_pid $GW 30; cp "$DB"* "$KEEP_DIR"/; fi
