#!/usr/bin/env bash
# run_sweeps.sh [BUILD_DIR] [OUT_ROOT]: makes the dumps (make_dumps.sh) and runs every shipped sweep
# (experiments/sweeps/*.yaml) into OUT_ROOT/<sweep> (default: each config's own output, results/sweep/).
# QUICK=1 (regenerate.sh --quick) skips the real models' sweeps (smollm2.yaml, gemma3.yaml: minutes on 2 cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-${OSCAR_BUILD:-$root/build}}" && pwd)
out=${2:-}
"$root/experiments/make_dumps.sh" "$build"
for cfg in "$root"/experiments/sweeps/*.yaml; do
  name=$(basename "$cfg" .yaml)
  if [ "${QUICK:-0}" = 1 ] && { [ "$name" = smollm2 ] || [ "$name" = gemma3 ]; }; then echo "sweep $name: skipped (quick mode)"; continue; fi
  start=$(date +%s)
  if [ -n "$out" ]; then "$build/apps/oscar-sweep" "$cfg" --quiet --output "$out/$name" >/dev/null
  else "$build/apps/oscar-sweep" "$cfg" --quiet >/dev/null; fi
  echo "sweep $name: $(( $(date +%s) - start )) s"
done
