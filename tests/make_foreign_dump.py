#!/usr/bin/env python3
"""make_foreign_dump.py OUT.h5: a dump written by another tool (h5py) that follows the schema: int64 and
fixed-length-string attributes, half-split RoPE, float16 storage, no token_text. One layer, 2 query heads
over 1 KV head, head_dim 4, 4 tokens; the V norms are 1, 2, 4, 8 (TNI 8) and V's channel absmax is
{8, 4, 2, 1} (spread 8 / 3 = 2.6667), so oscar-analyze's numbers can be checked by hand."""
import sys
import h5py, numpy as np

out = sys.argv[1]
with h5py.File(out, "w") as f:
    a = f.attrs
    a["format"] = np.bytes_("oscar-kv-dump")           # fixed-length string
    a["format_version"] = np.int64(1)
    a["model_name"] = "foreign-model"
    a["checkpoint_sha256"] = "0" * 64
    for k, v in (("n_layers", 1), ("n_heads", 2), ("n_kv_heads", 1), ("head_dim", 4), ("token_count", 4)):
        a[k] = np.int64(v)
    a["rope_convention"] = "half-split"
    a["rope_theta"] = 500000.0
    a["text_source"] = "synthetic"
    a["storage_dtype"] = "float16"
    f.create_dataset("token_ids", data=np.array([1, 5, 6, 7], dtype=np.int64))
    v = np.array([[[0, 0, 0, 1], [0, 0, 2, 0], [0, 4, 0, 0], [8, 0, 0, 0]]], dtype=np.float16)
    k = np.ones((1, 4, 4), dtype=np.float16)
    q = np.ones((2, 4, 4), dtype=np.float16)
    g = f.create_group("layer_000")
    for name, x in (("q", q), ("q_pre", q), ("k", k), ("k_pre", k), ("v", v)):
        g.create_dataset(name, data=x)
