#!/usr/bin/env python3
"""authors_check.py: the recipes' attention error at 2 bits computed by the method authors' own quantizer code,
beside oscar-sweep's numbers for the presets that follow it. Not run in CI (it needs PyTorch and the authors'
repositories); anyone can rerun it on any dump.

    python3 experiments/authors_check.py --dump REVELATION.h5 --calib GENESIS.h5 \\
        --oscar CHECKOUT --oscar-kv-quant CHECKOUT --kivi CHECKOUT [--sweep SWEEP_OUT] [--queries 256] [--out FILE.md]

The authors' functions are imported, unmodified, from checkouts whose paths are given (nothing of theirs is
copied here):
  --oscar           FutureMLS-Lab/OSCAR (checked at 473ff3f): the rotation fit rotation/compute_kv_rotation.py
                    (compute_qqt, compute_sst, compose_rotation 'r_h_pbr', build_hadamard) on the calibration dump,
                    and the torch oracles its INT2 kernel tests compare against
                    (sglang-research/test/registered/kernels/test_oscar_rotation_clip_int2.py: _ref_threshold,
                    _ref_groupwise_int2_quant_dequant), with OSCAR's BF16 sink (64) and recent (256) windows;
  --oscar-kv-quant  ZunhaiSu/OScaR-KV-Quant (d2109f5): kv_cache_compression/quarot_utils.py, QuaRotKVCacheQuantizer
                    (Hadamard, norm factoring, K per channel / V per token in groups of 32, residual 128) and its
                    quantize_prefill;
  --kivi            jy-yuan/KIVI (876b4d2): quant/new_pack.py (quant_and_pack_kcache / _vcache and their
                    unpack_and_dequant) with the prefill split of models/llama_kivi.py (keys: whole blocks of 128;
                    values: all but the last 128).
Each takes the dump's keys and values (float16 values, computed in float32; --dtype float16 computes as a float16 model would).

The metrics are oscar-sweep's (lib/src/08_metrics/fidelity.cpp), re-implemented in float64: the dump's last
--queries positions attend causally (the layer's scaling and sliding window) to the full-precision and to the
quantized cache; the mean over layers, KV heads, query heads and queries of ||o - o^|| / ||o|| and of
KL(p || p^). With --sweep DIR (an oscar-sweep output folder over the same dump) the table puts oscar-sweep's
oscar-cov@2, oscar-omni@2 and kivi@2 beside the authors' numbers with their difference in percent.
"""
import argparse
import importlib.util
import math
import os
import sys
import tempfile
import warnings


def die(msg):
    print(f"authors_check: error: {msg}", file=sys.stderr)
    sys.exit(1)


try:
    import h5py
    import numpy as np
    import torch
except ImportError as e:  # a clear line instead of a traceback
    die(f"{e.name} is missing; pip install torch numpy h5py (this check runs the authors' PyTorch code)")


def load_module(root, rel, name):
    path = os.path.join(root, rel)
    if not os.path.isfile(path):
        die(f"{path}: not found; give the root of a checkout of the authors' repository")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(path))  # their sibling imports
    try:
        spec.loader.exec_module(mod)
    except ImportError as e:
        die(f"{path}: cannot import it ({e}); install what it imports (e.g. pip install triton for KIVI's new_pack.py)")
    finally:
        sys.path.pop(0)
    return mod


class Dump:
    """A dump (format v2 or v1) read layer by layer: q [Hq, T, d], k and v [Hkv, T, d] as float64, and the
    layer's attention (scaling, sliding window; soft-capped or sink layers are refused)."""

    def __init__(self, path):
        try:
            self.f = h5py.File(path, "r")
        except OSError as e:
            die(f"{path}: cannot open it as HDF5 ({e}); give an oscar-dump file")
        self.path = path
        a = self.f.attrs
        self.layers = sorted(k for k in self.f.keys() if k.startswith("layer_"))
        if not self.layers:
            die(f"{path}: no layer_NNN groups; give an oscar-dump file")
        self.head_dim = int(a["head_dim"])

    def layer(self, name):
        g = self.f[name]
        at = g.attrs
        scaling = float(at["scaling"]) if "scaling" in at else 1.0 / math.sqrt(self.head_dim)
        window = int(at["sliding_window"]) if "sliding_window" in at else 0
        if "softcap" in at and float(at["softcap"]) != 0.0:
            die(f"{self.path}: {name} soft-caps its logits; this check covers plain softmax attention")
        if "sinks" in g:
            die(f"{self.path}: {name} has sink logits; this check covers plain softmax attention")
        return (np.asarray(g["q"], dtype=np.float64), np.asarray(g["k"], dtype=np.float64),
                np.asarray(g["v"], dtype=np.float64), scaling, window)


def metrics(q, k, v, kh, vh, scaling, window, n_queries):
    """Mean ||o - o^|| / ||o|| and KL(p || p^) over KV heads, their query heads and the last n_queries positions."""
    hq, T, _ = q.shape
    hkv = k.shape[0]
    group = hq // hkv
    N = min(n_queries, T)
    pos = np.arange(T - N, T)
    keys = np.arange(T)
    visible = keys[None, :] <= pos[:, None]
    if window > 0:
        visible &= pos[:, None] - keys[None, :] < window
    err, kl = [], []
    for h in range(hkv):
        for g in range(group):
            Q = q[h * group + g, T - N:]
            def attend(K, V):
                logit = np.where(visible, scaling * (Q @ K.T), -np.inf)
                m = logit.max(axis=1, keepdims=True)
                p = np.exp(logit - m)
                p /= p.sum(axis=1, keepdims=True)
                return p, p @ V
            p, o = attend(k[h], v[h])
            ph, oh = attend(kh[h], vh[h])
            on = np.linalg.norm(o, axis=1)
            ok = on > 0
            err.append(np.linalg.norm(o - oh, axis=1)[ok] / on[ok])
            with np.errstate(divide="ignore", invalid="ignore"):
                terms = np.where(p > 0, p * (np.log(p) - np.log(np.maximum(ph, 1e-300))), 0.0)
            kl.append(np.maximum(terms.sum(axis=1), 0.0))
    return float(np.concatenate(err).mean()), float(np.concatenate(kl).mean())


def bf16(x):
    return torch.from_numpy(x).to(torch.bfloat16).to(torch.float64).numpy()


# ---- the authors' recipes, one layer at a time (k, v as the model stored them; the output in the original space) ----

def oscar_rotations(mod, calib, layer, workdir):
    """OSCAR's R_K, R_V of one layer from the calibration dump: its compute_qqt / compute_sst on chunk files in its
    own layout (layer_dir/{q,k,v}/1.pt, tokens x heads x head_dim), composed R U H P ('r_h_pbr', its validated default)."""
    q, k, v, _, _ = calib.layer(layer)
    d = calib.head_dim
    ldir = os.path.join(workdir, layer)
    for name, x in (("q", q), ("k", k), ("v", v)):
        os.makedirs(os.path.join(ldir, name), exist_ok=True)
        torch.save(torch.from_numpy(np.ascontiguousarray(x.transpose(1, 0, 2))).float(), os.path.join(ldir, name, "1.pt"))
    from pathlib import Path
    H = mod.build_hadamard(d)
    uq, eq = mod.compute_qqt(Path(ldir), 1, d)
    us, es = mod.compute_sst(Path(ldir), 1, d)
    return (mod.compose_rotation(uq, eq, H, "r_h_pbr").numpy(), mod.compose_rotation(us, es, H, "r_h_pbr").numpy())


def oscar_cov(oracle, rk, rv, k, v, args):
    """OSCAR at 2 bits: rotate, its per-row quantile clamp (_ref_threshold) and its per-row INT2 quantizer
    (_ref_groupwise_int2_quant_dequant, one group per head), un-rotate; BF16 sink 64 and recent 256."""
    T = k.shape[1]
    lo, hi = min(T, 64), max(min(T, 64), T - 256)
    def one(x, r, clip):
        out = bf16(x)
        if hi > lo:
            xr = torch.from_numpy(x[:, lo:hi] @ r).float()          # [Hkv, n, d]
            xr = xr.permute(1, 0, 2).contiguous()                   # [n, Hkv, d], the oracle's (N, H, D)
            thr = oracle._ref_threshold(xr, clip)[..., None]
            xr = torch.minimum(torch.maximum(xr, -thr), thr)
            deq = oracle._ref_groupwise_int2_quant_dequant(xr, 1).permute(1, 0, 2).double().numpy()
            out[:, lo:hi] = deq @ r.T
        return out
    return one(k, rk, args.clip_k), one(v, rv, args.clip_v)


def oscar_omni(mod, k, v, args):
    """OScaR at 2 bits: QuaRotKVCacheQuantizer as its OScaR configuration sets it (Hadamard, norm factoring,
    K per channel / V per token in groups of 32, residual 128, block flush), prefill. Its keys come back in the
    Hadamard space (its queries are rotated alike) and are taken back by H (symmetric, orthogonal); its values come
    back in the original space."""
    dt = getattr(torch, args.dtype)
    quant = mod.QuaRotKVCacheQuantizer(k_bits=2, v_bits=2, k_groupsize=32, v_groupsize=32, residual_length=128,
                                       k_norm_factoring=True, use_hadamard=True)
    K, V = (torch.from_numpy(x[None]).to(dt) for x in (k, v))
    Q = torch.zeros(1, 1, 1, k.shape[2], dtype=dt)  # its process_kv rotates a query with the keys; none is needed here
    _, Kh, V = quant.process_kv(Q, K, V)
    Kq, Vq = quant.quantize_prefill(Kh, V)
    H = mod.hadamard_matrix(k.shape[2], dtype=torch.float64).numpy()
    return Kq[0].double().numpy() @ H, Vq[0].double().numpy()


def kivi(mod, k, v, args):
    """KIVI at 2 bits: its prefill split (keys: the whole 128-token blocks; values: all but the newest 128),
    quant_and_pack_kcache / _vcache with group 32 and their unpack_and_dequant."""
    dt = getattr(torch, args.dtype)
    T = k.shape[1]
    K, V = (torch.from_numpy(x[None]).to(dt) for x in (k, v))
    kh, vh = K.clone(), V.clone()
    nk = T - T % 128
    if nk > 0:
        code, scale, mn = mod.quant_and_pack_kcache(K[:, :, :nk].contiguous(), 32, 2)
        kh[:, :, :nk] = mod.unpack_and_dequant_kcache(code, scale, mn, 32, 2).to(dt)
    nv = T - 128
    if nv > 0:
        code, scale, mn = mod.quant_and_pack_vcache(V[:, :, :nv].contiguous(), 32, 2)
        vh[:, :, :nv] = mod.unpack_and_dequant_vcache(code, scale, mn, 32, 2).to(dt)
    return kh[0].double().numpy(), vh[0].double().numpy()


def sweep_numbers(folder):
    path = os.path.join(folder, "summary.csv")
    if not os.path.isfile(path):
        die(f"{path}: not found; give an oscar-sweep output folder (--sweep) over the same dump")
    import csv
    with open(path, newline="") as f:
        return {r["recipe"]: (float(r["out_rel_err"]), float(r["kl"])) for r in csv.DictReader(f)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dump", required=True, help="the evaluated dump (oscar-dump, hf_dump.py)")
    ap.add_argument("--calib", required=True, help="a calibration dump of the same model on other text (OSCAR's rotation fit)")
    ap.add_argument("--oscar", required=True, help="checkout of FutureMLS-Lab/OSCAR")
    ap.add_argument("--oscar-kv-quant", required=True, help="checkout of ZunhaiSu/OScaR-KV-Quant")
    ap.add_argument("--kivi", required=True, help="checkout of jy-yuan/KIVI")
    ap.add_argument("--sweep", help="an oscar-sweep output folder over the same dump, to compare with")
    ap.add_argument("--queries", type=int, default=256, help="last positions used as queries (default 256, as oscar-sweep)")
    ap.add_argument("--dtype", default="float32", choices=["float16", "bfloat16", "float32"],
                    help="dtype the KIVI and OScaR code quantize in (default float32; the dump's float16 values either way)")
    ap.add_argument("--clip-k", type=float, default=0.96)
    ap.add_argument("--clip-v", type=float, default=0.92)
    ap.add_argument("--layers", type=int, default=0, help="only the first N layers (0: all)")
    ap.add_argument("--out", help="also write the table to this Markdown file")
    args = ap.parse_args()
    if args.queries < 1:
        die(f"--queries {args.queries}: give a positive count")

    oscar_fit = load_module(args.oscar, "rotation/compute_kv_rotation.py", "oscar_fit")
    oscar_oracle = load_module(args.oscar, "sglang-research/test/registered/kernels/test_oscar_rotation_clip_int2.py", "oscar_oracle")
    omni_mod = load_module(args.oscar_kv_quant, "kv_cache_compression/quarot_utils.py", "oscar_quarot_utils")
    warnings.filterwarnings("ignore", category=UserWarning)  # torch's deprecation notes on KIVI's indexing
    kivi_mod = load_module(args.kivi, "quant/new_pack.py", "kivi_new_pack")
    dump, calib = Dump(args.dump), Dump(args.calib)
    if calib.head_dim != dump.head_dim or len(calib.layers) != len(dump.layers):
        die(f"{args.calib}: {len(calib.layers)} layers of head_dim {calib.head_dim}, the dump {len(dump.layers)} of "
            f"{dump.head_dim}; calibrate on the same model")
    layers = dump.layers[: args.layers] if args.layers > 0 else dump.layers
    acc = {n: [[], []] for n in ("oscar-cov@2", "oscar-omni@2", "kivi@2")}
    with tempfile.TemporaryDirectory(prefix="authors-check-") as work:
        for i, name in enumerate(layers):
            q, k, v, scaling, window = dump.layer(name)
            rk, rv = oscar_rotations(oscar_fit, calib, name, work)
            kh, vh = oscar_cov(oscar_oracle, rk, rv, k, v, args)
            res = {"oscar-cov@2": metrics(q, k, v, kh, vh, scaling, window, args.queries)}
            ko, vo = oscar_omni(omni_mod, k, v, args)
            res["oscar-omni@2"] = metrics(q, k, v, ko, vo, scaling, window, args.queries)
            kk, vk = kivi(kivi_mod, k, v, args)
            res["kivi@2"] = metrics(q, k, v, kk, vk, scaling, window, args.queries)
            for n, (e, kl) in res.items():
                acc[n][0].append(e)
                acc[n][1].append(kl)
            if sys.stderr.isatty():
                print(f"\rlayer {i + 1} of {len(layers)}: " + "  ".join(f"{n} {e:.4f}" for n, (e, _) in res.items()), end="",
                      file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    ours = sweep_numbers(args.sweep) if args.sweep else {}
    lines = [f"Attention-output relative error (KL in brackets), mean over {len(layers)} layers of `{os.path.basename(args.dump)}`, "
             f"last {args.queries} queries:", "",
             "| preset | oscar-sweep | authors' code | difference |", "|---|---|---|---|"]
    worst = 0.0
    for n, (e, kl) in acc.items():
        a_err, a_kl = float(np.mean(e)), float(np.mean(kl))
        if n in ours:
            o_err, o_kl = ours[n]
            diff = 100.0 * (o_err - a_err) / a_err
            worst = max(worst, abs(diff))
            lines.append(f"| `{n}` | {o_err:.4f} (KL {o_kl:.3f}) | {a_err:.4f} (KL {a_kl:.3f}) | {diff:+.2f}% |")
        else:
            lines.append(f"| `{n}` | - | {a_err:.4f} (KL {a_kl:.3f}) | - |")
    text = "\n".join(lines) + "\n"
    if ours:
        text += f"\nLargest difference: {worst:.2f}% of the authors' number.\n"
    print(text, end="")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        die("interrupted")
