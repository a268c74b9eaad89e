#!/usr/bin/env python3
"""bench_vs_sdpa.py: oscar-kv decode attention (INT2/INT4 oscar-cov, INT2 oscar-omni caches, our BF16 kernel) against
PyTorch SDPA backends on the same GQA decode shapes, in one process.

Loads liboscar_kernels.so through kernels/python/oscar_kv (ctypes over the C API of kernels/include/oscar_kv.h;
caches allocated by oscar_cov_cache_create / oscar_omni_cache_create) and times, with CUDA events (warm-up, median of repeats, caches rotated so that each repeat reads >= 256 MB,
more than the 50 MB L2): torch SDPA (flash, cuDNN, efficient, math; bf16, enable_gqa=True), our BF16
kernel, our INT2/INT4 kernels, plus the prefill-quantize kernel and a device-to-device copy.
Usage: python3 experiments/bench_vs_sdpa.py [--lib build/kernels/liboscar_kernels.so] [--batch 1 8 32]
       [--ctx 4096 32768 131072] [--json out.json]
"""
import argparse
import ctypes as C
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels" / "python"))
import oscar_kv  # noqa: E402
from oscar_kv.timing import copy_tbps  # noqa: E402
from oscar_kv.timing import per_call_us as median_us  # noqa: E402

D, SINK, RECENT = 128, oscar_kv.COV_SINK, oscar_kv.COV_RECENT






def body_tokens(L):  # oscar-cov body tokens of a sequence of L tokens (covfmt::body_tokens)
    return max(0, L - SINK - RECENT)


def int_read_bytes(L, bits):  # per (sequence, KV head), K + V: covfmt::decode_read_bytes
    nb = body_tokens(L)
    return (L - nb) * 4 * D + nb * 2 * (D * bits // 8 + 4)


def omni_read_bytes(L, bits, hkv):  # per (sequence, KV head): omnifmt::decode_read_bytes (whole-block body + BF16 residual)
    nb = L // 128 * 128
    return (L - nb) * 4 * D + nb * (2 * D * bits / 8 + 4 * D / 32 * 2 + 2 / hkv)


def time_cov(lib, x, bits, ref, bf16_bytes, row):
    """oscar-cov at `bits` on the shape and buffers of x: prefill and decode times, decode error against SDPA's bf16 output."""
    caches = []
    try:
        for r in range(x.nrot):
            caches.append(lib.cov_cache_create(x.B, x.hkv, D, bits, x.L, SINK, RECENT))

        def pre(i):
            r = i % x.nrot
            lib.call("oscar_cov_prefill", C.byref(caches[r]), None, x.ks[r].data_ptr(), x.vs[r].data_ptr(), x.lens.data_ptr(), x.L, None)
        pre_us = median_us(pre, x.nrot, max(x.nrot, x.reps // 2))
        pre_bytes = bf16_bytes + lib.cov_cache_bytes(x.B, x.hkv, D, bits, x.L, SINK, RECENT)

        def dec(i):
            lib.call("oscar_cov_decode", C.byref(caches[i % x.nrot]), None, x.q.data_ptr(), x.hq, x.lens.data_ptr(), x.L, x.scale,
                     x.out.data_ptr(), x.ws.data_ptr(), x.ws_bytes, None)
        us = median_us(dec, 5, x.reps)
        dec(0)
        torch.cuda.synchronize()
    finally:
        for c in caches:
            lib.cov_cache_destroy(c)
    row[f"int{bits}_rel_err_vs_sdpa_bf16"] = float((x.out - ref).norm() / ref.norm())
    row[f"int{bits}_us"] = us
    row[f"int{bits}_read_bytes"] = x.B * x.hkv * int_read_bytes(x.L, bits)
    row[f"int{bits}_prefill_us"] = pre_us
    row[f"int{bits}_prefill_tbps"] = pre_bytes / (pre_us * 1e-6) / 1e12


def time_omni(lib, x):
    """oscar-omni INT2's decode time (us) on the shape and buffers of x (Hadamard-rotated K/V assumed; whole residual
    blocks in the body)."""
    ocaches = []
    try:
        for r in range(x.nrot):
            ocaches.append(lib.omni_cache_create(x.B, x.hkv, D, 2, x.L))
        for r in range(x.nrot):
            lib.call("oscar_omni_prefill", C.byref(ocaches[r]), None, x.ks[r].data_ptr(), x.vs[r].data_ptr(), x.lens.data_ptr(), x.L, None)

        def odec(i):
            lib.call("oscar_omni_decode", C.byref(ocaches[i % x.nrot]), None, x.q.data_ptr(), x.hq, x.lens.data_ptr(), x.L, x.scale,
                     x.out.data_ptr(), x.ws.data_ptr(), x.ws_bytes, None)
        return median_us(odec, 5, x.reps)
    finally:
        for c in ocaches:
            lib.omni_cache_destroy(c)


def report(results, lib, dev, hq, hkv, cp):
    """The markdown table of the run (and each row's ratios added to it), then the errors against SDPA."""
    print(f"\n### Decode vs PyTorch SDPA ({dev}; {hq} q / {hkv} KV heads, head_dim {D}; copy {cp:.3f} TB/s)\n")
    print("| batch | ctx | best SDPA (us) | backend | SDPA TB/s | ours bf16 (us) | int2 (us) | int2 TB/s | int2 vs copy | "
          "int2 x best SDPA | int2 x our bf16 | int4 (us) | int4 x best SDPA | int2 prefill TB/s | KV/seq bf16 -> int2 (128K) | "
          "omni int2 (us) | omni TB/s | omni x best SDPA |")
    print("|" + "---|" * 18)
    for r in results:
        avail = {k: v for k, v in r["sdpa"].items() if v}
        best_name, best = (min(avail.items(), key=lambda kv: kv[1]) if avail else ("none", float("nan")))
        B, L = r["batch"], r["ctx"]
        int2_tbps = r["int2_read_bytes"] / (r["int2_us"] * 1e-6) / 1e12
        r["best_sdpa"] = best_name
        r["best_sdpa_us"] = best
        r["int2_speedup_vs_best_sdpa"] = best / r["int2_us"]
        r["int4_speedup_vs_best_sdpa"] = best / r["int4_us"]
        r["int2_speedup_vs_ours_bf16"] = r["ours_bf16_us"] / r["int2_us"]
        r["int2_frac_copy"] = int2_tbps / cp
        mem_ratio = (131072 * 4 * D) / lib.cov_cache_bytes(1, 1, D, 2, 131072, SINK, RECENT)
        print(f"| {B} | {L} | {best:.1f} | {best_name} | {r['bf16_bytes'] / (best * 1e-6) / 1e12:.2f} | {r['ours_bf16_us']:.1f} | "
              f"{r['int2_us']:.1f} | {int2_tbps:.2f} | {100 * int2_tbps / cp:.0f}% | {best / r['int2_us']:.2f}x | "
              f"{r['ours_bf16_us'] / r['int2_us']:.2f}x | {r['int4_us']:.1f} | {best / r['int4_us']:.2f}x | "
              f"{r['int2_prefill_tbps']:.2f} | {mem_ratio:.2f}x | {r['omni2_us']:.1f} | "
              f"{r['omni2_read_bytes'] / (r['omni2_us'] * 1e-6) / 1e12:.2f} | {best / r['omni2_us']:.2f}x |")
        r["omni2_speedup_vs_best_sdpa"] = best / r["omni2_us"]
    print("\nrel. error vs SDPA bf16 output (ours bf16 / int2 / int4), per shape:")
    for r in results:
        print(f"  B={r['batch']} L={r['ctx']}: {r['ours_bf16_rel_err_vs_sdpa']:.2e} / {r['int2_rel_err_vs_sdpa_bf16']:.2e} / "
              f"{r['int4_rel_err_vs_sdpa_bf16']:.2e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=None, help="liboscar_kernels.so (default: OSCAR_KERNELS_LIB, else build/kernels/ of this checkout)")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--ctx", type=int, nargs="+", default=[4096, 16384, 32768, 65536, 131072])
    ap.add_argument("--q-heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    lib = oscar_kv.load(args.lib)
    hq, hkv = args.q_heads, args.kv_heads
    dev = torch.cuda.get_device_name()
    cp = copy_tbps()
    print(f"device: {dev}; torch {torch.__version__}; copy (read+write) {cp:.3f} TB/s")
    results = []
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)]
    scale = 1.0 / math.sqrt(D)
    for B in args.batch:
        for L in args.ctx:
            bf16_bytes = B * hkv * L * D * 2 * 2
            nrot = max(1, min(64, math.ceil(256e6 / bf16_bytes)))
            free, _ = torch.cuda.mem_get_info()
            if nrot * bf16_bytes * 1.7 + 2e9 > free:
                print(f"skip B={B} L={L}: not enough memory")
                continue
            ks = [torch.randn(B, hkv, L, D, device="cuda", dtype=torch.bfloat16) for _ in range(nrot)]
            vs = [torch.randn(B, hkv, L, D, device="cuda", dtype=torch.bfloat16) for _ in range(nrot)]
            q = torch.randn(B, hq, 1, D, device="cuda", dtype=torch.bfloat16)
            lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
            out = torch.empty(B, hq, D, dtype=torch.float32, device="cuda")
            row = {"batch": B, "ctx": L, "bf16_bytes": bf16_bytes, "sdpa": {}}
            for name, be in backends:
                if name == "math" and bf16_bytes * 4 > 8e9:
                    row["sdpa"][name] = None  # math expands GQA K/V: skip the huge shapes
                    continue
                try:
                    with sdpa_kernel(be):
                        def run(i):
                            F.scaled_dot_product_attention(q, ks[i % nrot], vs[i % nrot], enable_gqa=True)
                        us = median_us(run, 3, args.reps)
                    row["sdpa"][name] = us
                except Exception as e:  # backend does not accept the shape
                    row["sdpa"][name] = None
                    print(f"  sdpa {name} B={B} L={L}: unavailable ({str(e).splitlines()[0][:80]})")
                torch.cuda.empty_cache()
            ws_bytes = max(lib.oscar_decode_workspace_bytes(B, hq, hkv, D, L, 0),
                           lib.oscar_decode_workspace_bytes(B, hq, hkv, D, L, 1))
            ws = torch.empty(ws_bytes // 4 + 4, dtype=torch.float32, device="cuda")

            def run16(i):
                lib.call("oscar_bf16_decode", ks[i % nrot].data_ptr(), vs[i % nrot].data_ptr(), B, hkv, L, D, q.data_ptr(), hq,
                         lens.data_ptr(), L, scale, out.data_ptr(), ws.data_ptr(), ws_bytes, None)
            row["ours_bf16_us"] = median_us(run16, 5, args.reps)
            # Correctness spot check of our BF16 kernel against SDPA on this shape.
            ref = F.scaled_dot_product_attention(q, ks[0], vs[0], enable_gqa=True).float().squeeze(2)
            run16(0)
            torch.cuda.synchronize()
            row["ours_bf16_rel_err_vs_sdpa"] = float((out - ref).norm() / ref.norm())
            x = SimpleNamespace(B=B, L=L, hq=hq, hkv=hkv, nrot=nrot, ks=ks, vs=vs, q=q, lens=lens, out=out, ws=ws, ws_bytes=ws_bytes,
                                scale=scale, reps=args.reps)
            for bits in (2, 4):
                time_cov(lib, x, bits, ref, bf16_bytes, row)
            row["omni2_us"] = time_omni(lib, x)
            row["omni2_read_bytes"] = B * hkv * omni_read_bytes(L, 2, hkv)
            del ks, vs, ws, x
            torch.cuda.empty_cache()
            results.append(row)

    report(results, lib, dev, hq, hkv, cp)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev, "torch": torch.__version__, "copy_tbps": cp, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
