#!/usr/bin/env python3
"""strangers_fixtures.py FIX SRC: fixtures of tests/bad_inputs/strangers.tsv (files from strangers), made from
FIX/rev.h5 and FIX/gen.h5 (real v2 dumps of stories260K, fixtures.sh makes them) and FIX/tiny_hd16.gguf:
  str_array.h5    root attribute model_name holds 64 strings (HDF5 1.10 wrote past a one-string buffer)
  str_null.h5     root attribute model_name has a null dataspace (HDF5 1.10 freed an uninitialised pointer)
  big_heads.h5    n_heads = 2^32 + 4 (read as 4 when truncated to int)
  ext_link.h5     /layer_001 is an external link to gen.h5
  soft_link.h5    /token_ids is a soft link to /layer_000/k
  bad_utf8.h5     model_name is not UTF-8 and holds a terminal escape sequence
  toy32.bin       a valid llama2.c checkpoint (float16-exact values) with a 32-token vocabulary (toy32_tok.bin), no
                  byte tokens
  nan_norm.gguf   tiny_hd16.gguf with a NaN in output_norm.weight
  inf_weight.gguf tiny_hd16.gguf with +inf as blk.0.attn_q.weight's first scale (a matrix: found by the forward pass)
  inf_rope.gguf   tiny_hd16.gguf with llama.rope.freq_base = +inf
  nan_score.gguf  tiny_hd16.gguf with a tokenizer.ggml.scores array added, score 1 NaN
  bos_none.gguf   tiny_hd16.gguf with add_bos_token = true and bos_token_id = 0xFFFFFFFF (uint32: "no such token")
  bos_range.gguf  tiny_hd16.gguf with bos_token_id = 100000, past its vocabulary
"""
import os
import struct
import sys

import h5py
import numpy as np

from h5_variant import variant

fix = sys.argv[1]


def str_array(f):
    del f.attrs["model_name"]
    f.attrs.create("model_name", np.array([b"x" * 8] * 64, dtype=h5py.string_dtype("ascii")))


def str_null(f):
    del f.attrs["model_name"]
    f.attrs.create("model_name", h5py.Empty(h5py.string_dtype("utf-8")))


def big_heads(f):
    del f.attrs["n_heads"]
    f.attrs.create("n_heads", np.int64(2**32 + 4))


def ext_link(f):
    del f["layer_001"]
    f["layer_001"] = h5py.ExternalLink("gen.h5", "/layer_001")


def soft_link(f):
    del f["token_ids"]
    f["token_ids"] = h5py.SoftLink("/layer_000/k")


variant(fix, "str_array.h5", "rev.h5", str_array)
variant(fix, "str_null.h5", "rev.h5", str_null)
variant(fix, "big_heads.h5", "rev.h5", big_heads)
variant(fix, "ext_link.h5", "rev.h5", ext_link)
variant(fix, "soft_link.h5", "rev.h5", soft_link)


def bad_utf8(f):
    del f.attrs["model_name"]
    f.attrs.create("model_name", np.array(b"caf\xe9 \x1b[31mred", dtype=h5py.string_dtype("ascii", 16)))


variant(fix, "bad_utf8.h5", "rev.h5", bad_utf8)

# ---- a llama2.c toy model with a 32-token vocabulary: dim 8, 1 layer, 2 heads, seq_len 32 (run.c's layout)
dim, hidden, layers, heads, kv, vocab, seq = 8, 16, 1, 2, 2, 32, 32
hd = dim // heads
n = vocab * dim + layers * (2 * dim + dim * dim + 2 * dim * (kv * hd) + dim * dim + 3 * dim * hidden) + dim + seq * hd
rng = np.random.default_rng(0)
w = (rng.standard_normal(n) * 0.1).astype(np.float16).astype(np.float32)  # float16-exact: oscar-pack takes it
with open(os.path.join(fix, "toy32.bin"), "wb") as out:
    out.write(struct.pack("<7i", dim, hidden, layers, heads, kv, vocab, seq))
    out.write(w.tobytes())
pieces = ["<unk>", "<s>", "</s>"] + [chr(c) for c in b"abcdefghijklmnopqrstuvwxy"] + [" a", " b", "ab", "ba"]
assert len(pieces) == vocab
with open(os.path.join(fix, "toy32_tok.bin"), "wb") as out:
    out.write(struct.pack("<i", max(len(p.encode()) for p in pieces)))
    for i, p in enumerate(pieces):
        b = p.encode()
        out.write(struct.pack("<fi", float(-i), len(b)) + b)

# ---- GGUF variants of tiny_hd16.gguf: tensor data and metadata values patched in place
d = bytearray(open(os.path.join(fix, "tiny_hd16.gguf"), "rb").read())
SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
n_tensors, n_kv = struct.unpack_from("<QQ", d, 8)


def string(o):
    k = struct.unpack_from("<Q", d, o)[0]
    return bytes(d[o + 8:o + 8 + k]).decode(), o + 8 + k


def value_end(t, o):
    if t == 8:
        return string(o)[1]
    if t == 9:
        et, k = struct.unpack_from("<IQ", d, o)
        o += 12
        for _ in range(k):
            o = value_end(et, o)
        return o
    return o + SIZES[t]


o, kv_at, alignment = 24, {}, 32
for _ in range(n_kv):
    key, o = string(o)
    t = struct.unpack_from("<I", d, o)[0]
    kv_at[key] = (t, o + 4)
    if key == "general.alignment":
        alignment = struct.unpack_from("<I", d, o + 4)[0]
    o = value_end(t, o + 4)
tensors = {}
for _ in range(n_tensors):
    name, o = string(o)
    nd = struct.unpack_from("<I", d, o)[0]
    dims = struct.unpack_from(f"<{nd}Q", d, o + 4)
    typ, off = struct.unpack_from("<IQ", d, o + 4 + 8 * nd)
    tensors[name] = (dims, typ, off)
    o += 4 + 8 * nd + 12
data = (o + alignment - 1) // alignment * alignment


def patched(name, edit):
    b = bytearray(d)
    edit(b)
    open(os.path.join(fix, name), "wb").write(b)


def tensor_f32(name, index, value):
    dims, typ, off = tensors[name]
    assert typ == 0, f"{name} is ggml type {typ}, not F32"
    return lambda b: struct.pack_into("<f", b, data + off + 4 * index, value)


def tensor_first_scale(name, value):
    """The first value's storage set to `value`: F32, F16, or the fp16 scale of the first Q8_0 block."""
    dims, typ, off = tensors[name]
    if typ == 0:
        return tensor_f32(name, 0, value)
    assert typ in (1, 8), f"{name} is ggml type {typ}, not F32, F16 or Q8_0"
    return lambda b: struct.pack_into("<e", b, data + off, value)


patched("nan_norm.gguf", tensor_f32("output_norm.weight", 3, float("nan")))
patched("inf_weight.gguf", tensor_first_scale("blk.0.attn_q.weight", float("inf")))
t, at = kv_at["llama.rope.freq_base"]
assert t == 6
patched("inf_rope.gguf", lambda b: struct.pack_into("<f", b, at, float("inf")))

def with_kvs(name, extra):
    """tiny_hd16.gguf with metadata entries appended (raw GGUF key/value bytes), the tensor data moved to the next
    alignment boundary after the longer header (its offsets are relative to that boundary)."""
    n_extra = len(extra)
    kv_end = 24
    for _ in range(n_kv):
        _key, kv_end = string(kv_end)
        t = struct.unpack_from("<I", d, kv_end)[0]
        kv_end = value_end(t, kv_end + 4)
    head = bytearray(d[:data])
    struct.pack_into("<Q", head, 16, n_kv + n_extra)
    infos_end = o  # end of the tensor infos (module scope: after the loop above)
    new = bytes(head[:kv_end]) + b"".join(extra) + bytes(d[kv_end:infos_end])
    new += b"\0" * ((-len(new)) % alignment)
    open(os.path.join(fix, name), "wb").write(new + bytes(d[data:]))


def kv(key, t, payload):
    k = key.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", t) + payload


n_vocab = struct.unpack_from("<Q", d, kv_at["tokenizer.ggml.tokens"][1] + 4)[0]
scores = [0.0] * n_vocab
scores[1] = float("nan")
with_kvs("nan_score.gguf", [kv("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, n_vocab) + struct.pack(f"<{n_vocab}f", *scores))])
with_kvs("bos_none.gguf", [kv("tokenizer.ggml.add_bos_token", 7, b"\1"), kv("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 0xFFFFFFFF))])
with_kvs("bos_range.gguf", [kv("tokenizer.ggml.add_bos_token", 7, b"\1"), kv("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 100000))])

# a text the tiny GGUF's vocabulary ('<', 't', '<t', ...) tokenizes: NaN/Inf models must fail on the model, not the text
with open(os.path.join(fix, "tiny.txt"), "w") as out:
    out.write("t<t<tt<t\n" * 200)
