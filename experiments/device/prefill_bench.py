#!/usr/bin/env python3
"""prefill_bench.py: the quantize kernels (oscar-cov and oscar-omni prefill, oscar-cov append) of two or more builds of
liboscar_kernels.so side by side in one run: per-call and CUDA-graph medians, bandwidth (bf16 K/V read + cache
written, or for append the rows it touches) as a share of the device-to-device copy measured in the same run, and
whether every build's cache equals the first build's byte for byte (codes, params, windows).

Usage: python3 experiments/device/prefill_bench.py --lib old=/path/a.so --lib new=/path/b.so [--batch 8] [--ctx 32768]
Prints one markdown table per format; nothing is written.
"""
import argparse
import ctypes as C
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kernels" / "python"))
import oscar_kv  # noqa: E402
from oscar_kv.timing import copy_tbps, graph_us, per_call_us  # noqa: E402

SHAPES = [(64, 32, 8), (128, 32, 8), (256, 16, 8)]  # head_dim, q heads, kv heads


def cache_bytes(lib, c, fmt):
    """The cache's arrays as one uint8 tensor per field (device copies), for the byte-for-byte comparison."""
    out = []
    if fmt == "cov":
        B, H, D, b = c.batch, c.num_kv_heads, c.head_dim, c.bits
        sizes = {"k_sink": B * H * c.sink * D * 2, "v_sink": B * H * c.sink * D * 2, "k_recent": B * H * c.recent * D * 2,
                 "v_recent": B * H * c.recent * D * 2, "k_codes": B * H * c.body_capacity * D * b // 8,
                 "v_codes": B * H * c.body_capacity * D * b // 8, "k_params": B * H * c.body_capacity * 4,
                 "v_params": B * H * c.body_capacity * 4}
    else:
        return None
    for name, n in sizes.items():
        p = getattr(c, name)
        if not p or n == 0:
            continue
        view = type("DeviceBytes", (), {"__cuda_array_interface__": {"shape": (n,), "typestr": "|u1", "data": (p, False),
                                                                         "version": 3}})()
        out.append((name, torch.as_tensor(view, device="cuda").clone()))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", action="append", required=True, help="LABEL=PATH of a liboscar_kernels.so (repeatable)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    libs = [(s.split("=", 1)[0], oscar_kv.load(s.split("=", 1)[1])) for s in a.lib]
    cp = copy_tbps()
    print(f"device: {torch.cuda.get_device_name()}; copy (read+write) {cp:.3f} TB/s; batch {a.batch}, {a.ctx} tokens")
    B, L = a.batch, a.ctx
    rows = []
    for D, hq, hkv in SHAPES:
        torch.manual_seed(0)
        k = torch.randn(B, hkv, L, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(B, hkv, L, D, device="cuda", dtype=torch.bfloat16)
        lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
        bf16_bytes = 2 * k.numel() * 2
        for fmt in ("cov", "omni"):
            for bits in (2, 4):
                ref = None
                for label, lib in libs:
                    c = lib.cov_cache_create(B, hkv, D, bits, L) if fmt == "cov" else lib.omni_cache_create(B, hkv, D, bits, L)
                    try:
                        cbytes = lib.cov_cache_bytes(B, hkv, D, bits, L) if fmt == "cov" else lib.omni_cache_bytes(B, hkv, D, bits, L)

                        def pre(i, c=c, lib=lib):
                            lib.call(f"oscar_{fmt}_prefill", C.byref(c), None, k.data_ptr(), v.data_ptr(), lens.data_ptr(), L,
                                     torch.cuda.current_stream().cuda_stream)  # the capturing stream inside a graph

                        pc = per_call_us(pre, 3, a.reps)
                        gr = graph_us(pre, calls=5, reps=a.reps)
                        pre(0)
                        torch.cuda.synchronize()
                        arrays = cache_bytes(lib, c, fmt)
                        same = "-"
                        if arrays is not None:
                            if ref is None:
                                ref = arrays
                                same = "(reference)"
                            else:
                                same = "yes" if all(torch.equal(x, y) for (_, x), (_, y) in zip(ref, arrays)) else "NO"
                        tb = (bf16_bytes + cbytes) / (gr * 1e-6) / 1e12
                        rows.append((fmt, bits, D, label, pc, gr, tb, tb / cp, same))
                        print(f"{fmt} INT{bits} hd{D} {label}: per call {pc:.1f} us, graph {gr:.1f} us, {tb:.2f} TB/s "
                              f"({100 * tb / cp:.0f}% of copy), same codes as the first build: {same}", flush=True)
                    finally:
                        (lib.cov_cache_destroy if fmt == "cov" else lib.omni_cache_destroy)(c)
                    torch.cuda.empty_cache()
    print()
    print("| format | bits | head_dim | build | per call (us) | graph (us) | TB/s (graph) | of copy | cache = first build's |")
    print("|---|---|---|---|---|---|---|---|---|")
    for fmt, bits, D, label, pc, gr, tb, share, same in rows:
        print(f"| oscar-{fmt} | {bits} | {D} | {label} | {pc:.1f} | {gr:.1f} | {tb:.2f} | {100 * share:.0f}% | {same} |")
    base = {(f, b, d): gr for f, b, d, lab, _, gr, *_ in rows if lab == libs[0][0]}
    print()
    for f, b, d, lab, _, gr, *_ in rows:
        if lab != libs[0][0]:
            print(f"oscar-{f} INT{b} hd{d}: {lab} {base[(f, b, d)] / gr:.2f}x faster than {libs[0][0]} (graph)")


if __name__ == "__main__":
    main()
