#!/usr/bin/env python3
"""rotation_cost.py: what oscar-cov's in-kernel matrix rotations add to one append and one decode (batch 1 by default,
Llama-3-8B attention shapes), each timed as CUDA-graph replays of 20 calls against the same call without rotation.
Usage: OSCAR_KERNELS_LIB=... python3 experiments/device/rotation_cost.py [--ctx 131072] [--batch 1]"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kernels" / "python"))
import oscar_kv  # noqa: E402
from oscar_kv.timing import graph_us  # noqa: E402




def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctx", type=int, default=131072)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--profile", action="store_true", help="also list each kernel's time (torch profiler, eager calls)")
    a = ap.parse_args()
    B, H, G, D, L = a.batch, 8, 4, 128, a.ctx
    g = torch.Generator().manual_seed(0)
    r = [torch.linalg.qr(torch.randn(D, D, generator=g, dtype=torch.float64))[0].float() for _ in range(2)]
    caches = {"none": oscar_kv.CovKvCache(B, H, D, 2, L + 64, H * G),
              "matrix": oscar_kv.CovKvCache(B, H, D, 2, L + 64, H * G, rotation=oscar_kv.KernelRotation.matrices(*r))}
    k = torch.randn(B, H, L, D, dtype=torch.bfloat16, device="cuda")
    for c in caches.values():
        c.prefill(k, k)
    del k
    kn = torch.randn(B, H, D, dtype=torch.bfloat16, device="cuda")
    q = torch.randn(B, H * G, D, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(B, H * G, D, dtype=torch.float32, device="cuda")
    res = {}
    for name, c in caches.items():
        res[name] = (graph_us(lambda i: c.decode(q, 0.088, out=out, max_seq_len=L), warmup=0),
                     graph_us(lambda i: (c.seq_lens.fill_(L), c.append(kn, kn, max_seq_len=L)), warmup=0))
    print(f"batch {B}, context {L}, head_dim {D}, 32/8 heads, oscar-cov INT2, us per call (graph replays):")
    for name, (d, ap_) in res.items():
        print(f"  rotation {name:6s}: decode {d:7.1f}  append {ap_:6.1f}")
    print(f"  matrix adds: decode {res['matrix'][0] - res['none'][0]:+.1f} us, append {res['matrix'][1] - res['none'][1]:+.1f} us")
    if a.profile:
        from torch.profiler import ProfilerActivity, profile
        c = caches["matrix"]
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                c.decode(q, 0.088, out=out, max_seq_len=L)
                c.seq_lens.fill_(L)
                c.append(kn, kn, max_seq_len=L)
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=60))


if __name__ == "__main__":
    main()
