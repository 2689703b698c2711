#!/usr/bin/env bash
# Builds the fuzz targets of Fuzz/ (a separate SwiftPM package) with libFuzzer and runs each one
# for a number of generated inputs over a copy of its seed corpus. Fails (non-zero) on any crash,
# trap, broken property, timeout or out-of-memory; the reproducer is saved as Fuzz/crashes/<target>-*.
# See docs/fuzzing.md.
#
#   scripts/fuzz.sh [runs]          runs per target (default 20000: the short CI run)
#
# Environment:
#   FUZZ_BUILD=debug-asan|release   debug-asan (default): debug build, -sanitize=fuzzer,address
#                                   (assertions and ASan on); release: -O, -sanitize=fuzzer (about
#                                   8x the executions per second; what the campaign uses)
#   FUZZ_TARGETS="FuzzRequest FuzzAES128GCM"   which targets to run
#   FUZZ_CORPUS_DIR=<dir>           keep the working corpora in <dir>/<target> (and start from them
#                                   when present) instead of a temporary directory
#   FUZZ_ARGS="..."                 extra libFuzzer flags (e.g. -max_total_time=600 -len_control=0)
set -uo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

runs="${1:-20000}"
build="${FUZZ_BUILD:-debug-asan}"
targets="${FUZZ_TARGETS:-FuzzRequest FuzzAES128GCM}"

case "$build" in
  debug-asan) config=debug; sanitize=fuzzer,address ;;
  release) config=release; sanitize=fuzzer ;;
  *) echo "FUZZ_BUILD must be debug-asan or release" >&2; exit 2 ;;
esac

# Same dependency versions as the root package (both Package.resolved files are git-ignored).
if [ -f Package.resolved ] && [ ! -f Fuzz/Package.resolved ]; then cp Package.resolved Fuzz/Package.resolved; fi

start=$(date +%s)
# -parse-as-library: the targets have no top-level code; each defines <Target>_main (see the sources).
if ! nice -n 10 swift build --package-path Fuzz -c "$config" \
    -Xswiftc -sanitize="$sanitize" -Xswiftc -parse-as-library; then
  echo "fuzz: build failed" >&2
  echo "0 passed, $(wc -w <<<"$targets") failed"
  exit 1
fi
bin="$(swift build --package-path Fuzz -c "$config" --show-bin-path)"
echo "fuzz: build ($build) took $(( $(date +%s) - start ))s"

work="$(mktemp -d "${TMPDIR:-/tmp}/pushgate-fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p Fuzz/crashes

passed=0
failed=0
for target in $targets; do
  case "$target" in
    FuzzRequest) seeds=Fuzz/corpus/request; max_len=65536; extra=(-dict="$root/Fuzz/dict/request.dict") ;;
    FuzzAES128GCM) seeds=Fuzz/corpus/aes128gcm; max_len=8192; extra=() ;;
    *) echo "fuzz: unknown target $target" >&2; failed=$((failed + 1)); continue ;;
  esac
  if [ -n "${FUZZ_CORPUS_DIR:-}" ]; then corpus="$FUZZ_CORPUS_DIR/$target"; else corpus="$work/$target"; fi
  mkdir -p "$corpus"
  cp -n "$seeds"/* "$corpus"/
  log="$work/$target.log"
  touch "$work/$target.start"
  t0=$(date +%s)
  # -timeout: one input taking 10 s is a finding (decoding is meant to be linear time);
  # -rss_limit_mb / -malloc_limit_mb: one input needing 2 GB is a finding.
  # shellcheck disable=SC2086
  "$bin/$target" -runs="$runs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$root/Fuzz/crashes/$target-" "${extra[@]}" ${FUZZ_ARGS:-} \
    "$corpus" >"$log" 2>&1
  status=$?
  secs=$(( $(date +%s) - t0 ))
  # The last status line ("#N DONE cov: X ft: Y corp: ...") and the final stats.
  last="$(grep -E '^#[0-9]+' "$log" | tail -1)"
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")"
  cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")"
  ft="$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")"
  corp="$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$last")"
  if [ "$status" = 0 ]; then
    passed=$((passed + 1))
    echo "fuzz: $target passed: ${execs:-?} inputs in ${secs}s (${rate:-?} exec/s), cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}, 0 crashes"
  else
    failed=$((failed + 1))
    echo "fuzz: $target FAILED (exit $status) after ${execs:-?} inputs in ${secs}s; log:"
    grep -vE '^#[0-9]+ +(NEW|REDUCE|pulse)' "$log" | tail -60
    find "$root/Fuzz/crashes" -name "$target-*" -newer "$work/$target.start" | sed 's/^/fuzz: reproducer: /'
  fi
done
echo "fuzz: total $(( $(date +%s) - start ))s"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
