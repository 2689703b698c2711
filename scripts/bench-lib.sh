# Shared by the shell benchmark scripts (bench-compare.sh, engine-compare.sh, startup-order.sh);
# the Python test scripts share scripts/harness.py. Source it after `set -euo pipefail`.
#
# W: a work directory, removed on exit; PIDS: processes started, killed on exit.
W=$(mktemp -d); PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null || true; done; rm -rf "$W"' EXIT

# wait_for URL [seconds, default 10]: until URL answers 2xx; exits the script on timeout.
wait_for() {
  local tries=$(( ${2:-10} * 10 ))
  for _ in $(seq 1 "$tries"); do curl -sf "$1" >/dev/null && return 0; sleep 0.1; done
  echo "timeout waiting for $1"; exit 1
}

# gateway_config SNIPPET PORT: the mock's gateway snippet with the gateway listening on PORT.
gateway_config() { sed "s/^core:\$/core:\n  port: $2/" "$1"; }
