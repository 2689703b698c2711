#!/usr/bin/env bash
# Runs the whole test suite: unit tests, end-to-end tests against the TLS HTTP/2 mock providers,
# and the interop checks against independent Python implementations (google-auth, http-ece,
# pywebpush, PyJWT) when a Python venv can be made.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${PUSHGATE_INTEROP_PYTHON:-}" ] && command -v python3 >/dev/null 2>&1; then
  venv=.venv
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" || true
  fi
  if [ -x "$venv/bin/python" ]; then
    if "$venv/bin/pip" install --quiet --disable-pip-version-check -r Tests/interop/requirements.txt; then
      export PUSHGATE_INTEROP_PYTHON="$PWD/$venv/bin/python"
    else
      echo "warning: could not install the interop packages; interop tests will be skipped" >&2
    fi
  fi
fi

# PostgreSQL for the shared-queue tests: a throwaway server on 127.0.0.1 (Debian's postgresql
# package, installed by the script when running as root). Without it those tests are skipped.
if [ -z "${PUSHGATE_TEST_POSTGRES_URL:-}" ] && [ "${PUSHGATE_SKIP_POSTGRES:-0}" != 1 ]; then
  if pg_env="$(./scripts/start-postgres.sh)"; then
    eval "$pg_env"
    trap './scripts/start-postgres.sh stop || true' EXIT
  else
    echo "warning: could not start PostgreSQL; PostgreSQL queue tests will be skipped" >&2
  fi
fi

swift build --build-tests "$@"
swift test --skip-build "$@"
