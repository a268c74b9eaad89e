#!/usr/bin/env python3
"""tni_plots.py NORMS.csv CHANNELS.csv NORMS.png CHANNELS.png [MODEL]: draws oscar-analyze's plots from its
token_norms.csv and channel_absmax.csv (oscar-analyze passes temporary names, renamed with its other outputs).
NORMS.png (token_norms.png): each token's L2 norm over its layer's median norm, K after RoPE and V. Top: every layer
at once (rows: layers, columns: positions on a log scale so that position 0, the attention sink, gets its own column;
the mean over KV heads; one colour scale for both). Bottom: three layers as lines (the worst key TNI, the strongest
position-0 dip, the last layer), mean over KV heads with the range over heads shaded.
CHANNELS.png (channel_absmax.png): per-channel absmax over the median channel's, rows layer x KV head, K and V on one
shared logarithmic colour scale with one labelled colour bar."""
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
    from matplotlib.colors import LogNorm, TwoSlopeNorm
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
    T = max(len(v) for v in norms.values())

    # ratio[t][l] = mean over KV heads of norm / that head's median norm, [positions]
    def ratios(t, l):
        rows = [np.asarray(norms[(l, h, t)], float) for h in heads if (l, h, t) in norms]
        rel = [r / np.median(r) if np.median(r) > 0 else np.full_like(r, np.nan) for r in rows]
        return np.array(rel)  # [heads, positions]

    rel = {t: {l: ratios(t, l) for l in layers} for t in ("k", "v")}
    # log-spaced position bins: 0, 1, 2, 3, ... then wider; each column shows the bin's mean
    edges = np.unique(np.concatenate([np.arange(0, min(T, 16)), np.geomspace(16, T, 48).astype(int), [T]]))
    edges = edges[edges <= T]

    def binned(x):
        return np.array([np.nanmean(x[a:b]) for a, b in zip(edges[:-1], edges[1:])])

    fig = plt.figure(figsize=(14, 10.5))
    outer = fig.add_gridspec(2, 1, height_ratios=[1.25, 1], hspace=0.28)
    top = outer[0].subgridspec(1, 3, width_ratios=[1, 1, 0.035], wspace=0.12)
    bottom = outer[1].subgridspec(1, 3, wspace=0.28)
    img = {t: np.array([binned(np.nanmean(rel[t][l], axis=0)) for l in layers]) for t in ("k", "v")}
    lo = np.nanmin([np.nanmin(img[t]) for t in img]); hi = np.nanmax([np.nanmax(img[t]) for t in img])
    span = max(hi, 1.0 / max(lo, 1e-6), 1.05)
    norm = LogNorm(vmin=1.0 / span, vmax=span)  # symmetric in log around 1: white is a typical token
    for i, t in enumerate(("k", "v")):
        ax = fig.add_subplot(top[0, i])
        im = ax.pcolormesh(edges, np.arange(len(layers) + 1), img[t], cmap="RdBu_r", norm=norm, shading="flat")
        ax.set_xscale("symlog", linthresh=16, linscale=0.6)
        ax.set_xlim(0, T)
        ax.set_yticks(np.arange(len(layers)) + 0.5)
        ax.set_yticklabels([str(l) if (i_ % max(1, len(layers) // 15) == 0) else "" for i_, l in enumerate(layers)], fontsize=8)
        if i == 0:
            ax.set_ylabel("layer")
        ax.set_xlabel("position (position 0 is the first column; log scale past 16)", fontsize=9)
        ax.set_title("K (after RoPE)" if t == "k" else "V", fontsize=11)
        ax.invert_yaxis()
    cb = fig.colorbar(im, cax=fig.add_subplot(top[0, 2]))
    ticks = [t for t in (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16) if 1.0 / span <= t <= span]
    cb.set_ticks(ticks)
    cb.set_ticklabels([f"{t:g}" for t in ticks])
    cb.set_label("token norm / layer median, mean over KV heads (log; 1 = typical)", fontsize=9)

    # three layers as lines: the worst key TNI, the deepest position-0 dip (relative to the median), the last layer
    def tni(l):  # the worst KV head's max / min key norm, as oscar-analyze's summary
        return max(np.nanmax(r) / max(np.nanmin(r), 1e-12) for r in rel["k"][l])
    picks = []
    for l in (max(layers, key=tni), min(layers, key=lambda l: np.nanmean(rel["k"][l][:, 0])), layers[-1]):
        if l not in picks:
            picks.append(l)
    x = np.arange(T) + 1
    for i, l in enumerate(picks):
        ax = fig.add_subplot(bottom[0, i])
        for t, color, z in (("v", "tab:orange", 1), ("k", "tab:blue", 2)):
            r = rel[t][l]
            ax.fill_between(x, np.nanmin(r, axis=0), np.nanmax(r, axis=0), color=color, alpha=0.18, lw=0, zorder=z)
            ax.plot(x, np.nanmean(r, axis=0), color=color, lw=0.6, alpha=0.9, zorder=z,
                    label=("K" if t == "k" else "V") + " (mean over heads; range shaded)")
            ax.plot([1], [np.nanmean(r[:, 0])], marker="o", color=color, ms=7, zorder=3)
        ax.set_xscale("log"); ax.set_yscale("log")
        why = "worst key TNI" if l == picks[0] else ("deepest position-0 dip" if i == 1 else "last layer")
        ax.set_title(f"layer {l} ({why})", fontsize=10)
        ax.set_xlabel("position + 1 (log; the dot is position 0)", fontsize=9)
        if i == 0:
            ax.set_ylabel("token norm / median norm")
        ax.grid(alpha=0.3, which="both")
        if i == 0:
            ax.legend(fontsize=9, loc="lower right")
    fig.suptitle(f"{model}: token L2 norms relative to their layer's median ({len(layers)} layers, {len(heads)} KV heads, {T} tokens)",
                 fontsize=11)
    fig.savefig(norms_png, dpi=90, format="png", bbox_inches="tight"); plt.close(fig)

    keys = {t: [(l, h, t) for l in layers for h in heads if (l, h, t) in chans] for t in ("k", "v")}
    mats = {t: np.array([chans[k] for k in keys[t]]) for t in keys if keys[t]}
    mats = {t: m / np.median(m, axis=1, keepdims=True) for t, m in mats.items()}
    vmax = max(float(np.max(m)) for m in mats.values())
    vmin = max(min(float(np.min(m)) for m in mats.values()), 1e-3)
    rows = max(len(keys[t]) for t in mats)
    fig, axes = plt.subplots(1, len(mats), figsize=(13, min(0.12 * rows + 2.5, 16)), squeeze=False)
    for ax, (t, m) in zip(axes[0], mats.items()):
        im = ax.imshow(m, aspect="auto", cmap="magma", interpolation="nearest", norm=LogNorm(vmin=vmin, vmax=vmax))
        step = max(1, len(keys[t]) // 30)
        ticks = list(range(0, len(keys[t]), step))
        ax.set_yticks(ticks)
        ax.set_yticklabels([f"L{keys[t][i][0]} H{keys[t][i][1]}" for i in ticks], fontsize=8)
        ax.set_xlabel("channel")
        ax.set_ylabel("layer, KV head")
        ax.set_title(("K (after RoPE)" if t == "k" else "V") + ": channel absmax / median channel absmax", fontsize=10)
    fig.suptitle(f"{model}: channel outliers (one shared log colour scale)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 0.9, 0.95))
    cax = fig.add_axes((0.91, 0.12, 0.015, 0.76))
    cb = fig.colorbar(im, cax=cax)
    ticks = [t for t in (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32) if vmin <= t <= vmax]
    cb.set_ticks(ticks)
    cb.set_ticklabels([f"{t:g}" for t in ticks])
    cb.set_label("channel absmax / median channel absmax (log)", fontsize=9)
    fig.savefig(chans_png, dpi=100, format="png"); plt.close(fig)


if __name__ == "__main__":
    run(main)
