#!/usr/bin/env bash
# experiments/main.sh: the main job on the bundled real data: set up and build (.ci/setup), dump a
# held-out passage (the first 2048 tokens of Revelation) through the bundled head_dim-128 model, and
# print oscar-analyze's Token Norm Imbalance tables (CSV, JSON and plots under results/tni/).
# OSCAR_RESULTS=DIR writes under DIR instead of results/; OSCAR_SKIP_SETUP=1 uses the existing build;
# OSCAR_BUILD=DIR takes the tools from the build folder DIR (default: build/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$root" && mkdir -p "${OSCAR_BUILD:-build}" && cd "${OSCAR_BUILD:-build}" && pwd)
cd "$root"
[ "${OSCAR_SKIP_SETUP:-0}" = 1 ] || bash .ci/setup "$build"
out=${OSCAR_RESULTS:-results}/tni
mkdir -p "$out"
start=$(date +%s)
"$build/apps/oscar-dump" --model data/kjv-llama-hd128/kjv-llama-hd128.f16 --tokenizer data/stories260K/tok512.bin \
  --text data/text/kjv.txt.gz --offset -404 --tokens 2048 --out "$out/revelation-hd128.h5"
"$build/apps/oscar-analyze" "$out/revelation-hd128.h5" --csv "$out/tni.csv" --json "$out/tni.json" \
  --plots "$out" --quiet | tee "$out/table.txt"
echo "main: dump + analysis took $(( $(date +%s) - start )) s; outputs in $out/"
