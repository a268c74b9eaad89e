#!/usr/bin/env python3
"""tni_plots.py NORMS.csv CHANNELS.csv NORMS.png CHANNELS.png [MODEL]: draws oscar-analyze's plots from its
token_norms.csv and channel_absmax.csv (oscar-analyze passes temporary names, renamed with its other outputs).
NORMS.png (token_norms.png): per-token L2 norm vs position, one panel per layer (K post-RoPE and V, every KV head).
CHANNELS.png (channel_absmax.png): heat map of per-channel absmax (rows: layer/head, columns: channel) for K and V."""
import os, signal, sys
for _s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # quiet on signals: the tool reports them
    signal.signal(_s, lambda s, f: os._exit(128 + s))
from plot_common import run
import csv
from collections import defaultdict

def load(path, value):
    data = defaultdict(list)
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            data[(int(r["layer"]), int(r["kv_head"]), r["tensor"])].append(float(r[value]))
    return data

def main():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    if len(sys.argv) < 5:
        raise ValueError("usage: tni_plots.py NORMS.csv CHANNELS.csv NORMS.png CHANNELS.png [MODEL]")
    norms_csv, chans_csv, norms_png, chans_png = sys.argv[1:5]
    model = sys.argv[5] if len(sys.argv) > 5 else ""
    norms = load(norms_csv, "norm")
    chans = load(chans_csv, "absmax")
    if not norms:
        raise ValueError(f"{norms_csv} has no rows to plot")
    layers = sorted({k[0] for k in norms})
    heads = sorted({k[1] for k in norms})
    many = len(layers) > 9  # a real model's 30 layers: smaller panels, so the PNG stays about a megabyte
    cols = min(5 if many else 3, len(layers)); rows = (len(layers) + cols - 1) // cols
    pw, ph, dpi = (4, 2.6, 80) if many else (5, 3.2, 110)
    fig, axes = plt.subplots(rows, cols, figsize=(pw * cols, ph * rows), squeeze=False, sharex=True)
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
    fig.tight_layout(); fig.savefig(norms_png, dpi=dpi, format="png"); plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(12, 0.35 * len(layers) * len(heads) + 2), squeeze=False)
    for ax, t in zip(axes[0], ("k", "v")):
        keys = [(l, h, t) for l in layers for h in heads if (l, h, t) in chans]
        m = np.array([chans[k] for k in keys])
        m = m / np.median(m, axis=1, keepdims=True)
        im = ax.imshow(m, aspect="auto", cmap="magma", interpolation="nearest")
        ax.set_yticks(range(len(keys))); ax.set_yticklabels([f"L{l} H{h}" for l, h, _ in keys], fontsize=6)
        ax.set_xlabel("channel"); ax.set_title(f"{t.upper()}: channel absmax / median channel absmax")
        fig.colorbar(im, ax=ax)
    fig.suptitle(model); fig.tight_layout(); fig.savefig(chans_png, dpi=110, format="png"); plt.close(fig)

if __name__ == "__main__":
    run(main)
