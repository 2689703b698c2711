#!/usr/bin/env bash
# Two gateways on one PostgreSQL queue vs one, same machine, same mock.
#
# A throwaway PostgreSQL (scripts/start-postgres.sh: fsync=off, 127.0.0.1), one `pushgate mock`.
# Phase 1: one gateway (queue.engine postgres, database <db>_1) takes the whole load; phase 2: two
# gateways on one database (<db>_2) share the queue (FOR UPDATE SKIP LOCKED leases). In both phases
# the load is the same: two `pushgate bench` processes at once (COUNT/2 APNs deliveries each, 100
# tokens per request, 2 connections each); phase 1 sends both to gateway A, phase 2 one to A and
# one to B. The benches run without --mock-url (both use the same bench token numbers and each would
# reset the mock): delivered/s = the mock's OK answers since a reset just before the phase / (last
# OK - phase start), on CLOCK_MONOTONIC, the mock's clock. Prints both phases and two / one.
# Everything shares this machine's cores, so the ratio is a lower bound of what two hosts give.
# Also prints, per phase, what PostgreSQL did per delivery (pg_stat_user_tables inserts, updates,
# HOT updates, deletes, index scans, sequential scans and rows read; WAL bytes; commits), the
# measured side of docs/benchmarks.md (its section on scale-out on one PostgreSQL queue).
#
# Usage: bench/scale-out.sh [COUNT]
#   full scale:  bench/scale-out.sh 400000
#   small scale: nice -n 19 bench/scale-out.sh 40000
# Env: PUSHGATE_BIN (default .build-release/release/pushgate), PUSHGATE_PG_PORT (28432),
#   PUSHGATE_PG_DIR (/tmp/pg-helper), PG_DB (pushgate_scaleout), KEEP_PG=1 (leave PostgreSQL running).
# Ports: mock 28743-28747, gateways 28391 (A) and 28392 (B), PostgreSQL 28432.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-400000}
BIN=${PUSHGATE_BIN:-.build-release/release/pushgate}
[ -x "$BIN" ] || { echo "no pushgate binary at $BIN (scripts/build-release.sh, or set PUSHGATE_BIN)"; exit 1; }
export PUSHGATE_PG_PORT=${PUSHGATE_PG_PORT:-28432} PUSHGATE_PG_DIR=${PUSHGATE_PG_DIR:-/tmp/pg-helper}
PG_DB=${PG_DB:-pushgate_scaleout}
source bench/bench-lib.sh
[ "${KEEP_PG:-0}" = 1 ] || trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null || true; done; sleep 1; scripts/start-postgres.sh stop; rm -rf "$W"' EXIT
CTL=http://127.0.0.1:28746
HALF=$(( N / 2 ))

"$BIN" mock --dir "$W/m" --apns-port 28743 --fcm-port 28744 --webpush-port 28745 --stats-port 28746 --hms-port 28747 >"$W/mock.log" 2>&1 & PIDS+=($!)
wait_for $CTL/__mock/stats

start_gateway() {  # start_gateway PORT DB
  gateway_config "$W/m/gateway-snippet.yml" "$1" > "$W/gw$1.yml"
  PUSHGATE_QUEUE_ENGINE=postgres PUSHGATE_QUEUE_POSTGRES_URL="postgres://postgres@127.0.0.1:$PUSHGATE_PG_PORT/$2?sslmode=disable" \
    PUSHGATE_QUEUE_MAX_PENDING=$(( N + 100000 )) "$BIN" serve --config "$W/gw$1.yml" >"$W/gw$1.log" 2>&1 & PIDS+=($!)
  wait_for http://127.0.0.1:$1/healthz 60
}

# pgstats DB: table counters and the WAL position, as one JSON object (measured rows per delivery).
pgstats() {
  psql -h 127.0.0.1 -p "$PUSHGATE_PG_PORT" -U postgres -d "$1" -tAc "SELECT json_build_object('wal', pg_current_wal_lsn() - '0/0'::pg_lsn,
    'tables', (SELECT json_object_agg(relname, json_build_object('ins', n_tup_ins, 'upd', n_tup_upd, 'hot', n_tup_hot_upd, 'del', n_tup_del,
      'seq_scan', seq_scan, 'seq_read', seq_tup_read, 'idx_scan', coalesce(idx_scan, 0), 'idx_fetch', coalesce(idx_tup_fetch, 0)))
      FROM pg_stat_user_tables WHERE relname LIKE 'pushgate_%'),
    'xact', (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()))"
}
# pgdelta BEFORE AFTER DELIVERIES: the counters' growth per delivery (statistics are flushed ~1 s late: sleep first).
pgdelta() {
  python3 - "$1" "$2" "$3" <<'PYEOF'
import json, sys
a, b, n = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
print("  PostgreSQL per delivery (pg_stat_user_tables deltas / %d): WAL %.0f bytes, %.3f commits" % (n, (float(b["wal"]) - float(a["wal"])) / n, (b["xact"] - a["xact"]) / n))
for t in sorted(b["tables"]):
    x, y = a["tables"].get(t, {}), b["tables"][t]
    d = {k: (y[k] - x.get(k, 0)) / n for k in y}
    if any(abs(v) > 1e-4 for v in d.values()):
        print("    %-26s ins %.3f upd %.3f (hot %.3f) del %.3f | idx_scan %.3f idx_fetch %.3f seq_scan %.4f seq_read %.2f"
              % (t, d["ins"], d["upd"], d["hot"], d["del"], d["idx_scan"], d["idx_fetch"], d["seq_scan"], d["seq_read"]))
PYEOF
}

# phase LABEL PORT_A PORT_B: both benches at once, then wait for COUNT OKs at the mock.
phase() {
  curl -s -X POST $CTL/__mock/reset >/dev/null
  local t0; t0=$(python3 -c 'import time; print(time.monotonic_ns())')
  "$BIN" bench --gateway-url http://127.0.0.1:$2 --count $HALF --tokens 100 --concurrency 2 --quiet --json 2>/dev/null > "$W/b1.json" & local b1=$!
  "$BIN" bench --gateway-url http://127.0.0.1:$3 --count $HALF --tokens 100 --concurrency 2 --quiet --json 2>/dev/null > "$W/b2.json" & local b2=$!
  wait $b1 $b2 || true
  python3 - "$1" "$t0" $(( HALF * 2 )) $CTL "$W/b1.json" "$W/b2.json" <<'PYEOF'
import json, sys, time, urllib.request
label, t0, n, ctl = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
acc = sum(json.load(open(p))["accepted_deliveries"] for p in sys.argv[5:7])
send = max(json.load(open(p))["send_seconds"] for p in sys.argv[5:7])
deadline = time.time() + 600
while True:
    m = json.load(urllib.request.urlopen(ctl + "/__mock/stats", timeout=30))
    if m.get("ok", 0) >= acc or time.time() > deadline: break
    time.sleep(0.2)
window = (m["last_ok_ns"] - t0) / 1e9
rate = m["ok"] / window if window > 0 else 0
print("%s: accepted %d of %d (%.0f/s), delivered %d in %.2f s = %.0f delivered/s" % (label, acc, n, acc / send, m["ok"], window, rate))
print("RATE %.0f" % rate)
PYEOF
}

eval "$(PUSHGATE_PG_DB=postgres scripts/start-postgres.sh)"
for d in ${PG_DB}_1 ${PG_DB}_2; do  # fresh databases: no rows or counters from an earlier run
  psql -q -h 127.0.0.1 -p "$PUSHGATE_PG_PORT" -U postgres -d postgres -c "DROP DATABASE IF EXISTS $d" -c "CREATE DATABASE $d"
done
echo "== one gateway on PostgreSQL (database ${PG_DB}_1), $N deliveries from two benches"
start_gateway 28391 ${PG_DB}_1; GA=${PIDS[-1]}
sleep 1
S0=$(pgstats ${PG_DB}_1)
phase "one gateway " 28391 28391 | tee "$W/p1.txt"
sleep 2; pgdelta "$S0" "$(pgstats ${PG_DB}_1)" $(( HALF * 2 ))
kill $GA; sleep 2
echo "== two gateways on one PostgreSQL queue (database ${PG_DB}_2), $N deliveries, one bench each"
start_gateway 28391 ${PG_DB}_2
start_gateway 28392 ${PG_DB}_2
sleep 1
S0=$(pgstats ${PG_DB}_2)
phase "two gateways" 28391 28392 | tee "$W/p2.txt"
sleep 2; pgdelta "$S0" "$(pgstats ${PG_DB}_2)" $(( HALF * 2 ))
for g in 28391 28392; do
  curl -s http://127.0.0.1:$g/api/stat/app | python3 -c "import json,sys; d=json.load(sys.stdin); print('  gateway $g: success_tasks %s, failure_tasks %s (the totals of every gateway on this queue, read back every second)' % (d.get('success_tasks'), d.get('failure_tasks')))"
done
R1=$(sed -n 's/^RATE //p' "$W/p1.txt"); R2=$(sed -n 's/^RATE //p' "$W/p2.txt")
python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print('scale-out: one gateway %.0f/s, two gateways %.0f/s, two / one = %.2f x (same 2-core machine: PostgreSQL, mock, benches and gateways share it)' % (a, b, b/a if a else 0))" "$R1" "$R2"
