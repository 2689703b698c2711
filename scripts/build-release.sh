#!/usr/bin/env bash
# The release build that docs/benchmarks.md measures (.build-release/release/pushgate):
# - Swift runtime and Foundation linked statically (no separate runtime libraries to map);
# - lld with packed relative relocations (DT_RELR) and no exported dynamic symbol table;
# - every function in its own section (Swift and C), ordered by scripts/startup-order.txt so the
#   code run at start and idle sits together instead of across the whole text (regenerate the list
#   with scripts/startup-order.sh after large changes; names missing from it are simply placed after).
# Extra arguments go to `swift build`.
set -euo pipefail
cd "$(dirname "$0")/.."
exec swift build -c release --product pushgate --scratch-path .build-release --static-swift-stdlib \
  -Xswiftc -Xfrontend -Xswiftc -function-sections -Xcc -ffunction-sections \
  -Xswiftc -use-ld=lld -Xlinker -z -Xlinker pack-relative-relocs -Xlinker --no-export-dynamic \
  -Xlinker --symbol-ordering-file="$PWD/scripts/startup-order.txt" -Xlinker --no-warn-symbol-ordering "$@"
