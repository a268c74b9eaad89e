#!/usr/bin/env python3
"""dump_v2_fixtures.py FIX: fixtures of tests/bad_inputs/dump_v2.tsv, made from FIX/rev.h5 (a real float32 v2
dump of stories260K: 5 layers, 8 query heads over 4 KV heads, head_dim 8; fixtures.sh makes it):
  v2_noattr.h5    /layer_002 without its sliding_window attribute
  v2_scaling.h5   /layer_001 scaling = -0.5
  v2_conv.h5      /layer_003 rope_convention = 'rotate_half' (not a v2 name)
  v2_rotodd.h5    /layer_000 rotary_dim = 7
  v2_sinks.h5     /layer_004/sinks with n_heads + 1 values
  v2_version3.h5  format_version = 3
  v2_json.h5      config_json = '{"n_layers": 5,' (not JSON)
  v2_noqpre.h5    has_pre_rope = 1 but /layer_001/q_pre deleted
  v2_nopre.h5     a valid v2 dump without pre-RoPE tensors (has_pre_rope = 0, no q_pre/k_pre anywhere) whose
                  layers record a sliding window of 64, a soft-cap of 30 and sink logits
"""
import sys

import numpy as np

from h5_variant import variant

fix = sys.argv[1]


def noattr(f):
    del f["layer_002"].attrs["sliding_window"]


def scaling(f):
    f["layer_001"].attrs["scaling"] = np.float64(-0.5)


def conv(f):
    f["layer_003"].attrs["rope_convention"] = "rotate_half"


def rotodd(f):
    f["layer_000"].attrs["rotary_dim"] = np.int64(7)


def sinks(f):
    n = int(f.attrs["n_heads"])
    f["layer_004"].create_dataset("sinks", data=np.zeros(n + 1, dtype=np.float32))


def version3(f):
    f.attrs["format_version"] = np.int64(3)


def badjson(f):
    f.attrs["config_json"] = '{"n_layers": 5,'


def noqpre(f):
    del f["layer_001"]["q_pre"]


def nopre(f):
    f.attrs["has_pre_rope"] = np.int64(0)
    n = int(f.attrs["n_heads"])
    for g in [k for k in f if k.startswith("layer_")]:
        del f[g]["q_pre"]
        del f[g]["k_pre"]
        f[g].attrs["sliding_window"] = np.int64(64)
        f[g].attrs["softcap"] = np.float64(30.0)
        f[g].create_dataset("sinks", data=np.linspace(-1, 1, n).astype(np.float32))


variant(fix, "v2_noattr.h5", "rev.h5", noattr)
variant(fix, "v2_scaling.h5", "rev.h5", scaling)
variant(fix, "v2_conv.h5", "rev.h5", conv)
variant(fix, "v2_rotodd.h5", "rev.h5", rotodd)
variant(fix, "v2_sinks.h5", "rev.h5", sinks)
variant(fix, "v2_version3.h5", "rev.h5", version3)
variant(fix, "v2_json.h5", "rev.h5", badjson)
variant(fix, "v2_noqpre.h5", "rev.h5", noqpre)
variant(fix, "v2_nopre.h5", "rev.h5", nopre)
