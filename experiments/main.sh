#!/usr/bin/env bash
# experiments/main.sh: the main job on the bundled real data: set up and build (.ci/setup), dump a
# held-out passage (the first 2048 tokens of Revelation) through the bundled head_dim-128 model, and
# print oscar-analyze's Token Norm Imbalance tables (CSV, JSON and plots under results/tni/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash .ci/setup build
mkdir -p results/tni
start=$(date +%s)
./build/apps/oscar-dump --model data/kjv-llama-hd128/kjv-llama-hd128.f16 --tokenizer data/stories260K/tok512.bin \
  --text data/text/kjv.txt.gz --offset -404 --tokens 2048 --out results/tni/revelation-hd128.h5
./build/apps/oscar-analyze results/tni/revelation-hd128.h5 --csv results/tni/tni.csv --json results/tni/tni.json \
  --plots results/tni --quiet | tee results/tni/table.txt
echo "main: dump + analysis took $(( $(date +%s) - start )) s; outputs in results/tni/"
