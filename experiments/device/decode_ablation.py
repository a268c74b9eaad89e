#!/usr/bin/env python3
"""decode_ablation.py: the decode levers (kernels/src/decode/levers.h) measured one at a time, side by side in one process.

Each --variant NAME=LIB is a liboscar_kernels.so built with some levers off (experiments/device/decode_ablation.sh builds
them); every variant decodes the same oscar-cov (or --fmt omni) cache contents of each shape, timed as CUDA-graph replays
and per call (kernels/python/oscar_kv/timing.py), next to the best PyTorch SDPA backend and our BF16 kernel (of the
first variant) over the same BF16 K/V, and a device-to-device copy of this run. Prints one Markdown table: per variant
and shape, graph us, share of copy (the bytes a decode step must read over the graph time) and the ratio to SDPA, and
the output's relative difference to the first variant's (a lever that changes rounding shows there).
A variant NAME=LIB@two-launch decodes with the caches' arrival counters taken away (oscar_kv.h): the merge runs as a
kernel of its own instead of in the decode grid. Every variant's caches are made and filled first; the graph times are
the best of --passes rounds over the variants in turn. "host us" is the CPU time of one decode call (median; the queue empty,
the time of a no-op ctypes call into the same library subtracted).
Usage: python3 decode_ablation.py --variant all=a.so --variant no-lop3=b.so ... [--shapes 128:8:32768 ...] [--bits 2]
"""
import argparse
import ctypes as C
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kernels" / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import oscar_kv  # noqa: E402
from bench_decode_graph import HEADS, cov_read_bytes, decode_inputs, omni_read_bytes  # noqa: E402
from oscar_kv.timing import copy_tbps, graph_us, per_call_us  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", action="append", required=True, help="NAME=liboscar_kernels.so (the first is the reference)")
    ap.add_argument("--shapes", nargs="+", default=["128:1:32768", "128:1:131072", "128:8:32768", "128:32:32768", "64:32:32768",
                                                     "256:8:32768"], help="head_dim:batch:ctx")
    ap.add_argument("--fmt", choices=["cov", "omni"], default="cov")
    ap.add_argument("--bits", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--passes", type=int, default=2, help="graph timings of every variant, in turn; the best is reported")
    a = ap.parse_args()
    variants = []
    for v in a.variant:
        name, spec = v.split("=", 1)
        path, _, mode = spec.partition("@")
        if mode not in ("", "two-launch"):
            sys.exit(f"decode_ablation.py: --variant {v}: unknown mode @{mode}; use @two-launch or none")
        variants.append((name, oscar_kv.load(path), mode == "two-launch"))
    cp = copy_tbps()
    print(f"device: {torch.cuda.get_device_name()}; copy (read+write) {cp:.3f} TB/s; {a.fmt} INT{a.bits}", flush=True)
    rows = []
    for shape in a.shapes:
        D, B, L = (int(x) for x in shape.split(":"))
        hq, hkv = HEADS[D]
        nrot = max(1, min(16, math.ceil(256e6 / (B * hkv * L * D * 4))))
        ks, vs, q, lens, out, scale = decode_inputs(B, hq, hkv, L, D, nrot)
        stream = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731  (a graph captures on a side stream)
        best = None
        for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
            try:
                with sdpa_kernel(be):
                    t = graph_us(lambda i: F.scaled_dot_product_attention(q, ks[i % nrot], vs[i % nrot], enable_gqa=True), 20, a.reps)
                best = t if best is None else min(best, t)
            except Exception:  # the backend does not take this shape
                pass
        lib0 = variants[0][1]
        wsb = max(lib0.oscar_decode_workspace_bytes(B, hq, hkv, D, L, 0), lib0.oscar_decode_workspace_bytes(B, hq, hkv, D, L, 1))
        ws = torch.empty(wsb // 4 + 4, dtype=torch.float32, device="cuda")
        bf = graph_us(lambda i: lib0.call("oscar_bf16_decode", ks[i % nrot].data_ptr(), vs[i % nrot].data_ptr(), B, hkv, L, D, q.data_ptr(),
                                          hq, lens.data_ptr(), L, scale, out.data_ptr(), ws.data_ptr(), wsb, stream()), 20, a.reps)
        bf_host = host_us(lambda: lib0.call("oscar_bf16_decode", ks[0].data_ptr(), vs[0].data_ptr(), B, hkv, L, D, q.data_ptr(), hq,
                                            lens.data_ptr(), L, scale, out.data_ptr(), ws.data_ptr(), wsb, stream()),
                          lambda: lib0.dll.oscar_cov_shape_supported(D, a.bits), a.reps * 5)
        print(f"  our bf16 hd{D} B={B} L={L}: graph {bf:.1f} us, host {bf_host:.1f} us (plan and two launches)", flush=True)
        per_head = cov_read_bytes(L, D, a.bits) if a.fmt == "cov" else omni_read_bytes(L, D, a.bits, hkv)
        made = []  # (name, lib, caches, counters kept) of every variant, all alive while the variants are timed
        try:
            for name, lib, two in variants:
                create = lib.cov_cache_create if a.fmt == "cov" else lib.omni_cache_create
                caches = [create(B, hkv, D, a.bits, L) for _ in range(nrot)]
                made.append((name, lib, caches, [cc.arrivals for cc in caches]))
                if two:
                    for cc in caches:
                        cc.arrivals = None
                for r in range(nrot):
                    lib.call(f"oscar_{a.fmt}_prefill", C.byref(caches[r]), None, ks[r].data_ptr(), vs[r].data_ptr(), lens.data_ptr(), L,
                             stream())

            def decoder(lib, caches):
                def dec(i):
                    lib.call(f"oscar_{a.fmt}_decode", C.byref(caches[i % nrot]), None, q.data_ptr(), hq, lens.data_ptr(), L, scale,
                             out.data_ptr(), ws.data_ptr(), wsb, stream())
                return dec
            decs = [decoder(lib, caches) for _, lib, caches, _ in made]
            # Graph times: every variant once per pass, the best of the passes (the first variant timed at a shape
            # measured up to ~8% slow at batch 32 on the H200, whichever it was).
            g_best = [math.inf] * len(made)
            for _ in range(a.passes):
                for k, dec in enumerate(decs):
                    g_best[k] = min(g_best[k], graph_us(dec, 20, a.reps))
            ref = None
            for k, ((name, lib, _, _), dec) in enumerate(zip(made, decs)):
                g = g_best[k]
                c = per_call_us(dec, 5, a.reps)
                host = host_us(lambda: dec(0), lambda: lib.dll.oscar_cov_shape_supported(D, a.bits), a.reps * 5)
                dec(0)
                torch.cuda.synchronize()
                o = out.clone()
                diff = 0.0 if ref is None else float((o - ref).norm() / ref.norm())
                ref = o if ref is None else ref
                frac = B * hkv * per_head / (g * 1e-6) / 1e12 / cp
                rows.append((name, D, B, L, g, c, host, frac, best / g if best else float("nan"), bf / g, diff))
                print(f"  {name} hd{D} B={B} L={L}: graph {g:.1f} us, per call {c:.1f} us, host {host:.1f} us, {100 * frac:.0f}% of copy",
                      flush=True)
        finally:
            for _, lib, caches, kept in made:
                for cc, kp in zip(caches, kept):
                    cc.arrivals = kp
                    (lib.cov_cache_destroy if a.fmt == "cov" else lib.omni_cache_destroy)(cc)
        ks = vs = ws = None  # free the shape's tensors before the next one
        torch.cuda.empty_cache()
    print(f"\n| variant | head_dim | batch | ctx | graph us | per call us | host us | of copy | x best SDPA (graph) | "
          f"x our bf16 (graph) | output vs {variants[0][0]} |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n, D, B, L, g, c, host, frac, xs, xb, diff in rows:
        print(f"| {n} | {D} | {B} | {L} | {g:.1f} | {c:.1f} | {host:.1f} | {100 * frac:.0f}% | {xs:.2f}x | {xb:.2f}x | {diff:.1e} |")


def host_us(call, noop, reps):
    """Median CPU time of call() with the GPU idle before each (so that the launch queue never blocks), minus noop()'s."""
    def med(f):
        ts = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            f()
            ts.append(time.perf_counter_ns() - t0)
        return statistics.median(ts) / 1e3
    return med(call) - med(noop)


if __name__ == "__main__":
    main()
