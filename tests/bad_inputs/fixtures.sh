#!/usr/bin/env bash
# fixtures.sh: the shared inputs of the bad-input suite, made once per run into $FIX (run_table.py sets
# BUILD, SRC, DATA and FIX). Small real dumps from the bundled stories260K model, and broken copies.
set -euo pipefail
M=$DATA/stories260K/stories260K.bin; T=$DATA/stories260K/tok512.bin; X=$DATA/text/kjv.txt.gz
"$BUILD/apps/oscar-dump" --quiet --model "$M" --tokenizer "$T" --text "$X" --offset -404 --tokens 256 --out "$FIX/rev.h5" >/dev/null
"$BUILD/apps/oscar-dump" --quiet --model "$M" --tokenizer "$T" --text "$X" --offset 0 --tokens 256 --out "$FIX/gen.h5" >/dev/null
head -c 4000 "$FIX/rev.h5" > "$FIX/trunc.h5"
echo "not hdf5" > "$FIX/text.h5"
head -c 50000 "$M" > "$FIX/trunc.bin"
head -c 100000 "$X" > "$FIX/trunc.txt.gz"
# semantics.tsv: degenerate and inconsistent dumps, a tokenizer of another vocabulary of the same size, non-UTF-8 text
PY=$(for p in python3 /usr/bin/python3; do "$p" -c 'import h5py, numpy' 2>/dev/null && { echo "$p"; break; }; done)
"${PY:-python3}" "$SRC/tests/bad_inputs/semantics_fixtures.py" "$FIX" "$DATA"
# faults.tsv (outputs, signals, locks, arguments): a sweep config on the small dumps; a "Python" that starts 4 s
# late, so a signal can arrive while a plot script runs; a truncated tokenizer; a folder where a file belongs.
cat > "$FIX/sweep.yaml" <<YAML
title: fault suite
output: sweep-default
queries: 32
bits: [2, 4]
dumps:
  - {name: rev, path: rev.h5, calibration: gen.h5}
recipes:
  - fp16
  - naive
  - {preset: oscar-cov, key: {group: head_dim}, value: {group: head_dim}}
YAML
printf '#!/bin/sh\nsleep 4\nexec %s "$@"\n' "$PY" > "$FIX/slowpy"; chmod +x "$FIX/slowpy"
head -c 3000 "$DATA/stories260K/tok512.bin" > "$FIX/tok3000.bin"
mkdir -p "$FIX/folder"
# recipes_hd.tsv: head_dim 64 / 96 / 256 synthetic dumps and their sweep configs (head_dim_fixtures.py)
"${PY:-python3}" "$SRC/tests/bad_inputs/head_dim_fixtures.py" "$FIX" "$SRC/experiments/presets"
