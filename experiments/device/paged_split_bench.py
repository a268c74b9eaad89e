"""paged_split_bench.py: the paged INT2/INT4 decode (oscar_cov_paged_decode: query rotation, split-KV decode, merge,
output rotation) of one layer, timed for several fixed splits (oscar_paged_batch.split_tokens) and batches, beside a
device copy measured in the same run. The vLLM plugin decodes with one fixed split (oscar_kv.paged.decode_split_tokens)
so that a request's output does not depend on its batch; this measures what that choice costs or gains.

Usage: python3 paged_split_bench.py OUT.json [--ctx 101024] [--batches 1,4,29] [--splits 0,2048,4096,8192,16384]
       [--q-heads 32 --kv-heads 8 --head-dim 128 --bits 2]
Split 0 is the library's planner (one wave of blocks; not batch-invariant), for reference. Each (batch, split) is timed
per call and as CUDA-graph replays (oscar_kv.timing's medians). The pool holds random codes and fixed (scale, zero)
parameters; the windows random BF16 rows; the rotations a random orthogonal matrix.
"""
import argparse
import ctypes as C
import json
import sys

import torch

from oscar_kv import _capi, paged, timing


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--ctx", type=int, default=101024)
    ap.add_argument("--batches", default="1,4,29")
    ap.add_argument("--splits", default="0,2048,4096,8192,16384")
    ap.add_argument("--q-heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--bits", type=int, default=2)
    a = ap.parse_args()
    batches = [int(x) for x in a.batches.split(",")]
    splits = [int(x) for x in a.splits.split(",")]
    lib = _capi.load()
    dev = torch.device("cuda")
    H, D, Hq = a.kv_heads, a.head_dim, a.q_heads
    P = paged.DEFAULT_PAGE_TOKENS
    lay = paged.PagedLayout(H, D, a.bits, P)
    B = max(batches)
    pps = (a.ctx + P - 1) // P
    pool = torch.randint(0, 256, (B * pps, lay.page_bytes), dtype=torch.uint8, device=dev)
    # every head region's (scale, zero) fp16 pairs: scale 0.02, zero -0.03 (finite scores whatever the codes)
    _, _, kpo, vpo = lay.offsets()
    par = torch.tensor([0.02, -0.03], dtype=torch.float16).view(torch.uint8).repeat(P)
    reg = pool.view(B * pps, H, lay.region_bytes)
    reg[:, :, kpo:kpo + 4 * P] = par.to(dev)
    reg[:, :, vpo:vpo + 4 * P] = par.to(dev)
    S, W = paged.SINK, paged.RECENT
    k_sink = torch.randn(B + 1, H, S, D, device=dev).to(torch.bfloat16)
    v_sink = torch.randn_like(k_sink)
    k_rec = torch.randn(B + 1, H, W, D, device=dev).to(torch.bfloat16)
    v_rec = torch.randn_like(k_rec)
    c = _capi.CovPaged()
    c.num_kv_heads, c.head_dim, c.bits, c.sink, c.recent, c.page_tokens = H, D, a.bits, S, W, P
    c.num_pages, c.page_stride, c.num_window_slots = pool.shape[0], pool.stride(0), B + 1
    lib.oscar_cov_paged_default_rule(C.byref(c))
    c.pages, c.k_sink, c.v_sink, c.k_recent, c.v_recent = (pool.data_ptr(), k_sink.data_ptr(), v_sink.data_ptr(),
                                                          k_rec.data_ptr(), v_rec.data_ptr())
    rk = torch.linalg.qr(torch.randn(D, D, device=dev, dtype=torch.float64))[0].float().unsqueeze(0).contiguous()
    rv = torch.linalg.qr(torch.randn(D, D, device=dev, dtype=torch.float64))[0].float().unsqueeze(0).contiguous()
    opts = _capi.DecodeOptions(_capi.Rotation(_capi.ROTATION_MATRIX, 0, rk.data_ptr(), rv.data_ptr()))
    block_table = torch.arange(B * pps, dtype=torch.int32, device=dev).view(B, pps)
    window_slot = torch.arange(B, dtype=torch.int32, device=dev)
    q = (torch.randn(B, Hq, D, device=dev) * 0.5).to(torch.bfloat16)
    out = torch.empty(B, Hq, D, dtype=torch.float32, device=dev)
    copy_tbs = timing.copy_tbps()  # the run's bandwidth reference (read + write)
    res = {"device": torch.cuda.get_device_name(), "ctx": a.ctx, "q_heads": Hq, "kv_heads": H, "head_dim": D, "bits": a.bits,
           "page_tokens": P, "copy_tb_s": copy_tbs, "rows": []}
    print(f"{res['device']}: copy {copy_tbs:.2f} TB/s (read + write); ctx {a.ctx}, {Hq}/{H} heads, head_dim {D}, INT{a.bits}",
          flush=True)
    body = a.ctx - S - W
    for nb in batches:
        seq_lens = torch.full((nb,), a.ctx, dtype=torch.int32, device=dev)
        qsl = torch.arange(nb + 1, dtype=torch.int32, device=dev)
        nbytes = nb * (H * body * lay.token_bytes + lay.window_slot_bytes)  # what one call reads: pages and windows
        ref = None
        for sp in splits:
            ws_bytes = lib.oscar_cov_paged_workspace_bytes(nb, Hq, H, D, a.ctx, sp)
            ws = torch.empty(ws_bytes, dtype=torch.uint8, device=dev)
            batch = _capi.PagedBatch(nb, seq_lens.data_ptr(), qsl.data_ptr(), block_table.data_ptr(), block_table.stride(0),
                                     window_slot.data_ptr(), sp)

            def call():
                lib.call("oscar_cov_paged_decode", C.byref(c), C.byref(opts), C.byref(batch), q.data_ptr(), Hq, a.ctx,
                         C.c_float(D ** -0.5), out.data_ptr(), ws.data_ptr(), ws_bytes, C.c_void_p(torch.cuda.current_stream().cuda_stream))
            call()
            torch.cuda.synchronize()
            o = out[:nb].clone()
            if not torch.isfinite(o).all():
                sys.exit(f"paged_split_bench: error: split {sp}, batch {nb}: non-finite outputs")
            diff = None if ref is None else (o - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
            ref = o if ref is None else ref
            pc, gr = timing.per_call_us(lambda i: call(), 3, 50), timing.graph_us(lambda i: call())
            row = {"batch": nb, "split_tokens": sp, "per_call_us": pc, "graph_us": gr, "tb_s": nbytes / (gr * 1e-6) / 1e12,
                   "of_copy": nbytes / (gr * 1e-6) / 1e12 / copy_tbs, "rel_diff_vs_first": diff}
            res["rows"].append(row)
            print(f"batch {nb:3d} split {sp:6d}: graph {gr:8.1f} us, per call {pc:8.1f} us, {row['tb_s']:.2f} TB/s "
                  f"({100 * row['of_copy']:.0f}% of copy)" + (f", max rel diff vs split {splits[0]} {diff:.1e}" if diff is not None else ""),
                  flush=True)
            del ws
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
