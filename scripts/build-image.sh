#!/usr/bin/env bash
# Builds a container image of the gateway without a Docker engine or a Dockerfile:
#   1. a Debian bookworm root filesystem made from Debian's packages by mmdebstrap (variant minbase,
#      plus ca-certificates for the providers' TLS and tzdata), documentation and apt lists dropped;
#   2. the pushgate binary (the release build of scripts/build-release.sh by default) in
#      /usr/local/bin, and any shared library it links that the root filesystem lacks, copied to
#      the same path (a release binary links the Swift runtime statically and needs none; a debug
#      binary needs the toolchain's runtime libraries, which this copies);
#   3. a non-root user pushgate (uid/gid 10001) owning /var/lib/pushgate, the working directory,
#      where the default SQLite queue (data/pushgate.sqlite) lives: mount a volume there;
#      config/pushgate.yml as /etc/pushgate/pushgate.yml (mount your own over it);
#   4. committed by buildah in Docker's image format, which keeps HEALTHCHECK (the OCI format has no
#      such field): `pushgate -c /etc/pushgate/pushgate.yml --ping` every 30 s. No step runs inside
#      the image while it is built (no RUN), so no container runtime is needed to build it.
# The image is written as a docker-archive tar (`podman load -i`, `docker load -i`) and kept in
# buildah's local storage under the tag.
#
#   scripts/build-image.sh [BINARY] [OUT.tar]
#     BINARY   default .build-release/release/pushgate
#     OUT.tar  default .build-image/pushgate-image.tar
#   PUSHGATE_IMAGE_TAG (default localhost/pushgate:<version>), PUSHGATE_IMAGE_SUITE (default bookworm)
#
# Needs root (mmdebstrap into a directory, file ownership in the layer) and the Debian packages
# mmdebstrap and buildah; installs them with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-.build-release/release/pushgate}"
OUT="${2:-.build-image/pushgate-image.tar}"
SUITE="${PUSHGATE_IMAGE_SUITE:-bookworm}"
[ -x "$BIN" ] || { echo "build-image: no executable $BIN (scripts/build-release.sh builds it)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "build-image: run as root (mmdebstrap into a directory, file owners in the layer)" >&2; exit 1; }
for tool in mmdebstrap buildah; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y mmdebstrap buildah
    break
  fi
done
VERSION="$("$BIN" -V 2>/dev/null | awk '{print $NF}' | tr -cd 'A-Za-z0-9_.-')"
TAG="${PUSHGATE_IMAGE_TAG:-localhost/pushgate:${VERSION:-dev}}"
# buildah's own storage, beside the output (vfs: no overlay mounts needed, works in containers).
STORE=(--root "$PWD/.build-image/storage" --runroot "$PWD/.build-image/run" --storage-driver vfs)
mkdir -p "$(dirname "$OUT")" .build-image
WORK="$(mktemp -d)"
CTR=""
cleanup() {
  [ -n "$CTR" ] && buildah "${STORE[@]}" rm "$CTR" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
ROOTFS="$WORK/rootfs"

# The Debian root filesystem is kept for a day (.build-image/rootfs-<suite>.tar): rebuilding the
# image for a new binary then takes seconds; after a day the packages are fetched again (updates).
BASE=".build-image/rootfs-$SUITE.tar"
if [ ! -s "$BASE" ] || [ -n "$(find "$BASE" -mmin +1440)" ]; then
  echo "build-image: root filesystem (mmdebstrap $SUITE minbase)"
  mmdebstrap --quiet --variant=minbase --include=ca-certificates,tzdata \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    "$SUITE" "$BASE.new.tar"
  mv "$BASE.new.tar" "$BASE"
fi
mkdir -p "$ROOTFS"
tar -C "$ROOTFS" --numeric-owner -xf "$BASE"

echo "build-image: $BIN and the libraries Debian's files lack"
install -D -m 0755 "$BIN" "$ROOTFS/usr/local/bin/pushgate"
# Debug information is most of a release binary (220 MB -> 123 MB); PUSHGATE_IMAGE_STRIP=0 keeps it.
if [ "${PUSHGATE_IMAGE_STRIP:-1}" = 1 ] && command -v strip >/dev/null 2>&1; then strip --strip-debug "$ROOTFS/usr/local/bin/pushgate"; fi
ldd "$BIN" | awk '/=> \// {print $3} /^\s*\/[^ ]+ \(/ {print $1}' | while read -r lib; do
  [ -e "$ROOTFS$lib" ] && continue
  install -D -m 0644 "$(readlink -f "$lib")" "$ROOTFS$lib"
  echo "  + $lib"
done
# Every library the binary asks for must now resolve inside the root filesystem.
missing="$(chroot "$ROOTFS" /usr/bin/ldd /usr/local/bin/pushgate | grep 'not found' || true)"
[ -z "$missing" ] || { echo "build-image: unresolved in the image: $missing" >&2; exit 1; }

echo "build-image: user pushgate (10001), /etc/pushgate/pushgate.yml, /var/lib/pushgate"
echo 'pushgate:x:10001:10001:Pushgate:/var/lib/pushgate:/usr/sbin/nologin' >>"$ROOTFS/etc/passwd"
echo 'pushgate:x:10001:' >>"$ROOTFS/etc/group"
echo 'pushgate:!:19000::::::' >>"$ROOTFS/etc/shadow"
install -D -m 0644 config/pushgate.yml "$ROOTFS/etc/pushgate/pushgate.yml"
install -d -m 0750 "$ROOTFS/var/lib/pushgate"
chown 10001:10001 "$ROOTFS/var/lib/pushgate"
tar -C "$ROOTFS" --numeric-owner --xattrs -cf "$WORK/rootfs.tar" .

echo "build-image: image $TAG (buildah, Docker format)"
CTR="$(buildah "${STORE[@]}" from --format docker scratch)"
buildah "${STORE[@]}" add "$CTR" "$WORK/rootfs.tar" / >/dev/null
buildah "${STORE[@]}" config \
  --user 10001:10001 --workingdir /var/lib/pushgate \
  --entrypoint '["/usr/local/bin/pushgate"]' --cmd '["-c","/etc/pushgate/pushgate.yml"]' \
  --port 8088 --volume /var/lib/pushgate --stop-signal SIGTERM \
  --healthcheck 'CMD /usr/local/bin/pushgate -c /etc/pushgate/pushgate.yml --ping' \
  --healthcheck-interval 30s --healthcheck-timeout 10s --healthcheck-start-period 10s --healthcheck-retries 3 \
  --label org.opencontainers.image.title=pushgate \
  --label "org.opencontainers.image.version=${VERSION:-dev}" \
  --label org.opencontainers.image.description="Push gateway (APNs, FCM, HMS, Web Push, UnifiedPush) with gorush's API" \
  "$CTR"
buildah "${STORE[@]}" commit --quiet --format docker --rm "$CTR" "$TAG" >/dev/null
CTR=""
rm -f "$OUT"
buildah "${STORE[@]}" push --quiet "$TAG" "docker-archive:$OUT:$TAG"
echo "build-image: $OUT ($(du -h "$OUT" | cut -f1)), tag $TAG; load it with: podman load -i $OUT"
