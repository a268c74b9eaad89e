#!/usr/bin/env python3
"""head_dim_fixtures.py FIX PRESETS_DIR: fixtures of tests/bad_inputs/recipes_hd.tsv (recipes on any head_dim).
Synthetic float32 dumps (h5py, the v1 schema) of 2 layers, 2 query heads over 1 KV head, 400 tokens, seeded
Gaussian activations, at head_dim 64 (SmolLM2's), 96 (Phi-3's: no Hadamard) and 256:
  hdD.h5 / hdD-cal.h5       evaluation and calibration dumps (D = 64, 96, 256)
  hdD-all.yaml              a sweep of every preset (PRESETS_DIR/*.yaml) at 2 bits on hdD.h5
  hd96-PRESET.yaml          a sweep of that one preset at 2 bits on hd96.h5 (PRESET-3.yaml: at 3 bits)
  hd96-ok.yaml              the presets without a Hadamard step (fp16, naive, kivi, turboquant) on hd96.h5"""
import os
import sys

import h5py
import numpy as np

fix, presets_dir = sys.argv[1], sys.argv[2]
presets = sorted(f[:-5] for f in os.listdir(presets_dir) if f.endswith(".yaml"))
T, L, H, KV = 400, 2, 2, 1


def dump(path, hd, seed):
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        a = f.attrs
        a["format"] = "oscar-kv-dump"
        a["format_version"] = np.int64(1)
        a["model_name"] = f"synthetic-hd{hd}"
        a["checkpoint_sha256"] = "0" * 64
        for k, v in (("n_layers", L), ("n_heads", H), ("n_kv_heads", KV), ("head_dim", hd), ("token_count", T)):
            a[k] = np.int64(v)
        a["rope_convention"] = "adjacent-pairs"
        a["rope_theta"] = 10000.0
        a["text_source"] = "synthetic (seeded Gaussian)"
        a["storage_dtype"] = "float32"
        f.create_dataset("token_ids", data=rng.integers(0, 512, T).astype(np.int32))
        for l in range(L):
            g = f.create_group(f"layer_{l:03d}")
            # a few strong channels, as real keys have
            scale = np.ones(hd, dtype=np.float32); scale[:4] = 8.0
            k = (rng.standard_normal((KV, T, hd)) * scale).astype(np.float32)
            v = rng.standard_normal((KV, T, hd)).astype(np.float32)
            q = rng.standard_normal((H, T, hd)).astype(np.float32)
            for name, x in (("q", q), ("q_pre", q), ("k", k), ("k_pre", k), ("v", v)):
                g.create_dataset(name, data=x)


def sweep(path, data, recipes, bits=2):
    with open(path, "w") as f:
        f.write(f"title: head_dim fixture\noutput: out-default\nqueries: 32\nbits: [{bits}]\n")
        f.write(f"dumps:\n  - {{name: {data}, path: {data}.h5, calibration: {data}-cal.h5}}\nrecipes:\n")
        f.writelines(f"  - {r}\n" for r in recipes)


for hd in (64, 96, 256):
    dump(os.path.join(fix, f"hd{hd}.h5"), hd, hd)
    dump(os.path.join(fix, f"hd{hd}-cal.h5"), hd, hd + 1)
    sweep(os.path.join(fix, f"hd{hd}-all.yaml"), f"hd{hd}", presets)
for p in presets:
    sweep(os.path.join(fix, f"hd96-{p}.yaml"), "hd96", [p])
    sweep(os.path.join(fix, f"hd96-{p}-3.yaml"), "hd96", [p], bits=3)
sweep(os.path.join(fix, "hd96-ok.yaml"), "hd96", ["fp16", "naive", "kivi", "turboquant"])
