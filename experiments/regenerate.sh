#!/usr/bin/env bash
# regenerate.sh [--quick] [--readme FILE]: rebuilds every table and plot in README from the bundled data
# on a CPU-only machine: the TNI tables (main.sh), the dumps and every shipped sweep (run_sweeps.sh),
# the end-to-end evaluation (run_eval.sh); then splices the new tables into README between its
# <!-- BEGIN name --> / <!-- END name --> markers. README changes only if every step succeeded.
# --quick: reduced evaluation (the CI test); OSCAR_RESULTS=DIR writes results under DIR.
# Kernel benchmarks need a GPU: see BENCHMARKS.md (oscar-bench, experiments/bench_vs_sdpa.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
readme=README.md; quick=0
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --readme) readme=$2; shift ;;
    *) echo "regenerate: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
res=${OSCAR_RESULTS:-results}
start=$(date +%s)
bash experiments/main.sh
[ -x build/apps/oscar-sweep ] || { echo "regenerate: build first (bash .ci/setup)" >&2; exit 1; }
experiments/run_sweeps.sh build "$res/sweep"
QUICK=$quick experiments/run_eval.sh build
mode=""; if [ "$quick" = 1 ]; then mode=", quick mode"; fi
stamp="$(date -u +%Y-%m-%d), $(nproc) cores, $(( $(date +%s) - start )) s in all$mode"
python3 experiments/splice_readme.py "$readme" "$stamp" "$res"
echo "regenerate: $readme updated ($stamp)"
