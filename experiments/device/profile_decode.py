#!/usr/bin/env python3
"""profile_decode.py: runs one decode shape a few times for a profiler (ncu), nothing else on the GPU between.
Usage: [ncu ...] python3 experiments/device/profile_decode.py --lib liboscar_kernels.so --fmt cov|omni|bf16
       --head-dim 128 --bits 2 --batch 1 --ctx 131072 [--q-heads 32 --kv-heads 8] [--calls 3]
"""
import argparse
import ctypes as C
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kernels" / "python"))
import oscar_kv  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--fmt", choices=["cov", "omni", "bf16"], default="cov")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--bits", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=131072)
    ap.add_argument("--q-heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--calls", type=int, default=3)
    a = ap.parse_args()
    lib = oscar_kv.load(a.lib)
    B, L, D, hq, hkv = a.batch, a.ctx, a.head_dim, a.q_heads, a.kv_heads
    k = torch.randn(B, hkv, L, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, hkv, L, D, device="cuda", dtype=torch.bfloat16)
    q = torch.randn(B, hq, 1, D, device="cuda", dtype=torch.bfloat16)
    lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
    out = torch.empty(B, hq, D, dtype=torch.float32, device="cuda")
    wsb = lib.decode_workspace_bytes(B, hq, hkv, D, L, a.fmt != "bf16")
    ws = torch.empty(wsb // 4 + 4, dtype=torch.float32, device="cuda")
    s = torch.cuda.current_stream().cuda_stream
    scale = 1.0 / math.sqrt(D)
    if a.fmt == "bf16":
        for _ in range(a.calls):
            lib.call("oscar_bf16_decode", k.data_ptr(), v.data_ptr(), B, hkv, L, D, q.data_ptr(), hq, lens.data_ptr(), L, scale,
                     out.data_ptr(), ws.data_ptr(), wsb, s)
    else:
        c = lib.cov_cache_create(B, hkv, D, a.bits, L) if a.fmt == "cov" else lib.omni_cache_create(B, hkv, D, a.bits, L)
        lib.call(f"oscar_{a.fmt}_prefill", C.byref(c), None, k.data_ptr(), v.data_ptr(), lens.data_ptr(), L, s)
        for _ in range(a.calls):
            lib.call(f"oscar_{a.fmt}_decode", C.byref(c), None, q.data_ptr(), hq, lens.data_ptr(), L, scale, out.data_ptr(), ws.data_ptr(),
                     wsb, s)
    torch.cuda.synchronize()
    print("ok")


if __name__ == "__main__":
    main()
