#!/usr/bin/env bash
# tests/fuzz/run.sh [BUILD_DIR] [SECONDS]: builds the libFuzzer harnesses of tests/fuzz (clang, AddressSanitizer,
# UndefinedBehaviorSanitizer) into BUILD_DIR (default: build-fuzz beside the source), replays every input under
# tests/fuzz/regressions/HARNESS/ (inputs that once crashed a reader or escaped it as a raw library exception), then
# fuzzes each harness for SECONDS (default 60) from its seed corpus (tests/fuzz/seeds/HARNESS/, and for fuzz_gguf the
# GGUF fixtures of tests/fixtures). Prints one line per harness (executions, coverage, corpus); exits 1 on any
# finding (crash, sanitizer report, leak, time-out, out of memory), whose input is kept in BUILD_DIR/findings/.
set -uo pipefail
src=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$src/../.." && pwd)
build=${1:-$root/build-fuzz}
seconds=${2:-60}
command -v clang++ >/dev/null || { echo "fuzz: error: clang++ not found; install clang and libclang-rt-14-dev (bash .ci/setup does)" >&2; exit 1; }
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null \
  || { echo "fuzz: error: configuring $build failed" >&2; exit 1; }
cmake --build "$build" -j "$(nproc)" >"$build/build.log" 2>&1 || { tail -n 30 "$build/build.log"; echo "fuzz: error: the harnesses did not build ($build/build.log)" >&2; exit 1; }
mkdir -p "$build/findings"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1
export LSAN_OPTIONS=suppressions=$src/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fails=0
for h in fuzz_gguf fuzz_yaml fuzz_dump; do
  corpus="$build/corpus/$h"
  mkdir -p "$corpus"
  seeds=("$src/seeds/$h")
  [ "$h" = fuzz_gguf ] && seeds=("$root/tests/fixtures")
  # -timeout above the dump reader's 60 s child limit: a hang inside libhdf5 is the reader's refusal, not a finding
  flags=(-timeout=90 -rss_limit_mb=4096 -malloc_limit_mb=2048 -artifact_prefix="$build/findings/$h-")
  if [ -d "$src/regressions/$h" ] && [ -n "$(ls -A "$src/regressions/$h")" ]; then
    if ! "$build/$h" "${flags[@]}" "$src/regressions/$h"/* >"$build/$h.replay.log" 2>&1; then
      echo "$h: a regression input fails again ($build/$h.replay.log)"; tail -n 20 "$build/$h.replay.log"; fails=$((fails + 1)); continue
    fi
  fi
  "$build/$h" "${flags[@]}" -max_total_time="$seconds" -print_final_stats=1 "$corpus" "${seeds[@]}" >"$build/$h.log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$build/$h.log" | grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' "$build/$h.log" | tail -n 1 | grep -o '[0-9]*')
  echo "$h: rc=$rc, ${runs:-?} executions in ${seconds} s, ${cov:-?} coverage points, $(ls "$corpus" | wc -l) corpus inputs, $(ls "$src/regressions/$h" 2>/dev/null | wc -l) regressions replayed"
  if [ "$rc" != 0 ]; then tail -n 40 "$build/$h.log"; fails=$((fails + 1)); fi
done
echo "fuzz: $((3 - fails)) passed, $fails failed"
[ "$fails" = 0 ]
