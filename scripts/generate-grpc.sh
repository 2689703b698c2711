#!/usr/bin/env bash
# Regenerates the Swift code of gorush's gRPC API (Sources/GorushRPC/Generated/) from
# Sources/GorushRPC/Proto/gorush.proto. The generated files are committed: the build never runs
# protoc (the build plugin would rebuild swift-protobuf's generator on every clean build).
#
#   ./scripts/generate-grpc.sh
#
# What it needs, all made here when missing:
# - protoc: from PROTOC, else `protoc` on PATH, else PyPI's grpcio-tools (python -m grpc_tools.protoc)
#   in a venv under $GEN_DIR (its bundled google/protobuf/*.proto are used for struct.proto);
# - protoc-gen-swift (swift-protobuf 1.39.0) and protoc-gen-grpc-swift-2 (grpc-swift-protobuf 2.4.1):
#   from PROTOC_GEN_SWIFT / PROTOC_GEN_GRPC_SWIFT, else built once in release mode in a scratch
#   package under $GEN_DIR (about a minute on 2 cores; later runs reuse it).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
GEN_DIR="${GEN_DIR:-${TMPDIR:-/tmp}/pushgate-grpc-gen}"
proto_dir="$root/Sources/GorushRPC/Proto"
out="$root/Sources/GorushRPC/Generated"
mkdir -p "$GEN_DIR" "$out"

# The generators, at the versions Package.swift depends on.
if [ -z "${PROTOC_GEN_SWIFT:-}" ] || [ -z "${PROTOC_GEN_GRPC_SWIFT:-}" ]; then
  pkg="$GEN_DIR/plugins"
  mkdir -p "$pkg/Sources/Empty"
  cat >"$pkg/Package.swift" <<'EOF'
// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "pushgate-grpc-plugins",
    dependencies: [
        .package(url: "https://github.com/apple/swift-protobuf.git", exact: "1.39.0"),
        .package(url: "https://github.com/grpc/grpc-swift-protobuf.git", exact: "2.4.1"),
        .package(url: "https://github.com/grpc/grpc-swift-2.git", exact: "2.4.3"),
    ],
    targets: [.target(name: "Empty")]
)
EOF
  echo "public let empty = 0" >"$pkg/Sources/Empty/Empty.swift"
  (cd "$pkg" && swift build -c release --product protoc-gen-swift && swift build -c release --product protoc-gen-grpc-swift-2)
  bin="$(cd "$pkg" && swift build -c release --show-bin-path)"
  PROTOC_GEN_SWIFT="${PROTOC_GEN_SWIFT:-$bin/protoc-gen-swift}"
  PROTOC_GEN_GRPC_SWIFT="${PROTOC_GEN_GRPC_SWIFT:-$bin/protoc-gen-grpc-swift-2}"
fi

# protoc, and the directory holding google/protobuf/struct.proto.
includes=()
if [ -n "${PROTOC:-}" ]; then
  protoc=("$PROTOC")
elif command -v protoc >/dev/null 2>&1; then
  protoc=(protoc)
else
  venv="$GEN_DIR/venv"
  if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv"; fi
  "$venv/bin/pip" install --quiet --disable-pip-version-check grpcio-tools
  protoc=("$venv/bin/python" -m grpc_tools.protoc)
  includes+=("-I$("$venv/bin/python" -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')")
fi

"${protoc[@]}" -I"$proto_dir" "${includes[@]}" \
  --plugin=protoc-gen-swift="$PROTOC_GEN_SWIFT" \
  --plugin=protoc-gen-grpc-swift="$PROTOC_GEN_GRPC_SWIFT" \
  --swift_out="$out" --swift_opt=Visibility=Public \
  --grpc-swift_out="$out" --grpc-swift_opt=Visibility=Public,Server=true,Client=true \
  "$proto_dir/gorush.proto"

# Both generators mark their files `// swift-format-ignore-file`: `swift format` leaves them alone.
echo "generated: $(cd "$root" && ls Sources/GorushRPC/Generated/*.swift | tr '\n' ' ')"
