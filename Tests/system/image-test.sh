#!/usr/bin/env bash
# The image of scripts/build-image.sh, run by podman (no Docker engine): loads the archive, runs the
# gateway as a container against `pushgate mock` on the host, and checks that
#   - it runs as the non-root user pushgate (uid 10001) with /var/lib/pushgate its own,
#   - /healthz and /ui answer 200, and a push reaches the mock APNs (sync answer, no failure),
#   - the image's HEALTHCHECK (`pushgate -c /etc/pushgate/pushgate.yml --ping`) passes, and
#     `--ping` exits 1 when nothing listens,
#   - SIGTERM (podman stop) ends it with exit status 0.
# Not in .ci/run: building the root filesystem downloads Debian packages (~2 min) and needs root.
#
#   Tests/system/image-test.sh [IMAGE.tar] [TAG] [HOST_PUSHGATE]
#     defaults: .build-image/pushgate-image.tar, localhost/pushgate:<version>, .build/debug/pushgate
#
# Podman here runs with runc, cgroupfs and no default rlimits (CONTAINERS_CONF below): in a VM
# without CAP_SYS_RESOURCE and with hybrid cgroups, crun and podman's default nofile/nproc limits
# are refused. Elsewhere plain `podman run` works the same.
set -euo pipefail
cd "$(dirname "$0")/../.."
ARCHIVE="${1:-.build-image/pushgate-image.tar}"
HOST_BIN="${3:-.build/debug/pushgate}"
TAG="${2:-localhost/pushgate:$("$HOST_BIN" -V | awk '{print $NF}')}"
command -v podman >/dev/null || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y podman runc; }
WORK="$(mktemp -d)"
conf="$WORK/containers.conf"
printf '[containers]\ndefault_ulimits = []\n[engine]\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n' >"$conf"
export CONTAINERS_CONF="$conf"
P=(podman --storage-driver vfs --runtime runc)
NAME="pushgate-image-test-$$"
MOCK_PID=""
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
cleanup() {
  "${P[@]}" rm -f "$NAME" >/dev/null 2>&1 || true
  [ -n "$MOCK_PID" ] && kill "$MOCK_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

"${P[@]}" load -i "$ARCHIVE" >/dev/null 2>&1
# The mock providers on the host; the container reaches them over the host network.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
STATS=$(free_port)
GW=$(free_port)
"$HOST_BIN" mock --dir "$WORK/mock" --apns-port 0 --fcm-port 0 --hms-port 0 --webpush-port 0 --stats-port "$STATS" \
  >"$WORK/mock.log" 2>&1 &
MOCK_PID=$!
for _ in $(seq 1 300); do [ -s "$WORK/mock/gateway-snippet.yml" ] && curl -sf "http://127.0.0.1:$STATS/__mock/stats" >/dev/null && break; sleep 0.1; done
chmod -R a+rX "$WORK"
"${P[@]}" run -d --name "$NAME" --network host -v "$WORK/mock:$WORK/mock:ro" \
  -e PUSHGATE_CORE_ADDRESS=127.0.0.1 -e PUSHGATE_CORE_PORT="$GW" "$TAG" -c "$WORK/mock/gateway-snippet.yml" >/dev/null 2>&1
up=0
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$GW/healthz" >/dev/null && { up=1; break; }; sleep 0.2; done
if [ $up = 1 ]; then ok "the container serves /healthz"; else bad "not up: $("${P[@]}" logs "$NAME" 2>&1 | tail -5)"; exit 1; fi

user=$("${P[@]}" exec "$NAME" /usr/bin/id -u 2>/dev/null)
[ "$user" = 10001 ] && ok "runs as uid 10001 (pushgate)" || bad "runs as uid $user"
owner=$("${P[@]}" exec "$NAME" stat -c %U /var/lib/pushgate 2>/dev/null)
[ "$owner" = pushgate ] && ok "/var/lib/pushgate belongs to pushgate" || bad "/var/lib/pushgate belongs to $owner"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$GW/ui")" = 200 ] && ok "/ui answers 200" || bad "/ui"
answer=$(curl -s -X POST "http://127.0.0.1:$GW/api/push" -d '{"notifications":[{"tokens":["a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"],
  "platform":1,"message":"from the image","topic":"com.example.app"}],"sync":true}')
grep -q '"logs":\[\]' <<<"$answer" && grep -q '"success":"ok"' <<<"$answer" && ok "a push through the container reached the mock APNs: $answer" || bad "push: $answer"
"${P[@]}" healthcheck run "$NAME" >/dev/null 2>&1 && ok "HEALTHCHECK (pushgate --ping) passes" || bad "HEALTHCHECK failed"
test_cmd=$("${P[@]}" image inspect "$TAG" --format '{{.HealthCheck.Test}}' 2>/dev/null)
grep -q -- '--ping' <<<"$test_cmd" && ok "image HEALTHCHECK: $test_cmd" || bad "image HEALTHCHECK: $test_cmd"
if "${P[@]}" exec -e PUSHGATE_CORE_PORT=1 "$NAME" /usr/local/bin/pushgate -c "$WORK/mock/gateway-snippet.yml" --ping >/dev/null 2>&1; then
  bad "--ping with nothing listening exited 0"
else ok "--ping with nothing listening exits 1"; fi
"${P[@]}" stop -t 40 "$NAME" >/dev/null 2>&1
code=$("${P[@]}" inspect "$NAME" --format '{{.State.ExitCode}}' 2>/dev/null)
[ "$code" = 0 ] && ok "SIGTERM (podman stop): exit status 0" || bad "exit status after SIGTERM: $code"
[ $fails = 0 ] && echo "image-test: PASSED" || { echo "image-test: $fails failed"; exit 1; }
