#!/usr/bin/env python3
"""semantics_fixtures.py FIX DATA: fixtures of tests/bad_inputs/semantics.tsv, made from FIX/rev.h5 (a real
float32 dump of stories260K, 5 layers, 256 tokens; fixtures.sh makes it) and the bundled tokenizer:
  zero_layer.h5   every tensor of layer 1 all zeros (undefined metrics, TNI 0/0)
  all_zero.h5     every tensor of every layer all zeros (every relative error undefined)
  nan_qpre.h5     one NaN in /layer_002/q_pre, the tensor no tool reads
  nlayers.h5      attribute n_layers = 4 while the file holds 5 layer groups
  big.h5          layer 3's keys and values scaled by 1e6 (an fp16 scale overflows)
  wrongtok.bin    tok512.bin with the pieces of its merged tokens reversed: same vocab size, wrong pieces
  garbage.txt     bytes that are not UTF-8 after 200 lines of text
"""
import os
import struct
import sys

import numpy as np

from h5_variant import variant

fix, data = sys.argv[1], sys.argv[2]


def zero_layer(f):
    for t in ("q", "q_pre", "k", "k_pre", "v"):
        d = f["layer_001"][t]
        d[...] = np.zeros(d.shape, d.dtype)


def nan_qpre(f):
    d = f["layer_002"]["q_pre"]
    x = d[...]
    x[1, 7, 3] = np.nan
    d[...] = x


def nlayers(f):
    f.attrs["n_layers"] = np.int64(4)


def big(f):
    for t in ("k", "k_pre", "v"):
        d = f["layer_003"][t]
        d[...] = d[...] * np.float32(1e6)


def all_zero(f):
    for g in [k for k in f if k.startswith("layer_")]:
        for t in ("q", "q_pre", "k", "k_pre", "v"):
            d = f[g][t]
            d[...] = np.zeros(d.shape, d.dtype)


variant(fix, "zero_layer.h5", "rev.h5", zero_layer)
variant(fix, "all_zero.h5", "rev.h5", all_zero)
variant(fix, "nan_qpre.h5", "rev.h5", nan_qpre)
variant(fix, "nlayers.h5", "rev.h5", nlayers)
variant(fix, "big.h5", "rev.h5", big)

# A tokenizer of the same vocabulary size whose merged pieces (after <unk>, <s>, </s> and the 256 byte
# tokens) are reversed in order, scores kept in place: loads fine, encodes text into the wrong ids.
raw = open(os.path.join(data, "stories260K", "tok512.bin"), "rb").read()
o, entries = 4, []
while o < len(raw):
    score, n = struct.unpack_from("<fi", raw, o)
    entries.append((score, raw[o + 8:o + 8 + n]))
    o += 8 + n
head, tail = entries[:259], entries[259:]
pieces = [p for _, p in tail][::-1]
out = raw[:4] + b"".join(struct.pack("<fi", s, len(p)) + p for (s, p) in head + [(s, p) for (s, _), p in zip(tail, pieces)])
open(os.path.join(fix, "wrongtok.bin"), "wb").write(out)

with open(os.path.join(fix, "garbage.txt"), "wb") as f:
    f.write(b"In the beginning God created the heaven and the earth.\n" * 200)
    f.write(bytes([0x89, 0x50, 0x4E, 0x47, 0xFF, 0xFE, 0x00, 0x81]) * 64)
