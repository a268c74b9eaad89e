#!/usr/bin/env python3
"""bench_decode_graph.py: decode attention of every format x head_dim x bits against the best PyTorch SDPA
backend and our BF16 kernel, each side timed two ways in the same process: one call between two CUDA events
(median of repeats) and a CUDA-graph replay of GRAPH_CALLS calls divided by the count (launch overhead out).
Bandwidth is the bytes one decode step must read (the format units' decode_read_bytes, mirrored below) over the
graph time, against a device-to-device copy measured in the same run. Prefill-quantize bandwidth (bf16 K+V read,
cache written) is timed per call.

Caches are allocated through the C API (kernels/python/oscar_kv); every call runs on torch's current stream;
K/V are rotated over copies so that each repeat reads at least 256 MB (more than the 50 MB L2).
Usage: python3 experiments/bench_decode_graph.py --lib liboscar_kernels.so [--head-dims 64 128 256]
       [--batch 1 8 32] [--ctx 32768 131072] [--softcap C] [--json out.json] [--markdown out.md]
--softcap C (> 0): the quantized decodes take Gemma 2's soft-capping C in their options (oscar_decode_options; the cost
of the capped path; the baselines are unchanged).
"""
import argparse
import ctypes as C
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels" / "python"))
import oscar_kv  # noqa: E402
from oscar_kv.timing import copy_tbps, graph_us, per_call_us  # noqa: E402

SINK, RECENT, RESIDUAL = oscar_kv.COV_SINK, oscar_kv.COV_RECENT, 128
GRAPH_CALLS = 20
# Attention shapes per head_dim (query heads, KV heads): Llama-3-8B / Llama-3.2-1B for 128 / 64, Gemma-2-9B for 256.
HEADS = {64: (32, 8), 128: (32, 8), 256: (16, 8)}


def cov_read_bytes(L, D, bits):  # per (sequence, KV head): covfmt::decode_read_bytes
    nb = max(0, L - SINK - RECENT)
    return (L - nb) * 4 * D + nb * 2 * (D * bits // 8 + 4)


def omni_read_bytes(L, D, bits, hkv):  # per (sequence, KV head): omnifmt::decode_read_bytes
    nb = L // RESIDUAL * RESIDUAL
    return (L - nb) * 4 * D + nb * (2 * D * bits / 8 + 4 * D / 32 * 2 + 2 / hkv)


def decode_inputs(B, hq, hkv, L, D, nrot):
    """One decode shape's inputs on the GPU: nrot random bf16 copies each of K and V [B, hkv, L, D] (the repeats rotate
    over them), random bf16 queries [B, hq, 1, D], every sequence's length L (int32), a float32 output [B, hq, D] and the
    logit scale 1/sqrt(D)."""
    ks = [torch.randn(B, hkv, L, D, device="cuda", dtype=torch.bfloat16) for _ in range(nrot)]
    vs = [torch.randn(B, hkv, L, D, device="cuda", dtype=torch.bfloat16) for _ in range(nrot)]
    q = torch.randn(B, hq, 1, D, device="cuda", dtype=torch.bfloat16)
    lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
    out = torch.empty(B, hq, D, dtype=torch.float32, device="cuda")
    return ks, vs, q, lens, out, 1.0 / math.sqrt(D)


def bench_shape(lib, D, hq, hkv, B, L, reps, cp, softcap=0.0):
    stream = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731
    bf16_bytes = B * hkv * L * D * 2 * 2
    nrot = max(1, min(64, math.ceil(256e6 / bf16_bytes)))
    free, _ = torch.cuda.mem_get_info()
    if nrot * bf16_bytes * 1.6 + 3e9 > free:
        print(f"skip D={D} B={B} L={L}: not enough memory", flush=True)
        return None
    ks, vs, q, lens, out, scale = decode_inputs(B, hq, hkv, L, D, nrot)
    row = {"head_dim": D, "q_heads": hq, "kv_heads": hkv, "batch": B, "ctx": L, "bf16_bytes": bf16_bytes, "sdpa": {}}
    ref = F.scaled_dot_product_attention(q, ks[0], vs[0], enable_gqa=True).float().squeeze(2)
    for name, be in [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)]:
        try:
            with sdpa_kernel(be):
                def run(i):
                    F.scaled_dot_product_attention(q, ks[i % nrot], vs[i % nrot], enable_gqa=True)
                row["sdpa"][name] = {"call_us": per_call_us(run, 3, reps), "graph_us": graph_us(run, GRAPH_CALLS, reps)}
        except Exception as e:  # the backend does not take this shape (or cannot be captured)
            row["sdpa"][name] = None
            print(f"  sdpa {name} D={D} B={B} L={L}: unavailable ({str(e).splitlines()[0][:90]})", flush=True)
        torch.cuda.empty_cache()
    ok = {k: v for k, v in row["sdpa"].items() if v}
    row["best_sdpa_graph"] = min(ok.items(), key=lambda kv: kv[1]["graph_us"])[0] if ok else None
    row["best_sdpa_call"] = min(ok.items(), key=lambda kv: kv[1]["call_us"])[0] if ok else None
    ws_bytes = max(lib.oscar_decode_workspace_bytes(B, hq, hkv, D, L, 0), lib.oscar_decode_workspace_bytes(B, hq, hkv, D, L, 1))
    ws = torch.empty(ws_bytes // 4 + 4, dtype=torch.float32, device="cuda")

    def run16(i):
        lib.call("oscar_bf16_decode", ks[i % nrot].data_ptr(), vs[i % nrot].data_ptr(), B, hkv, L, D, q.data_ptr(), hq,
                 lens.data_ptr(), L, scale, out.data_ptr(), ws.data_ptr(), ws_bytes, stream())
    row["ours_bf16"] = {"call_us": per_call_us(run16, 5, reps), "graph_us": graph_us(run16, GRAPH_CALLS, reps)}
    run16(0)
    torch.cuda.synchronize()
    row["ours_bf16"]["rel_err_vs_sdpa"] = float((out - ref).norm() / ref.norm())
    row["formats"] = {}
    for fmt in ("cov", "omni"):
        for bits in (2, 4):
            key = f"{fmt}{bits}"
            supported = lib.oscar_cov_shape_supported(D, bits) if fmt == "cov" else lib.oscar_omni_shape_supported(D, bits)
            if not supported:
                row["formats"][key] = None
                continue
            caches = []
            try:
                for r in range(nrot):
                    caches.append(lib.cov_cache_create(B, hkv, D, bits, L) if fmt == "cov" else lib.omni_cache_create(B, hkv, D, bits, L))
                pre_fn = "oscar_cov_prefill" if fmt == "cov" else "oscar_omni_prefill"
                dec_fn = "oscar_cov_decode" if fmt == "cov" else "oscar_omni_decode"

                def pre(i):
                    r = i % nrot
                    lib.call(pre_fn, C.byref(caches[r]), None, ks[r].data_ptr(), vs[r].data_ptr(), lens.data_ptr(), L, stream())
                pre_us = per_call_us(pre, nrot, max(nrot, reps // 2))
                cache_bytes = (lib.cov_cache_bytes(B, hkv, D, bits, L) if fmt == "cov" else lib.omni_cache_bytes(B, hkv, D, bits, L))

                opts = C.byref(oscar_kv.DecodeOptions(softcap=softcap)) if softcap > 0 else None

                def dec(i):
                    lib.call(dec_fn, C.byref(caches[i % nrot]), opts, q.data_ptr(), hq, lens.data_ptr(), L, scale, out.data_ptr(),
                             ws.data_ptr(), ws_bytes, stream())
                res = {"call_us": per_call_us(dec, 5, reps), "graph_us": graph_us(dec, GRAPH_CALLS, reps)}
                dec(0)
                torch.cuda.synchronize()
                res["rel_err_vs_sdpa"] = float((out - ref).norm() / ref.norm())  # quantization error on random data, a sanity check
            finally:
                for c in caches:
                    (lib.cov_cache_destroy if fmt == "cov" else lib.omni_cache_destroy)(c)
            per_head = cov_read_bytes(L, D, bits) if fmt == "cov" else omni_read_bytes(L, D, bits, hkv)
            res["read_bytes"] = B * hkv * per_head
            res["tbps"] = res["read_bytes"] / (res["graph_us"] * 1e-6) / 1e12
            res["frac_copy"] = res["tbps"] / cp
            res["prefill_us"] = pre_us
            res["prefill_tbps"] = (bf16_bytes + cache_bytes) / (pre_us * 1e-6) / 1e12
            if ok:
                res["x_sdpa_graph"] = ok[row["best_sdpa_graph"]]["graph_us"] / res["graph_us"]
                res["x_sdpa_call"] = ok[row["best_sdpa_call"]]["call_us"] / res["call_us"]
            res["x_bf16_graph"] = row["ours_bf16"]["graph_us"] / res["graph_us"]
            row["formats"][key] = res
            torch.cuda.empty_cache()
    del ks, vs, ws
    torch.cuda.empty_cache()
    return row


def markdown(results, dev, cp, hds):
    names = {"cov": "oscar-cov", "omni": "oscar-omni"}
    out = [f"device: {dev}; torch {torch.__version__}; copy (read + write) {cp:.3f} TB/s; graph = {GRAPH_CALLS} calls per replay\n"]
    for fmt in ("cov", "omni"):
        for D in hds:
            for bits in (2, 4):
                rows = [r for r in results if r["head_dim"] == D and r["formats"].get(f"{fmt}{bits}")]
                if not rows:
                    continue
                hq, hkv = rows[0]["q_heads"], rows[0]["kv_heads"]
                out.append(f"\n#### {names[fmt]} INT{bits}, head_dim {D} ({hq} q / {hkv} KV heads)\n")
                out.append("| batch | ctx | best SDPA graph (us) | backend | ours graph (us) | per call (us) | TB/s | of copy | "
                           "x SDPA (graph) | x SDPA (per call) | x our bf16 (graph) | prefill TB/s | prefill of copy |")
                out.append("|" + "---|" * 13)
                for r in rows:
                    f = r["formats"][f"{fmt}{bits}"]
                    bg = r["best_sdpa_graph"]
                    sg = r["sdpa"][bg]["graph_us"] if bg else float("nan")
                    out.append(f"| {r['batch']} | {r['ctx']} | {sg:.1f} | {bg} | {f['graph_us']:.1f} | {f['call_us']:.1f} | "
                               f"{f['tbps']:.2f} | {100 * f['frac_copy']:.0f}% | {f.get('x_sdpa_graph', float('nan')):.2f}x | "
                               f"{f.get('x_sdpa_call', float('nan')):.2f}x | {f['x_bf16_graph']:.2f}x | {f['prefill_tbps']:.2f} | "
                               f"{100 * f['prefill_tbps'] / cp:.0f}% |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=None, help="liboscar_kernels.so (default: OSCAR_KERNELS_LIB, else build/kernels/)")
    ap.add_argument("--head-dims", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--ctx", type=int, nargs="+", default=[32768, 131072])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--softcap", type=float, default=0.0, help="> 0: quantized decodes with this soft-capping")
    ap.add_argument("--json", default="")
    ap.add_argument("--markdown", default="")
    args = ap.parse_args()
    lib = oscar_kv.load(args.lib)
    dev = torch.cuda.get_device_name()
    cp = copy_tbps()
    print(f"device: {dev}; torch {torch.__version__}; copy (read+write) {cp:.3f} TB/s", flush=True)
    results = []
    t0 = time.time()
    for D in args.head_dims:
        hq, hkv = HEADS[D]
        for B in args.batch:
            for L in args.ctx:
                r = bench_shape(lib, D, hq, hkv, B, L, args.reps, cp, args.softcap)
                if r:
                    results.append(r)
                    print(f"  D={D} B={B} L={L} done ({time.time() - t0:.0f} s)", flush=True)
    md = markdown(results, dev, cp, args.head_dims)
    print(md)
    if args.markdown:
        Path(args.markdown).write_text(md)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev, "torch": torch.__version__, "copy_tbps": cp, "graph_calls": GRAPH_CALLS,
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
