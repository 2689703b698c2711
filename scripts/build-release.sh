#!/usr/bin/env bash
# The release build that docs/benchmarks.md measures (.build-release/release/pushgate):
# - Swift runtime and Foundation linked statically (no separate runtime libraries to map);
# - lld with packed relative relocations (DT_RELR) and no exported dynamic symbol table;
# - every function in its own section (Swift and C), ordered by scripts/startup-order.txt so the
#   code run at start and idle sits together instead of across the whole text (regenerate the list
#   with scripts/startup-order.sh after large changes; names missing from it are simply placed after);
# - LLVM's function merging off: it turns functions of identical code into thunks without a symbol,
#   which a symbol-ordering file cannot name, so start-up code it merged stayed spread over the text
#   (73 page faults outside the ordered functions at start, each mapping 64 KB around it: idle RSS
#   29.4-30.4 MB against 25.2-26.6 MB without it, for 1.1 MB more text; docs/benchmarks.md, "Idle").
# Extra arguments go to `swift build`.
set -euo pipefail
cd "$(dirname "$0")/.."
exec swift build -c release --product pushgate --scratch-path .build-release --static-swift-stdlib \
  -Xswiftc -Xfrontend -Xswiftc -function-sections -Xcc -ffunction-sections \
  -Xswiftc -Xfrontend -Xswiftc -disable-llvm-merge-functions-pass \
  -Xswiftc -use-ld=lld -Xlinker -z -Xlinker pack-relative-relocs -Xlinker --no-export-dynamic \
  -Xlinker --symbol-ordering-file="$PWD/scripts/startup-order.txt" -Xlinker --no-warn-symbol-ordering "$@"
