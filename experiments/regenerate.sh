#!/usr/bin/env bash
# regenerate.sh: rebuilds every table and plot in README from the bundled data, on a CPU-only machine:
# the TNI tables (main.sh), the dumps and every shipped sweep (run_sweeps.sh); then splices the new
# tables into README.md between its <!-- BEGIN name --> / <!-- END name --> markers. Nothing in README
# changes unless every step succeeded.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$(date +%s)
bash experiments/main.sh
experiments/run_sweeps.sh build
stamp="$(date -u +%Y-%m-%d), $(nproc) cores, $(( $(date +%s) - start )) s in all"
/usr/bin/env python3 experiments/splice_readme.py README.md "$stamp"
echo "regenerate: README.md updated ($stamp)"
