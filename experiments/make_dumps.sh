#!/usr/bin/env bash
# make_dumps.sh [BUILD_DIR]: the dumps the shipped sweeps read, from the bundled models (results/dumps/).
# Calibration passages come from Genesis (the start of the KJV, training text); evaluation passages
# from Revelation (the last 404 lines, held out of kjv-llama-hd128's training).
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
