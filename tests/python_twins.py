"""python_twins.py: test oracles for the Python package: the two cache formats read back from their device arrays
(codes unpacked, (scale, zero) applied, oscar-omni's key norms multiplied back) and an fp32 decode over them.

Written from the format units' comments (kernels/include/oscar/cov_format.h, omni_format.h, quant_rules.h), not
from the kernels, so a kernel that stores or reads a token wrongly disagrees with it. Needs torch.
"""
import math

import torch


def unpack(codes, bits):
    """uint8 [..., n * bits / 8] little-endian packed codes -> int64 [..., n] (channel i at bit i * bits)."""
    c = codes.to(torch.int64)
    per = 8 // bits
    parts = [(c >> (bits * j)) & ((1 << bits) - 1) for j in range(per)]
    return torch.stack(parts, dim=-1).flatten(-2)


def hadamard(d, device):
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return (h / math.sqrt(d)).to(device=device, dtype=torch.float32)


def dequant_cov(kv):
    """(K, V) float32 [B][Hkv][L][D] in the rotated space, L = max length, and the host lengths."""
    a, s = kv.arrays(), kv.spec
    B, H, D, bits = s.batch, s.num_kv_heads, s.head_dim, s.bits
    lens = kv.seq_lens.cpu().tolist()
    L = max(lens) if lens else 0
    S, W = kv._c.sink, kv._c.recent
    out = []
    for t in ("k", "v"):
        x = torch.zeros(B * H, L, D, device=kv.device)
        sink, rec = a[f"{t}_sink"].float(), a[f"{t}_recent"].float()
        body = None
        if f"{t}_codes" in a:
            p = a[f"{t}_params"].float()
            body = unpack(a[f"{t}_codes"], bits).float() * p[..., 0:1] + p[..., 1:2]
        for b in range(B):
            n = lens[b]
            nb = max(0, n - S - W)
            rows = slice(b * H, (b + 1) * H)
            s0 = min(n, S)
            x[rows, :s0] = sink[rows, :s0]
            if nb:
                x[rows, S:S + nb] = body[rows, :nb]
            if n > S + nb:
                slots = (torch.arange(S + nb, n, device=kv.device) - S) % W
                x[rows, S + nb:n] = rec[rows][:, slots]
        out.append(x.view(B, H, L, D))
    return out[0], out[1], lens


def dequant_omni(kv):
    a, s = kv.arrays(), kv.spec
    B, H, D, bits = s.batch, s.num_kv_heads, s.head_dim, s.bits
    lens = kv.seq_lens.cpu().tolist()
    L = max(lens) if lens else 0
    K = torch.zeros(B * H, L, D, device=kv.device)
    V = torch.zeros(B * H, L, D, device=kv.device)
    kres, vres = a["k_res"].float(), a["v_res"].float()
    if "k_codes" in a:
        kp, vp = a["k_params"].float(), a["v_params"].float()  # [BH][nb/32][D][2], [BH][nb][D/32][2]
        kc, vc = unpack(a["k_codes"], bits).float(), unpack(a["v_codes"], bits).float()
        nbmax = kc.shape[1]
        ks = kp[..., 0].repeat_interleave(32, dim=1)[:, :nbmax]
        kz = kp[..., 1].repeat_interleave(32, dim=1)[:, :nbmax]
        kbody = kc * ks + kz
        norms = a["k_norms"].float()  # [B][nb]
        norms = torch.where(norms > 0, norms, torch.ones_like(norms)).repeat_interleave(H, dim=0)
        kbody = kbody * norms[..., None]
        vs = vp[..., 0].repeat_interleave(32, dim=2)
        vz = vp[..., 1].repeat_interleave(32, dim=2)
        vbody = vc * vs + vz
    for b in range(B):
        n = lens[b]
        nb = n // 128 * 128
        rows = slice(b * H, (b + 1) * H)
        if nb:
            K[rows, :nb], V[rows, :nb] = kbody[rows, :nb], vbody[rows, :nb]
        if n > nb:
            K[rows, nb:n], V[rows, nb:n] = kres[rows, :n - nb], vres[rows, :n - nb]
    return K.view(B, H, L, D), V.view(B, H, L, D), lens


def rotations(kv):
    """(R_K, R_V) float32 [Hkv][D][D] of the cache's kernel rotation."""
    s, r = kv.spec, kv.rotation
    D, H = s.head_dim, s.num_kv_heads
    if r.kind == "none":
        eye = torch.eye(D, device=kv.device)
        return eye.expand(H, D, D), eye.expand(H, D, D)
    if r.kind == "hadamard":
        h = hadamard(D, kv.device)
        return h.expand(H, D, D), h.expand(H, D, D)
    rk, rv = kv._rot_keep
    return rk.expand(H, D, D), rv.expand(H, D, D)


def _scores(kv, q, scale):
    """[(b, h, fp32 scores of query head h of sequence b over its n tokens, V rows, R_V)], as the kernels see them."""
    K, V, lens = (dequant_omni if kv.spec.fmt == "oscar-omni" else dequant_cov)(kv)
    B, Hq, D = q.shape
    g = Hq // kv.spec.num_kv_heads
    rk, rv = rotations(kv)
    qf = q.float()
    for b in range(B):
        n = lens[b]
        for h in range(Hq):
            kvh = h // g
            qr = (qf[b, h] @ rk[kvh]).to(torch.bfloat16).float()  # the kernels rotate the query into bf16
            yield b, h, scale * (K[b, kvh, :n] @ qr), V[b, kvh, :n], rv[kvh]


def logsumexp(kv, q, scale):
    """float32 [B][Hq]: log sum_j e^{s_j} of the plain scores (no modifiers); -inf for an empty sequence."""
    out = torch.full(q.shape[:2], float("-inf"), device=kv.device)
    for b, h, s, _, _ in _scores(kv, q, scale):
        if s.numel():
            out[b, h] = torch.logsumexp(s, 0)
    return out


def reference_decode(kv, q, scale):
    """fp32 attention of q (bf16 [B][Hq][D], unrotated) over the dequantized cache: o = softmax(scale q' K'^T) V' R_V^T,
    with the cache's logit modifiers (kv.softcap: s -> c tanh(s / c); kv.sinks: e^sink in each head's denominator)."""
    out = torch.zeros(q.shape, device=kv.device)
    for b, h, s, v, rv in _scores(kv, q, scale):
        n = s.shape[0]
        if n == 0:
            continue
        if kv.softcap > 0:
            s = kv.softcap * torch.tanh(s / kv.softcap)
        if kv.sinks is not None:
            s = torch.cat([s, kv.sinks[h:h + 1]])
        w = torch.softmax(s, dim=0)[:n]
        out[b, h] = (w @ v) @ rv.T
    return out
