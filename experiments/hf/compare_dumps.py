#!/usr/bin/env python3
"""compare_dumps.py A.h5 B.h5 [--tol X]: two dumps of the same model and passage (e.g. hf_dump.py with
--chunk 64 and --chunk 0) hold the same tensors: per dataset kind (q, k, v, q_pre, k_pre) the worst relative
Frobenius difference over layers, the per-layer attributes and sinks equal, and the losses' difference.
Prints one line per kind; exit 1 when a difference exceeds --tol (default 1e-4) or the layouts differ.
"""
import argparse, sys
import h5py
import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--per-layer", action="store_true", help="also print each layer's worst difference")
    args = ap.parse_args()
    bad = []
    with h5py.File(args.a, "r") as fa, h5py.File(args.b, "r") as fb:
        for key in ("n_layers", "n_heads", "n_kv_heads", "head_dim", "token_count", "has_pre_rope", "architecture"):
            if fa.attrs[key] != fb.attrs[key]:
                bad.append(f"root attribute {key}: {fa.attrs[key]} vs {fb.attrs[key]}")
        if not np.array_equal(fa["token_ids"][...], fb["token_ids"][...]):
            bad.append("token_ids differ")
        worst = {}
        for l in range(int(fa.attrs["n_layers"])):
            ga, gb = fa[f"layer_{l:03d}"], fb[f"layer_{l:03d}"]
            for key in ga.attrs:
                if ga.attrs[key] != gb.attrs[key]:
                    bad.append(f"layer {l} attribute {key}: {ga.attrs[key]} vs {gb.attrs[key]}")
            layer_worst = 0.0
            for name in ga:
                x, y = ga[name][...].astype(np.float64), gb[name][...].astype(np.float64)
                d = np.linalg.norm(x - y) / max(np.linalg.norm(x), 1e-300)
                worst[name] = max(worst.get(name, 0.0), d)
                layer_worst = max(layer_worst, d)
            if args.per_layer:
                print(f"layer {l}: worst rel diff {layer_worst:.2e}")
        for name, d in sorted(worst.items()):
            print(f"{name}: worst rel diff {d:.2e}")
            if d > args.tol:
                bad.append(f"{name} differs by {d:.2e} > {args.tol:g}")
        la, lb = float(fa.attrs["mean_next_token_loss"]), float(fb.attrs["mean_next_token_loss"])
        print(f"loss: {la:.6f} vs {lb:.6f} (diff {abs(la - lb):.2e})")
        if abs(la - lb) > args.tol * max(1.0, abs(la)):
            bad.append(f"losses differ: {la} vs {lb}")
    for b in bad:
        print(f"compare_dumps: {args.a} vs {args.b}: {b}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
