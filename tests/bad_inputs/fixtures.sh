#!/usr/bin/env bash
# fixtures.sh: the shared inputs of the bad-input suite, made once per run into $FIX (run_table.py sets
# BUILD, SRC, DATA and FIX). Small real dumps from the bundled stories260K model, and broken copies.
set -euo pipefail
M=$DATA/stories260K/stories260K.bin; T=$DATA/stories260K/tok512.bin; X=$DATA/text/kjv.txt.gz
"$BUILD/apps/oscar-dump" --quiet --model "$M" --tokenizer "$T" --text "$X" --offset -404 --tokens 256 --dtype float32 --out "$FIX/rev.h5" >/dev/null
"$BUILD/apps/oscar-dump" --quiet --model "$M" --tokenizer "$T" --text "$X" --offset 0 --tokens 256 --dtype float32 --out "$FIX/gen.h5" >/dev/null
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
"${PY:-python3}" "$SRC/tests/bad_inputs/dump_v2_fixtures.py" "$FIX"
# tiny_llama.gguf (head_dim 16) with a tokenizer that loads: tokenizer.ggml.pre = gpt2 added, and tokens 0..2
# renamed "<", "t", "<t" so that its one merge "< t" is valid. The KV section is rewritten; the tensor infos and
# data are copied, the data start padded to the 32-byte alignment again (tensor offsets are relative to it).
"$PY" - "$SRC/tests/fixtures/tiny_llama.gguf" "$FIX/tiny_hd16.gguf" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
n_tensors, n_kv = struct.unpack_from("<QQ", d, 8)
SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def string(o):
    n = struct.unpack_from("<Q", d, o)[0]
    return d[o + 8:o + 8 + n].decode(), o + 8 + n
def value(t, o):  # end offset of a value of type t at o
    if t == 8: return string(o)[1]
    if t == 9:
        et, n = struct.unpack_from("<IQ", d, o)
        o += 12
        for _ in range(n): o = value(et, o)
        return o
    return o + SIZES[t]
def s8(x): x = x.encode(); return struct.pack("<Q", len(x)) + x
o, kvs = 24, []
for _ in range(n_kv):
    k, o = string(o)
    t = struct.unpack_from("<I", d, o)[0]
    end = value(t, o + 4)
    if k == "tokenizer.ggml.tokens":
        n = struct.unpack_from("<Q", d, o + 8)[0]
        toks = ["<", "t", "<t"] + ["<t%d>" % i for i in range(3, n)]
        kvs.append(s8(k) + struct.pack("<IIQ", 9, 8, n) + b"".join(s8(x) for x in toks))
    else:
        kvs.append(s8(k) + d[o:end])
    o = end
kvs.append(s8("tokenizer.ggml.pre") + struct.pack("<I", 8) + s8("gpt2"))
infos = o
for _ in range(n_tensors):
    _, o = string(o)
    nd = struct.unpack_from("<I", d, o)[0]
    o += 4 + 8 * nd + 4 + 8
data = (o + 31) // 32 * 32
head = d[:16] + struct.pack("<Q", len(kvs)) + b"".join(kvs) + d[infos:o]
open(sys.argv[2], "wb").write(head + b"\0" * (-len(head) % 32) + d[data:])
PY
# recipes_hd.tsv: head_dim 64 / 96 / 256 synthetic dumps and their sweep configs (head_dim_fixtures.py)
"${PY:-python3}" "$SRC/tests/bad_inputs/head_dim_fixtures.py" "$FIX" "$SRC/experiments/presets"
# strangers.tsv: crafted dumps (string arrays, null spaces, huge counts, links), a toy checkpoint without byte
# tokens, GGUF files with NaN/Inf weights or metadata (strangers_fixtures.py)
"${PY:-python3}" "$SRC/tests/bad_inputs/strangers_fixtures.py" "$FIX"
