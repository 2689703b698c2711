#!/usr/bin/env bash
# Starts a throwaway PostgreSQL server for the tests, listening on 127.0.0.1 only, and prints the
# line that points the tests at it:
#
#   eval "$(scripts/start-postgres.sh)"      # sets PUSHGATE_TEST_POSTGRES_URL
#   scripts/start-postgres.sh stop           # stops it
#
# Uses Debian's `postgresql` package (apt-get install -y postgresql; installed here when missing and
# running as root). Runs as the `postgres` user when started as root. Data lives in
# ${PUSHGATE_PG_DIR:-/tmp/pushgate-pg}; port ${PUSHGATE_PG_PORT:-31329}; database
# ${PUSHGATE_PG_DB:-pushgate_test} (created when missing; the process-level tests in Tests/system use their own).
set -euo pipefail
dir="${PUSHGATE_PG_DIR:-/tmp/pushgate-pg}"
port="${PUSHGATE_PG_PORT:-31329}"
# Below Linux's ephemeral range (32768-60999): a port in it can be taken, for a moment, by the
# local end of any outgoing connection (the CI scripts open many), and the server then cannot bind.
db="${PUSHGATE_PG_DB:-pushgate_test}"

bindir=""
find_bindir() {
  bindir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)"
  if [ -z "$bindir" ] && command -v pg_ctl >/dev/null 2>&1; then bindir="$(dirname "$(command -v pg_ctl)")"; fi
}
find_bindir
if [ -z "$bindir" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing postgresql (apt-get)" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    find_bindir
  fi
fi
if [ -z "$bindir" ]; then
  echo "start-postgres: PostgreSQL is not installed (apt-get install -y postgresql)" >&2
  exit 1
fi

as_pg() {
  if [ "$(id -u)" = 0 ]; then
    # initdb refuses to run as root.
    su postgres -s /bin/sh -c "$*"
  else
    sh -c "$*"
  fi
}

if [ "${1:-start}" = "stop" ]; then
  if [ -f "$dir/data/postmaster.pid" ]; then as_pg "'$bindir/pg_ctl' -D '$dir/data' -m fast stop" >&2 || true; fi
  exit 0
fi

mkdir -p "$dir"
if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
if [ ! -f "$dir/data/PG_VERSION" ]; then
  as_pg "'$bindir/initdb' -D '$dir/data' -U postgres --auth=trust -E UTF8 >'$dir/initdb.log' 2>&1" || { cat "$dir/initdb.log" >&2; exit 1; }
fi
if ! as_pg "'$bindir/pg_ctl' -D '$dir/data' status" >/dev/null 2>&1; then
  as_pg "'$bindir/pg_ctl' -D '$dir/data' -l '$dir/server.log' -w -t 60 \
    -o \"-c listen_addresses=127.0.0.1 -p $port -k '$dir' -c fsync=off -c max_connections=200\" start" >&2 \
    || { cat "$dir/server.log" >&2; exit 1; }
fi
as_pg "'$bindir/psql' -h 127.0.0.1 -p $port -U postgres -tAc \"SELECT 1 FROM pg_database WHERE datname='$db'\"" | grep -q 1 \
  || as_pg "'$bindir/createdb' -h 127.0.0.1 -p $port -U postgres '$db'"
echo "export PUSHGATE_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:$port/$db?sslmode=disable"
