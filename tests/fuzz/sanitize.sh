#!/usr/bin/env bash
# tests/fuzz/sanitize.sh BUILD_DIR KERNELS_LIB [EXCLUDE]: the CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer.
# Builds lib/, the tools and every tests/test_*.cpp with clang and the sanitizers into BUILD_DIR (tests/fuzz's project,
# configured with -DOSCAR_KERNELS_LIB=KERNELS_LIB: the main build's CUDA kernels library, not instrumented), then runs
# the Catch2 entries (registered as the main build registers them) whose labels do not match the regex EXCLUDE
# (default "slow|data": CI's time; "none" runs every entry), and every bad-input table with the sanitized tools. Any
# sanitizer report fails its test (halt_on_error, abort_on_error). Left out always: the Python tests, the shipped
# sweeps and the quick regeneration (the same tools on bigger inputs). Under the sanitizers the suite runs ~2.7x slower:
# the [slow] and [optional-data] entries (end-to-end evaluations of the real models, ~5.5 min normally) take ~25 min.
set -uo pipefail
src=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$src/../.." && pwd)
[ $# -ge 2 ] || { echo "usage: sanitize.sh BUILD_DIR KERNELS_LIB [EXCLUDE]" >&2; exit 2; }
build=$1; kernels=$2; exclude=${3:-slow|data}
[ -f "$kernels" ] || { echo "sanitize: error: $kernels: no such kernels library; build the main project first (cmake --build build --target oscar_kernels) and pass build/kernels/liboscar_kernels.a" >&2; exit 1; }
command -v clang++ >/dev/null || { echo "sanitize: error: clang++ not found; install clang and libclang-rt-14-dev (bash .ci/setup does)" >&2; exit 1; }
mkdir -p "$build"
# the plot scripts' interpreter (numpy, matplotlib): OSCAR_PYTHON as the main build passes it, else the first that has them
if [ -z "${OSCAR_PYTHON:-}" ]; then
  for py in /usr/bin/python3 python3; do
    if "$py" -c "import numpy, matplotlib" 2>/dev/null; then OSCAR_PYTHON=$py; break; fi
  done
fi
export OSCAR_PYTHON=${OSCAR_PYTHON:-python3}
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DOSCAR_KERNELS_LIB="$kernels" -DOSCAR_PYTHON="$OSCAR_PYTHON" >"$build/configure.log" 2>&1 \
  || { tail -n 20 "$build/configure.log"; echo "sanitize: error: configuring $build failed" >&2; exit 1; }
t0=$(date +%s)
cmake --build "$build" -j "$(nproc)" --target asan_suite >"$build/build.log" 2>&1 \
  || { tail -n 30 "$build/build.log"; echo "sanitize: error: the sanitized suite did not build ($build/build.log)" >&2; exit 1; }
echo "sanitize: built in $(( $(date +%s) - t0 )) s"
# protect_shadow_gap=0: the CUDA runtime maps memory where ASan's shadow gap would be; detect_leaks: LeakSanitizer on
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:protect_shadow_gap=0:allocator_may_return_null=1
export LSAN_OPTIONS=suppressions=$src/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fails=0
t0=$(date +%s)
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" -LE "$exclude" || fails=$((fails + 1))
echo "sanitize: Catch2 entries in $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
python3 "$root/tests/bad_inputs/run_table.py" "$build" "$root" "$root"/tests/bad_inputs/*.tsv > "$build/bad_inputs.log" 2>&1 \
  || { grep -E 'FAIL' "$build/bad_inputs.log" | head -n 40; fails=$((fails + 1)); }
echo "sanitize: bad-input tables: $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$build/bad_inputs.log" | tail -n 1) in $(( $(date +%s) - t0 )) s"
[ "$fails" = 0 ] && echo "sanitize: clean" || echo "sanitize: $fails part(s) failed"
[ "$fails" = 0 ]
