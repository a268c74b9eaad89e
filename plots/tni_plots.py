#!/usr/bin/env python3
"""tni_plots.py DIR [MODEL]: draws oscar-analyze's plots from DIR/token_norms.csv and DIR/channel_absmax.csv.
token_norms.png: per-token L2 norm vs position, one panel per layer (K post-RoPE and V, every KV head).
channel_absmax.png: heat map of per-channel absmax (rows: layer/head, columns: channel) for K and V."""
import csv, sys, os
from collections import defaultdict
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

def load(path, value):
    data = defaultdict(list)
    with open(path) as f:
        for r in csv.DictReader(f):
            data[(int(r["layer"]), int(r["kv_head"]), r["tensor"])].append(float(r[value]))
    return data

def main():
    d = sys.argv[1]
    model = sys.argv[2] if len(sys.argv) > 2 else ""
    norms = load(os.path.join(d, "token_norms.csv"), "norm")
    chans = load(os.path.join(d, "channel_absmax.csv"), "absmax")
    layers = sorted({k[0] for k in norms})
    heads = sorted({k[1] for k in norms})
    cols = min(3, len(layers)); rows = (len(layers) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.2 * rows), squeeze=False, sharex=True)
    for i, l in enumerate(layers):
        ax = axes[i // cols][i % cols]
        for h in heads:
            for t, style in (("k", "-"), ("v", ":")):
                y = norms.get((l, h, t))
                if y:
                    ax.plot(np.arange(len(y)), y, style, lw=0.7, label=f"{t.upper()} head {h}")
        ax.set_yscale("log"); ax.set_title(f"layer {l}"); ax.set_xlabel("position"); ax.set_ylabel("L2 norm")
        if i == 0: ax.legend(fontsize=6)
    for j in range(len(layers), rows * cols): axes[j // cols][j % cols].axis("off")
    fig.suptitle(f"{model}: per-token L2 norms (K after RoPE solid, V dotted)")
    fig.tight_layout(); fig.savefig(os.path.join(d, "token_norms.png"), dpi=110); plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(12, 0.35 * len(layers) * len(heads) + 2), squeeze=False)
    for ax, t in zip(axes[0], ("k", "v")):
        keys = [(l, h, t) for l in layers for h in heads if (l, h, t) in chans]
        m = np.array([chans[k] for k in keys])
        m = m / np.median(m, axis=1, keepdims=True)
        im = ax.imshow(m, aspect="auto", cmap="magma", interpolation="nearest")
        ax.set_yticks(range(len(keys))); ax.set_yticklabels([f"L{l} H{h}" for l, h, _ in keys], fontsize=6)
        ax.set_xlabel("channel"); ax.set_title(f"{t.upper()}: channel absmax / median channel absmax")
        fig.colorbar(im, ax=ax)
    fig.suptitle(model); fig.tight_layout(); fig.savefig(os.path.join(d, "channel_absmax.png"), dpi=110); plt.close(fig)

if __name__ == "__main__":
    main()
