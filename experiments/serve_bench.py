#!/usr/bin/env python3
"""serve_bench.py: end-to-end decoding of a Llama-3-8B-shaped model with random bf16 weights under CUDA graphs, a
BF16 KV cache (the best PyTorch SDPA backend) against oscar-cov and oscar-omni INT2 caches.

The model, a decode loop in the manner of llama2.c's run.c: embedding 128256 x 4096; 32 layers of RMSNorm, a fused
QKV projection (32 query / 8 KV heads, head_dim 128), RoPE (theta 500000, pairs of channels) on q and k, attention,
O projection, RMSNorm, SwiGLU MLP (14336; gate and up fused in one projection); final RMSNorm, lm head, greedy
argmax fed back as the next token. One decode step (all layers, lm head, argmax) is captured as ONE CUDA graph per
(cache kind, batch, context) and replayed; ms/token is the median of single replays (each between two events),
tokens/s = batch / step time.

Attention per cache kind:
  bf16  static K/V [B][8][L+1][128] per layer; the new token is written at its position (index_copy_ with a device
        position tensor) and SDPA runs over the first L+1 tokens with the backend that was fastest on that attention
        alone (each of flash, cuDNN, efficient, math that takes the shape, timed as graph replays over the 32 layers'
        buffers). The position stays L in every replay (a static shape): every step is a step at context L.
  cov   oscar_kv.CovKvCache INT2 with a random orthogonal R_K / R_V per layer (KernelRotation.matrices: random
        weights have no calibration; the kernels cost the same for any matrices).
  cov-fold  the same oscar-cov cache with no rotation in the kernels: q and k (after RoPE) multiplied by R_K in
        torch, R_V taken as folded into W_v and W_o offline (how a deployment avoids the in-kernel matrices).
  omni  oscar_kv.OmniKvCache INT2 (Hadamard in the kernels).
        All three: append then decode with explicit host bounds (no host sync, no allocation inside the graph); q/k/v
        bf16, the float32 output cast back to bf16. The caches grow by one token per replay (context L .. L+R).
Filling to context L (no 32-layer prefill): bf16 buffers get random normal K/V. A quantized kind's layer-0 cache is
filled one sequence at a time: a one-sequence cache of the same capacity is prefilled from fresh random bf16 K/V
(the library's prefill kernels) and its device arrays (cache.arrays()) are copied into that sequence's rows; then
layer 0's arrays are copied into every other layer's cache (torch copy_, same shapes), so every byte a step reads
is a real quantized cache's.

Also measured in the same run, to explain the step time: a device-to-device copy (the weights-read and bytes-read
bounds), the 32 layers' GEMMs alone and the lm head alone (graphs at the same batch), and each kind's attention
alone (append + decode or index_copy + SDPA of the 32 layers, one graph) and decode alone (no cache write). --glue:
the layer pieces around attention (RMSNorm, RoPE, SwiGLU, residuals, lm head) run eagerly and/or through
torch.compile (fused elementwise work; the GEMMs stay cuBLAS), each its own graph on the same caches. (b) memory parity: at --parity-ctx, the
largest batch whose weights + caches + decode workspaces + a reserve for activations fit (computed from the
allocators' sizes and torch.cuda.mem_get_info, then really allocated and run; one batch less on OOM). (c) KV bytes
per sequence from the allocators. --selftest first checks the package on the GPU (prefill/decode against SDPA,
arrays() copies, append + decode captured in a graph against the same calls run eagerly).

Usage: OSCAR_KERNELS_LIB=liboscar_kernels.so python3 experiments/serve_bench.py [--selftest] [--ctx 32768 102400
       131072] [--parity-ctx 102400] [--glue eager compile] [--card-mib 81559] [--json out.json] [--markdown out.md]
"""
import argparse
import contextlib
import gc
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT / "kernels" / "python"))  # after PYTHONPATH: a patched oscar_kv there wins
import oscar_kv  # noqa: E402  (imported before bench_decode_graph, which would put the checkout's copy first)
from oscar_kv.timing import copy_tbps, graph_us, replay_us  # noqa: E402

sys.path.append(str(ROOT / "experiments"))
import bench_decode_graph as bdg  # noqa: E402  (the formats' decode read bytes)

VOCAB, DIM, LAYERS, HQ, HKV, HD, FFN = 128256, 4096, 32, 32, 8, 128, 14336
THETA, EPS, BITS = 500000.0, 1e-5, 2
QK = (HQ + HKV) * HD  # q and k columns of the fused QKV projection
SCALE = 1.0 / math.sqrt(HD)
BF16 = torch.bfloat16
GiB = 2**30
KINDS = ("bf16", "cov", "cov-fold", "omni")
NAMES = {"bf16": "BF16 (SDPA)", "cov": "oscar-cov INT2", "cov-fold": "oscar-cov INT2, R_K in torch", "omni": "oscar-omni INT2"}
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}


# ---------------------------------------------------------------------------------------------- the model
class Weights:
    """Random bf16 weights (normal, std 1/sqrt(fan_in)), RMSNorm gains 1, and the RoPE table cis[pos][64]."""

    def __init__(self, layers, max_pos, dev):
        g = torch.Generator(device=dev).manual_seed(0)

        def rand(rows, cols):
            return torch.empty(rows, cols, dtype=BF16, device=dev).normal_(0.0, 1.0 / math.sqrt(cols), generator=g)

        ones = lambda: torch.ones(DIM, dtype=BF16, device=dev)  # noqa: E731
        self.emb = rand(VOCAB, DIM)
        self.layers = [{"attn_norm": ones(), "wqkv": rand(QK + HKV * HD, DIM), "wo": rand(DIM, HQ * HD),
                        "ffn_norm": ones(), "w13": rand(2 * FFN, DIM), "w2": rand(DIM, FFN)} for _ in range(layers)]
        self.final_norm, self.wcls = ones(), rand(VOCAB, DIM)
        freqs = THETA ** (-torch.arange(0, HD, 2, dtype=torch.float64) / HD)
        angles = torch.outer(torch.arange(max_pos, dtype=torch.float64), freqs)
        self.cis = torch.polar(torch.ones_like(angles), angles).to(torch.complex64).to(dev)

    def bytes_read(self, batch):
        """Bytes of weights one step reads: every layer, the final norm, the lm head; `batch` embedding rows."""
        per_layer = sum(t.numel() * t.element_size() for t in self.layers[0].values())
        return len(self.layers) * per_layer + 2 * DIM + self.wcls.numel() * 2 + batch * DIM * 2

    def bytes_total(self):
        return self.bytes_read(0) + self.emb.numel() * 2


def rope(x, cis):
    """Rotates channel pairs (2i, 2i+1) of x float32 [B][H][HD] by the angles of cis: complex64 [B][1][HD/2] (eager:
    one complex product), or its view_as_real [B][1][HD/2][2] (torch.compile, which fuses real arithmetic only)."""
    B, H = x.shape[:2]
    x = x.reshape(B, H, HD // 2, 2)
    if cis.is_complex():
        return torch.view_as_real(torch.view_as_complex(x) * cis).reshape(B, H, HD)
    c, s, x0, x1 = cis[..., 0], cis[..., 1], x[..., 0], x[..., 1]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).reshape(B, H, HD)


def attn_in(x, norm_w, wqkv, cis):
    """RMSNorm, the fused QKV projection, RoPE on q and k: q bf16 [B][32][128], k and v [B][8][128] (contiguous)."""
    B = x.shape[0]
    qkv = F.linear(F.rms_norm(x, (DIM,), norm_w, EPS), wqkv)
    qk = rope(qkv[:, :QK].float().reshape(B, HQ + HKV, HD), cis).to(BF16)
    return qk[:, :HQ].contiguous(), qk[:, HQ:].contiguous(), qkv[:, QK:].reshape(B, HKV, HD).contiguous()


def attn_out_mlp(x, a, wo, norm_w, w13, w2):
    """The rest of a layer: x + O(a), then x + W2(silu(gate) * up) of RMSNorm(x)."""
    x = x + F.linear(a, wo)
    gu = F.linear(F.rms_norm(x, (DIM,), norm_w, EPS), w13)
    return x + F.linear(F.silu(gu[:, :FFN]) * gu[:, FFN:], w2)


def lm_head(x, norm_w, wcls):
    """Final RMSNorm, logits, greedy argmax: the next token of every sequence."""
    return F.linear(F.rms_norm(x, (DIM,), norm_w, EPS), wcls).argmax(-1)


class Glue:
    """The layer pieces around attention, plain (eager) or through torch.compile (fusing the elementwise work)."""

    def __init__(self, mode):
        self.mode = mode
        wrap = (lambda f: torch.compile(f, dynamic=False)) if mode == "compile" else (lambda f: f)
        self.attn_in, self.attn_out_mlp, self.lm_head = wrap(attn_in), wrap(attn_out_mlp), wrap(lm_head)


def decode_step(W, attn, glue, tok, pos):
    """One token for every sequence: tok [B] int64 (replaced by the argmax), pos [B] int64 (RoPE positions)."""
    x = F.embedding(tok, W.emb)
    cis = W.cis[pos].unsqueeze(1)
    if glue.mode == "compile":
        cis = torch.view_as_real(cis)
    for layer, lw in enumerate(W.layers):
        q, k, v = glue.attn_in(x, lw["attn_norm"], lw["wqkv"], cis)
        a = attn(layer, q, k, v)
        x = glue.attn_out_mlp(x, a, lw["wo"], lw["ffn_norm"], lw["w13"], lw["w2"])
    tok.copy_(glue.lm_head(x, W.final_norm, W.wcls))
    if attn.grows:
        pos.add_(1)


# ---------------------------------------------------------------------------------------------- the caches
class Bf16Attention:
    """Static bf16 K/V per layer, written at position L, SDPA (enable_gqa) over tokens [0, L]."""
    grows = False

    def __init__(self, batch, ctx, layers, dev):
        self.B, self.L, self.backend = batch, ctx, None
        shape = (batch, HKV, ctx + 1, HD)
        self.k = [torch.empty(shape, dtype=BF16, device=dev).normal_() for _ in range(layers)]
        self.v = [torch.empty(shape, dtype=BF16, device=dev).normal_() for _ in range(layers)]
        self.wpos = torch.full((1,), ctx, dtype=torch.int64, device=dev)
        self.nbytes = 2 * layers * self.k[0].numel() * 2

    def context(self):
        return sdpa_kernel(BACKENDS[self.backend])

    def sdpa(self, q, layer):
        o = F.scaled_dot_product_attention(q.unsqueeze(2), self.k[layer], self.v[layer], enable_gqa=True)
        return o.reshape(self.B, HQ * HD)

    def decode_only(self, layer, q):
        return self.sdpa(q, layer)

    def __call__(self, layer, q, k, v):
        self.k[layer].index_copy_(2, self.wpos, k.unsqueeze(2))
        self.v[layer].index_copy_(2, self.wpos, v.unsqueeze(2))
        return self.sdpa(q, layer)

    def begin(self, n):  # the quantized kinds' host bounds; nothing to do here
        pass

    def end(self, n):
        pass

    def resync(self):
        pass

    def close(self):
        self.k = self.v = None


def random_orthogonal(seed):
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(HD, HD, dtype=torch.float64, generator=g))
    return (q * torch.sign(torch.diagonal(r))).float()


def make_cache(kind, batch, capacity, layer, lib, dev, bits=BITS):
    if kind == "cov-fold":  # the rotations outside the kernels (OscarAttention)
        return oscar_kv.CovKvCache(batch, HKV, HD, bits, capacity, HQ, device=dev, lib=lib)
    if kind == "cov":
        rot = oscar_kv.KernelRotation.matrices(random_orthogonal(2 * layer + 1), random_orthogonal(2 * layer + 2))
        return oscar_kv.CovKvCache(batch, HKV, HD, bits, capacity, HQ, rotation=rot, device=dev, lib=lib)
    return oscar_kv.OmniKvCache(batch, HKV, HD, bits, capacity, HQ, device=dev, lib=lib)


def copy_cache(src, dst):
    """dst's device arrays and lengths := src's (same shapes)."""
    d = dst.arrays()
    for name, t in src.arrays().items():
        d[name].copy_(t)
    dst.seq_lens.copy_(src.seq_lens)
    dst.set_lengths(src.max_len)


class OscarAttention:
    """One oscar_kv cache per layer: append the new token, decode, cast the float32 output back to bf16.
    cov-fold: the kernels rotate nothing; q and k (after RoPE) are multiplied by the layer's R_K in torch (one small
    matmul each), and R_V is taken as folded into W_v and W_o offline (v R_V, R_V^T W_o per head: with random weights
    that is another random matrix, so nothing runs for it)."""
    grows = True

    def __init__(self, kind, batch, capacity, layers, lib, dev):
        self.kind, self.B, self.capacity, self.lib, self.dev = kind, batch, capacity, lib, dev
        self.caches, self.rk = [], []
        for layer in range(layers):
            self.caches.append(make_cache(kind, batch, capacity, layer, lib, dev))
            if kind == "cov-fold":
                self.rk.append(random_orthogonal(2 * layer + 1).to(device=dev, dtype=BF16))
        self.out = torch.empty(batch, HQ, HD, dtype=torch.float32, device=dev)
        self.nbytes = sum(c.nbytes + c.workspace.numel() for c in self.caches)
        self.len, self.bound = 0, 0  # host: tokens each sequence holds; the append bound of the calls to come

    def fill(self, ctx):
        """Layer 0 sequence by sequence from a prefilled one-sequence cache, then copied into every layer."""
        one = make_cache(self.kind, 1, self.capacity, 0, self.lib, self.dev)
        dst = self.caches[0].arrays()
        for b in range(self.B):
            k = torch.randn(1, HKV, ctx, HD, dtype=BF16, device=self.dev)
            v = torch.randn(1, HKV, ctx, HD, dtype=BF16, device=self.dev)
            one.prefill(k, v)
            for name, t in one.arrays().items():
                n = t.shape[0]
                dst[name][b * n:(b + 1) * n].copy_(t)
            del k, v
        one.close()
        for c in self.caches[1:]:
            for name, t in c.arrays().items():
                t.copy_(dst[name])
        for c in self.caches:
            c.seq_lens.fill_(ctx)
            c.set_lengths(ctx)
        self.len = ctx
        torch.cuda.synchronize()

    def context(self):
        return contextlib.nullcontext()

    def begin(self, n):
        """The next n appends (eager calls, or n replays of one captured graph) see lengths len .. len+n-1."""
        self.bound = self.len + n - 1
        if self.bound + 2 > self.capacity:
            raise RuntimeError(f"{self.kind}: {n} more tokens overflow the capacity {self.capacity}; raise SLACK")

    def end(self, n):
        self.len += n
        for c in self.caches:
            c.set_lengths(self.len)

    def resync(self):
        """Device lengths := the host count (after a step that failed half-way through its layers)."""
        torch.cuda.synchronize()
        for c in self.caches:
            c.seq_lens.fill_(self.len)

    def __call__(self, layer, q, k, v):
        c = self.caches[layer]
        if self.rk:
            q, k = q @ self.rk[layer], k @ self.rk[layer]
        c.append(k, v, max_seq_len=self.bound)
        c.decode(q, SCALE, out=self.out, max_seq_len=self.bound + 1)
        return self.out.view(self.B, HQ * HD).to(BF16)

    def decode_only(self, layer, q):
        """Decode alone (no append, no rotation in torch): the timing piece."""
        return self.caches[layer].decode(q, SCALE, out=self.out, max_seq_len=self.len)

    def close(self):
        for c in self.caches:
            c.close()
        self.caches = []


# ---------------------------------------------------------------------------------------------- timing
def free_memory():
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def capture(fn, attn, warm, replays):
    """fn() run `warm` times eagerly (side stream; compiles, autotunes, lazy inits), then captured as one graph whose
    quantized-cache bounds cover `replays` replays."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), attn.context():
        for _ in range(warm):
            attn.begin(1)
            fn()
            attn.end(1)
    torch.cuda.current_stream().wait_stream(s)
    free_memory()
    attn.begin(replays)
    g = torch.cuda.CUDAGraph()
    with attn.context(), torch.cuda.graph(g):
        fn()
    return g


def replay_ms(g, attn, warm, reps):
    """Median of `reps` single replays (after `warm`), each between two events; advances the caches' host lengths."""
    us = replay_us(g, reps, warmup=warm)
    attn.end(warm + reps)
    return us / 1e3


class _NoAttn:
    grows = False

    def context(self):
        return contextlib.nullcontext()

    def begin(self, n):
        pass

    def end(self, n):
        pass


def gemm_ms(W, batch, args, dev):
    """The 32 layers' four projections alone, and the lm head alone, each one graph at this batch (ms)."""
    x, a = torch.randn(batch, DIM, dtype=BF16, device=dev), torch.randn(batch, HQ * HD, dtype=BF16, device=dev)
    h = torch.randn(batch, FFN, dtype=BF16, device=dev)

    def layers():
        for lw in W.layers:
            F.linear(x, lw["wqkv"]), F.linear(a, lw["wo"]), F.linear(x, lw["w13"]), F.linear(h, lw["w2"])

    na = _NoAttn()
    res = {}
    for name, fn in (("gemm_layers_ms", layers), ("lm_head_ms", lambda: F.linear(x, W.wcls))):
        g = capture(fn, na, 2, 0)
        res[name] = replay_ms(g, na, args.warm, args.reps)
        del g
    free_memory()
    return res


def pick_backend(attn, q, dev):
    """Times every SDPA backend on the attention alone (graphs of bdg.GRAPH_CALLS calls over the layers' buffers)."""
    times = {}
    layers = len(attn.k)
    expanded = 2 * attn.B * HQ * (attn.L + 1) * HD * 2  # what the math backend's GQA repeat allocates
    for name, be in BACKENDS.items():
        if name == "math" and expanded * 4 > torch.cuda.mem_get_info()[0]:
            times[name] = None
            continue
        try:
            with sdpa_kernel(be):
                attn.sdpa(q, 0)
                torch.cuda.synchronize()
                times[name] = graph_us(lambda i: attn.sdpa(q, i % layers), 20, 10)
        except Exception as e:  # the backend does not take this shape
            times[name] = None
            print(f"    sdpa {name}: unavailable ({str(e).splitlines()[0][:100]})", flush=True)
        free_memory()
    ok = {k: v for k, v in times.items() if v is not None}
    attn.backend = min(ok, key=ok.get)
    return times


def run_config(W, kind, batch, ctx, args, lib, dev, glues, gemm_cache):
    """Builds the caches of one (kind, batch, context), captures the step per glue mode and times it."""
    t0 = time.time()
    row = {"kind": kind, "batch": batch, "ctx": ctx}
    if kind == "bf16":
        attn = Bf16Attention(batch, ctx, len(W.layers), dev)
    else:
        attn = OscarAttention(kind, batch, ctx + args.slack, len(W.layers), lib, dev)
        attn.fill(ctx)
    row["kv_bytes"] = attn.nbytes
    q = torch.randn(batch, HQ, HD, dtype=BF16, device=dev)
    kn, vn = torch.randn(batch, HKV, HD, dtype=BF16, device=dev), torch.randn(batch, HKV, HD, dtype=BF16, device=dev)
    if kind == "bf16":
        row["sdpa_us"] = pick_backend(attn, q, dev)
        row["backend"] = attn.backend
    # attention alone: the 32 layers' cache write + attention, one graph
    g = capture(lambda: [attn(layer, q, kn, vn) for layer in range(len(W.layers))], attn, 2, args.warm + args.reps)
    row["attn_ms"] = replay_ms(g, attn, args.warm, args.reps)
    del g
    # decode alone: the 32 layers' attention without the cache write (the lengths stay)
    na = _NoAttn()
    with attn.context():
        g = capture(lambda: [attn.decode_only(layer, q) for layer in range(len(W.layers))], na, 2, 0)
        row["decode_ms"] = replay_ms(g, na, args.warm, args.reps)
    del g
    if batch not in gemm_cache:
        gemm_cache[batch] = gemm_ms(W, batch, args, dev)
    row.update(gemm_cache[batch])
    tok = torch.randint(0, VOCAB, (batch,), device=dev)
    pos = torch.full((batch,), ctx, dtype=torch.int64, device=dev)
    row["step_ms"] = {}
    for glue in list(glues):
        if kind != "bf16":
            pos.fill_(attn.len)
        try:
            g = capture(lambda: decode_step(W, attn, glue, tok, pos), attn, 2, args.warm + args.reps)
        except Exception as e:  # torch.compile failing on this torch: drop that mode, keep the eager one
            if glue.mode != "compile":
                raise
            print(f"  glue 'compile' dropped: {str(e).splitlines()[0][:200]}", flush=True)
            glues.remove(glue)
            attn.resync()
            continue
        row["step_ms"][glue.mode] = replay_ms(g, attn, args.warm, args.reps)
        del g
        toks = tok.tolist()
        if not all(0 <= t < VOCAB for t in toks):
            raise RuntimeError(f"{kind} B={batch} L={ctx}: argmax gave tokens out of range: {toks[:8]}")
    row["final_len"] = attn.len if kind != "bf16" else ctx
    attn.close()
    del attn, q, kn, vn, tok, pos
    free_memory()
    row["wall_s"] = time.time() - t0
    return row


# ---------------------------------------------------------------------------------------------- sizes
def kv_read_bytes(kind, batch, ctx, layers):
    """Bytes of KV one step's attention reads (the formats' decode_read_bytes, mirrored in bench_decode_graph)."""
    if kind == "bf16":
        return layers * batch * HKV * (ctx + 1) * HD * 2 * 2
    per = bdg.omni_read_bytes(ctx, HD, BITS, HKV) if kind == "omni" else bdg.cov_read_bytes(ctx, HD, BITS)
    return layers * batch * HKV * per


def kv_alloc_bytes(kind, batch, ctx, capacity, layers, lib):
    """Device bytes of a kind's caches (all layers) including the decode workspaces the package allocates."""
    if kind == "bf16":
        return layers * 2 * batch * HKV * (ctx + 1) * HD * 2
    cache = (lib.omni_cache_bytes(batch, HKV, HD, BITS, capacity) if kind == "omni"
             else lib.cov_cache_bytes(batch, HKV, HD, BITS, capacity))
    return layers * (cache + lib.decode_workspace_bytes(batch, HQ, HKV, HD, capacity, 1))


def per_sequence_bytes(kind, ctx, layers, lib):
    """KV bytes one sequence holds at ctx tokens (all layers; the caches' own sizes, no workspace)."""
    if kind == "bf16":
        return layers * 2 * HKV * ctx * HD * 2
    return layers * (lib.omni_cache_bytes(1, HKV, HD, BITS, ctx) if kind == "omni" else lib.cov_cache_bytes(1, HKV, HD, BITS, ctx))


def parity(W, kind, ctx, args, lib, dev, glues, gemm_cache):
    """The largest batch that fits at ctx (estimated from the allocators' sizes and the free memory, then run; one
    batch less on OOM)."""
    free_memory()
    free = torch.cuda.mem_get_info()[0]
    reserve = int(args.reserve_gib * GiB)
    cap = ctx + args.slack
    b = 1
    while kv_alloc_bytes(kind, b + 1, ctx, cap, len(W.layers), lib) + reserve <= free:
        b += 1
    est = b
    while b >= 1:
        msg = None
        try:
            row = run_config(W, kind, b, ctx, args, lib, dev, glues, gemm_cache)
            row.update(free_before=free, estimated_batch=est)
            return row
        except (oscar_kv.OscarError, RuntimeError) as e:  # torch.OutOfMemoryError is a RuntimeError
            msg = str(e).splitlines()[0][:160]
            if "memory" not in msg.lower():
                raise
        print(f"  {kind} batch {b} at {ctx}: {msg}; one batch less", flush=True)
        free_memory()  # after the except block: the traceback no longer holds the caches
        b -= 1
    return None


# ---------------------------------------------------------------------------------------------- self-test
def selftest(lib, dev):
    """The package on the GPU: prefill + decode against fp32 SDPA over the same K/V; arrays() copied into a fresh cache
    decode bit-identically; append + decode captured in one graph (explicit bounds), replayed across oscar-cov's
    recent-window demotion and oscar-omni's block quantization, leave arrays and lengths bit-identical to the same
    calls run eagerly on a copy, with outputs within 1e-3."""
    B, L, R = 2, 1000, 40
    lines = []

    def check(ok, what):  # a failure is reported (FAIL in the output) and the benchmark goes on
        if not ok:
            lines.append("FAIL: " + what)
            print("selftest FAIL: " + what, flush=True)
    for kind in ("cov", "omni"):
        for bits, bound in ((2, 0.8), (4, 0.3)):
            a = make_cache(kind, B, L + 64, 0, lib, dev, bits)
            k = torch.randn(B, HKV, L, HD, dtype=BF16, device=dev)
            v = torch.randn(B, HKV, L, HD, dtype=BF16, device=dev)
            a.prefill(k, v)
            q = torch.randn(B, HQ, HD, dtype=BF16, device=dev)
            o = a.decode(q, SCALE)
            ref = F.scaled_dot_product_attention(q.unsqueeze(2).float(), k.float(), v.float(), scale=SCALE,
                                                 enable_gqa=True).squeeze(2)
            rel = float((o - ref).norm() / ref.norm())
            lines.append(f"{kind}@{bits} decode vs fp32 SDPA: rel err {rel:.3f} (bound {bound})")
            check(rel < bound, lines[-1])
            if bits != BITS:
                continue
            b = make_cache(kind, B, L + 64, 0, lib, dev, bits)
            copy_cache(a, b)
            check(torch.equal(b.decode(q, SCALE), o), f"{kind}: a copied cache decodes differently")
            kbuf, vbuf = torch.empty(B, HKV, HD, dtype=BF16, device=dev), torch.empty(B, HKV, HD, dtype=BF16, device=dev)
            og, oe = torch.empty(B, HQ, HD, device=dev), torch.empty(B, HQ, HD, device=dev)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                a.append(kbuf, vbuf, max_seq_len=L + R - 1)
                a.decode(q, SCALE, out=og, max_seq_len=L + R)
            worst = 0.0
            for i in range(R):
                kbuf.normal_()
                vbuf.normal_()
                g.replay()
                b.append(kbuf, vbuf)
                b.decode(q, SCALE, out=oe)
                worst = max(worst, float((og - oe).norm() / oe.norm()))
            torch.cuda.synchronize()
            check(torch.equal(a.seq_lens, b.seq_lens) and int(a.seq_lens[0]) == L + R, f"{kind}: lengths differ")
            bad = [n for n, t in a.arrays().items() if not torch.equal(t, b.arrays()[n])]
            check(not bad, f"{kind}: graph-replayed appends differ from eager ones in {bad}")
            check(worst < 1e-3, f"{kind}: graph decode differs from eager by {worst:.2e}")
            lines.append(f"{kind}@{bits} {R} appends + decodes as graph replays: arrays and lengths bit-identical to "
                         f"eager, outputs within {worst:.1e} (bounds {L + R - 1}/{L + R} vs exact)")
            del g
            a.close()
            b.close()
    free_memory()
    return lines


# ---------------------------------------------------------------------------------------------- report
def markdown(res):
    out = [f"device: {res['device']}; torch {res['torch']}; copy (read + write) {res['copy_tbps']:.3f} TB/s; "
           f"weights {res['weights_bytes'] / 1e9:.2f} GB allocated, {res['weights_read_bytes'] / 1e9:.2f} GB read per "
           f"step (all but the embedding table) = {res['weights_bound_ms']:.2f} ms at the copy rate; "
           f"{res['reps']} timed replays (median) after {res['warm']}; card memory {res['card_mib']} MiB"
           f"{' (ballast on a ' + str(res['card_total_mib']) + ' MiB card)' if res['card_mib'] != res['card_total_mib'] else ''}\n"]
    glues = [g for g in res["glues"] if all(g in r["step_ms"] for r in res["a"] + res["b"])]
    for part, title in (("a", "(a) batch 1"), ("b", "(b) memory parity")):
        rows = res[part]
        if not rows:
            continue
        out.append(f"\n#### {title}: ms per step, one CUDA graph per (kind, batch, context)\n")
        cols = ["ctx", "kind", "batch", "KV GB"] + [f"step ms ({g})" for g in glues] + \
               [f"tokens/s ({g})" for g in glues] + [f"x BF16 ({g})" for g in glues] + \
               ["bound ms", "bound x BF16", "attention alone ms", "decode alone ms", "GEMMs ms (32 layers)", "lm head ms",
                f"other ms ({glues[0]})", "SDPA backend"]
        out.append("| " + " | ".join(cols) + " |")
        out.append("|" + "---|" * len(cols))
        for r in rows:
            base = next((x for x in rows if x["kind"] == "bf16" and x["ctx"] == r["ctx"]), None)
            cells = [str(r["ctx"]), NAMES[r["kind"]], str(r["batch"]), f"{r['kv_bytes'] / 1e9:.2f}"]
            cells += [f"{r['step_ms'][g]:.2f}" for g in glues]
            cells += [f"{r['tokens_per_s'][g]:.0f}" for g in glues]
            cells += [f"{base['step_ms'][g] / r['step_ms'][g] * (r['batch'] / base['batch']):.2f}x" if base else "-"
                      for g in glues]
            cells += [f"{r['bound_ms']:.2f}", f"{base['bound_ms'] / r['bound_ms'] * (r['batch'] / base['batch']):.2f}x"
                      if base else "-", f"{r['attn_ms']:.2f}", f"{r['decode_ms']:.2f}", f"{r['gemm_layers_ms']:.2f}",
                      f"{r['lm_head_ms']:.2f}",
                      f"{r['step_ms'][glues[0]] - r['attn_ms'] - r['gemm_layers_ms'] - r['lm_head_ms']:.2f}",
                      r.get("backend") or "-"]
            out.append("| " + " | ".join(cells) + " |")
    out.append("\n#### Composed from this run's pieces (GEMMs of 32 layers + attention alone; no lm head, no glue)\n")
    quant = [k for k in KINDS if k != "bf16"]
    out.append("| ctx | batch | BF16 ms | " + " | ".join(f"{NAMES[k]} ms | x" for k in quant) + " |")
    out.append("|---|---|---|" + "---|---|" * len(quant))
    for ctx in sorted({r["ctx"] for r in res["a"]}):
        rs = {r["kind"]: r for r in res["a"] if r["ctx"] == ctx}
        if "bf16" in rs:
            c = {k: r["gemm_layers_ms"] + r["attn_ms"] for k, r in rs.items()}
            cells = [f"{c[k]:.2f} | {c['bf16'] / c[k]:.2f}x" if k in c else "- | -" for k in quant]
            out.append(f"| {ctx} | 1 | {c['bf16']:.2f} | " + " | ".join(cells) + " |")
    out.append("\n#### (c) KV bytes per sequence (32 layers; the allocators' sizes)\n")
    out.append("| kind | " + " | ".join(f"{c} tokens" for c in res["c_ctx"]) + " | x smaller than BF16 |")
    out.append("|---|" + "---|" * len(res["c_ctx"]) + "---|")
    for kind in ("bf16", "cov", "omni"):
        v = res["c"][kind]
        ratio = ", ".join(f"{res['c']['bf16'][str(c)] / v[str(c)]:.2f}x" for c in res["c_ctx"])
        out.append(f"| {NAMES[kind]} | " + " | ".join(f"{v[str(c)] / 1e9:.3f} GB" for c in res["c_ctx"]) + f" | {ratio} |")
    if res.get("selftest"):
        out.append("\nself-test: " + "; ".join(res["selftest"]))
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=None, help="liboscar_kernels.so (default: OSCAR_KERNELS_LIB, else build/kernels/)")
    ap.add_argument("--ctx", type=int, nargs="+", default=[32768, 102400, 131072], help="(a) contexts at batch 1")
    ap.add_argument("--parity-ctx", type=int, default=102400, help="(b) context of the memory-parity runs (0: none)")
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    ap.add_argument("--glue", nargs="+", default=["eager"], choices=["eager", "compile"])
    ap.add_argument("--layers", type=int, default=LAYERS, help="fewer for a quick check (not for the tables)")
    ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--slack", type=int, default=0, help="quantized capacity beyond ctx (default: what the replays need)")
    ap.add_argument("--reserve-gib", type=float, default=1.0, help="(b) memory kept for activations and graph pools")
    ap.add_argument("--card-mib", type=int, default=0,
                    help="(b) emulate a card of this many MiB (a ballast allocation takes the rest), e.g. 81559 = H100 80GB")
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--markdown", default="")
    args = ap.parse_args()
    runs = 2 + args.warm + args.reps
    args.slack = args.slack or (1 + len(args.glue)) * runs + 64
    lib = oscar_kv.load(args.lib)
    dev = torch.device("cuda")
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "warm": args.warm, "reps": args.reps,
           "glues": args.glue, "layers": args.layers, "slack": args.slack, "a": [], "b": []}
    t0 = time.time()
    if args.selftest:
        res["selftest"] = selftest(lib, dev)
        print("\n".join(res["selftest"]), flush=True)
    res["copy_tbps"] = copy_tbps()
    total = torch.cuda.get_device_properties(0).total_memory
    ballast = None
    if args.card_mib and total > args.card_mib * 2**20:
        ballast = torch.empty(total - args.card_mib * 2**20, dtype=torch.uint8, device=dev)
        print(f"ballast {ballast.numel() / GiB:.2f} GiB: the card holds {args.card_mib} MiB for this run", flush=True)
    res["card_total_mib"], res["card_mib"] = total // 2**20, args.card_mib if ballast is not None else total // 2**20
    W = Weights(args.layers, max(args.ctx + [args.parity_ctx]) + args.slack + 8, dev)
    res["weights_bytes"], res["weights_read_bytes"] = W.bytes_total(), W.bytes_read(1)
    res["weights_bound_ms"] = res["weights_read_bytes"] / (res["copy_tbps"] * 1e12) * 1e3
    print(f"copy {res['copy_tbps']:.3f} TB/s; weights {W.bytes_total() / 1e9:.2f} GB, read per step "
          f"{res['weights_read_bytes'] / 1e9:.2f} GB = {res['weights_bound_ms']:.2f} ms ({time.time() - t0:.0f} s)", flush=True)
    glues = [Glue(m) for m in args.glue]
    gemm_cache = {}

    def finish(r):
        r["tokens_per_s"] = {g: r["batch"] / (ms * 1e-3) for g, ms in r["step_ms"].items()}
        r["kv_read_bytes"] = kv_read_bytes(r["kind"], r["batch"], r["ctx"], args.layers)
        r["bound_ms"] = (W.bytes_read(r["batch"]) + r["kv_read_bytes"]) / (res["copy_tbps"] * 1e12) * 1e3
        print(f"  {r['kind']} B={r['batch']} L={r['ctx']}: step {r['step_ms']} ms, attention {r['attn_ms']:.2f}, "
              f"GEMMs {r['gemm_layers_ms']:.2f} + head {r['lm_head_ms']:.2f}, bound {r['bound_ms']:.2f}, backend "
              f"{r.get('backend')} ({r['wall_s']:.0f} s; {time.time() - t0:.0f} s)", flush=True)
        return r

    res["c_ctx"] = sorted(set(args.ctx + ([args.parity_ctx] if args.parity_ctx else [])))
    res["c"] = {k: {str(c): per_sequence_bytes(k, c, LAYERS, lib) for c in res["c_ctx"]} for k in ("bf16", "cov", "omni")}

    def save():  # after every configuration, so that a run cut short keeps what it measured
        res["wall_s"] = time.time() - t0
        if args.markdown:
            Path(args.markdown).write_text(markdown(res))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)

    for ctx in args.ctx:
        for kind in args.kinds:
            res["a"].append(finish(run_config(W, kind, 1, ctx, args, lib, dev, glues, gemm_cache)))
            save()
    if args.parity_ctx:
        for kind in args.kinds:
            r = parity(W, kind, args.parity_ctx, args, lib, dev, glues, gemm_cache)
            if r:
                res["b"].append(finish(r))
            save()
    print(markdown(res))


if __name__ == "__main__":
    main()
