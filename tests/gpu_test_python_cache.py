#!/usr/bin/env python3
"""gpu_test_python_cache.py: the torch-level caches of oscar_kv (CovKvCache, OmniKvCache) on a GPU.

For both formats, head_dim 64/128/256 and 2/4 bits (GQA 4, batch 3 of different lengths, 300..700 tokens so that
windows, bodies and residual blocks are all in use): every decode equals the fp32 decode over the cache read back
from its device arrays (tests/python_twins.py, relative error <= 2e-2); a CUDA graph of 16 append+decode steps
captured on one cache and replayed gives bit-identical outputs and arrays to the same steps run eagerly on a twin
cache; reorder() permutes the sequences (decode outputs permuted bit for bit); the C library's errors arrive as
OscarError with its message, and calls on a non-current stream run on that stream.
Exit 0 passed, 1 failed, 77 skipped (no torch/CUDA/library).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_python  # noqa: E402
from gpu_python import check  # noqa: E402

oscar_kv = gpu_python.require()
import torch  # noqa: E402
import python_twins  # noqa: E402


def make(fmt, B, H, D, bits, cap, G, g):
    if fmt == "oscar-omni":
        return oscar_kv.OmniKvCache(B, H, D, bits, cap, H * G)
    rk = torch.linalg.qr(torch.randn(D, D, generator=g, dtype=torch.float64))[0].float()
    rv = torch.linalg.qr(torch.randn(D, D, generator=g, dtype=torch.float64))[0].float()
    return oscar_kv.CovKvCache(B, H, D, bits, cap, H * G, rotation=oscar_kv.KernelRotation.matrices(rk, rv))


def run(fmt, D, bits):
    B, H, G, L, steps = 3, 2, 4, 700, 16
    cap = L + steps + 8
    g = torch.Generator().manual_seed(D * 10 + bits)
    lens = [L, 300, 520]
    k = (torch.randn(B, H, L, D, generator=g) * 2).to(torch.bfloat16).cuda()
    v = torch.randn(B, H, L, D, generator=g).to(torch.bfloat16).cuda()
    k[:, :, 0] *= 0.05  # a sink-like low-norm first token
    news = [(torch.randn(B, H, D, generator=g).to(torch.bfloat16).cuda(),
             torch.randn(B, H, D, generator=g).to(torch.bfloat16).cuda(),
             torch.randn(B, H * G, D, generator=g).to(torch.bfloat16).cuda()) for _ in range(steps)]
    g1 = torch.Generator().manual_seed(99)
    g2 = torch.Generator().manual_seed(99)
    eager, graphed = make(fmt, B, H, D, bits, cap, G, g1), make(fmt, B, H, D, bits, cap, G, g2)
    scale = D ** -0.5
    eager.prefill(k, v, lens)
    graphed.prefill(k, v, lens)
    # eager steps, each checked against the reference
    outs_e, worst = [], 0.0
    for kn, vn, q in news:
        eager.append(kn, vn)
        o = eager.decode(q, scale)
        ref = python_twins.reference_decode(eager, q, scale)
        worst = max(worst, ((o - ref).norm() / ref.norm()).item())
        outs_e.append(o.clone())
    check(worst <= 2e-2, f"{fmt} hd{D} {bits}b: decode vs fp32 reference rel err {worst:.2e}")
    # the same steps captured in one graph on the twin cache (static inputs, bound = the final length)
    kin = torch.empty_like(news[0][0])
    vin = torch.empty_like(news[0][1])
    qin = torch.empty_like(news[0][2])
    out = torch.empty(B, H * G, D, dtype=torch.float32, device="cuda")
    bound0 = max(lens)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    outs_g = []
    with torch.cuda.stream(s):
        # one graph per step position: the host bound grows by one each step (the graph bakes it in)
        graphs = []
        for i in range(steps):
            gr = torch.cuda.CUDAGraph()
            with torch.cuda.graph(gr, stream=s):
                graphed.append(kin, vin, max_seq_len=bound0 + i)
                graphed.decode(qin, scale, out=out, max_seq_len=bound0 + i + 1)
            graphs.append(gr)
    torch.cuda.synchronize()
    # capturing did not run anything: the graphed cache is still at the prefill state
    check(graphed.seq_lens.cpu().tolist() == lens, f"{fmt} hd{D} {bits}b: capture changed seq_lens")
    for i, (kn, vn, q) in enumerate(news):
        kin.copy_(kn)
        vin.copy_(vn)
        qin.copy_(q)
        graphs[i].replay()
        outs_g.append(out.clone())
    torch.cuda.synchronize()
    same = all(torch.equal(a, b) for a, b in zip(outs_e, outs_g))
    check(same, f"{fmt} hd{D} {bits}b: graph replays differ from eager steps")
    ae, ag = eager.arrays(), graphed.arrays()
    check(all(torch.equal(ae[n], ag[n]) for n in ae), f"{fmt} hd{D} {bits}b: arrays differ after graph replays")
    check(graphed.seq_lens.cpu().tolist() == [n + steps for n in lens], f"{fmt} hd{D} {bits}b: seq_lens after replays")
    # reorder: sequences permuted, decode outputs permuted bit for bit
    perm = torch.tensor([2, 0, 1], device="cuda")
    q = news[-1][2]
    before = eager.decode(q, scale)
    eager.reorder(perm)
    after = eager.decode(q[perm], scale)
    check(torch.equal(after, before[perm]), f"{fmt} hd{D} {bits}b: reorder")
    # a side stream: the call runs there (recorded work completes on that stream)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        o = eager.decode(q[perm], scale)
    side.synchronize()
    check(torch.equal(o, after), f"{fmt} hd{D} {bits}b: decode on a side stream")
    # logit modifiers (Gemma 2's soft-capping, gpt-oss's sinks) against the reference with the same modifiers; each
    # must move the output (a decode that ignored it would fail)
    # sinks on the scale of the scores: each head's log-sum-exp in the first sequence plus N(0, 1)
    sinks = python_twins.logsumexp(eager, q[perm], scale)[0] + torch.randn(H * G, generator=g).cuda()
    worst_mod = 0.0
    for softcap, sk in ((1.5, None), (0.0, sinks), (1.5, sinks)):
        eager.set_logits(softcap, sk)
        o = eager.decode(q[perm], scale)
        ref = python_twins.reference_decode(eager, q[perm], scale)
        err = ((o - ref).norm() / ref.norm()).item()
        moved = ((ref - after).norm() / ref.norm()).item()
        worst_mod = max(worst_mod, err)
        check(err <= 2e-2 and moved > 0.1, f"{fmt} hd{D} {bits}b: softcap {softcap}, sinks {sk is not None}: rel err "
              f"{err:.2e} (bound 2e-2), the modifiers move the output by {moved:.2e} (need > 0.1)")
    eager.set_logits()
    check(torch.equal(eager.decode(q[perm], scale), after), f"{fmt} hd{D} {bits}b: set_logits() back to plain")
    print(f"{fmt:10s} hd{D:<3d} {bits}b: decode vs reference {worst:.1e}, graph == eager: {same}, "
          f"with softcap/sinks {worst_mod:.1e}", flush=True)
    for c in (eager, graphed):
        c.close()


def main():
    for fmt in ("oscar-omni", "oscar-cov"):
        for D in (64, 128, 256):
            for bits in (2, 4):
                try:
                    run(fmt, D, bits)
                except Exception as e:
                    import traceback
                    traceback.print_exc()
                    check(False, f"{fmt} hd{D} {bits}b: {type(e).__name__}: {e}")
    # the C library's own refusal, with its message: a rotation matrix pointer that is not 16-byte aligned
    c = oscar_kv.OmniKvCache(1, 2, 128, 2, 256, 8)
    try:
        c.lib.call("oscar_omni_decode", oscar_kv._capi.C.byref(c._c), None, 1, 8, c.seq_lens.data_ptr(), 10, 0.1, 0, 0, 0, None)
        check(False, "C errors: no OscarError")
    except oscar_kv.OscarError as e:
        check(bool(e.message) and e.status_name.startswith("OSCAR_ERR"), f"C error carried: {e}")
        print(f"C error arrives as OscarError: {e}")
    return gpu_python.finish()


if __name__ == "__main__":
    sys.exit(main())
