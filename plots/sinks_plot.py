#!/usr/bin/env python3
"""sinks_plot.py SINKS.csv SINKS.png [MODEL]: draws oscar-analyze's attention-sink plot from its sinks.csv
(oscar-analyze passes temporary names, renamed with its other outputs). Top: per layer, the attention mass
the last queries give position 0 (mean over query heads, and the most sink-bound head). Bottom: position 0's
key and value L2 norm over the median norm (mean over KV heads, the bar reaching down to the min head);
a ratio of 1 is an ordinary token, far below 1 a sink's tiny key and value. Local layers whose sliding window no
longer holds position 0 are shaded: they give it no attention at all."""
import os, signal, sys
for _s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # quiet on signals: the tool reports them
    signal.signal(_s, lambda s, f: os._exit(128 + s))
from plot_common import run
import csv


def main():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if len(sys.argv) < 3:
        raise ValueError("usage: sinks_plot.py SINKS.csv SINKS.png [MODEL]")
    src, png = sys.argv[1:3]
    model = sys.argv[3] if len(sys.argv) > 3 else ""
    with open(src, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{src} has no rows to plot")
    num = lambda r, k: float(r[k]) if r[k] != "" else float("nan")
    layers = [int(r["layer"]) for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(6, 0.32 * len(layers) + 3), 6.5), sharex=True)
    top.bar(layers, [num(r, "attention_mean") for r in rows], color="tab:blue", label="mean over query heads")
    top.plot(layers, [num(r, "attention_max_head") for r in rows], "k_", markersize=10, label="most sink-bound head")
    top.axhline(0.2, color="grey", lw=0.8, ls="--", label="sink layer: 0.2 or more (oscar-analyze's reading)")
    # Local (sliding-window) layers whose window no longer holds position 0: no attention to measure.
    outside = [int(r["layer"]) for r in rows if r.get("queries_seeing_0", "1") == "0"]
    if outside:
        top.bar(outside, [1.05] * len(outside), color="0.92", zorder=0,
                label=f"position 0 outside the sliding window ({rows[outside[0] - layers[0]]['window']} tokens)")
    top.set_ylim(0, 1.05); top.set_ylabel("attention on position 0")
    top.set_title(f"{model}: attention sink per layer (last {rows[0]['queries']} queries)")
    top.legend(fontsize=8)
    for key, color, dx in (("key", "tab:orange", -0.18), ("value", "tab:green", 0.18)):
        mean = [num(r, f"{key}_ratio_mean") for r in rows]
        mn = [num(r, f"{key}_ratio_min") for r in rows]
        x = [l + dx for l in layers]
        bottom.vlines(x, mn, mean, color=color, lw=1)
        bottom.plot(x, mean, "o", color=color, markersize=4, label=f"{key}: mean over KV heads (line to the min head)")
    bottom.axhline(1.0, color="grey", lw=0.6, ls=":")
    bottom.set_yscale("log"); bottom.set_ylabel("position 0 norm / median norm")
    lo, hi = bottom.get_ylim()
    ticks = [t for t in (0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5) if lo <= t <= hi]
    bottom.set_yticks(ticks); bottom.set_yticklabels([f"{t:g}" for t in ticks]); bottom.minorticks_off()
    from matplotlib.ticker import MaxNLocator
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.set_xlabel("layer"); bottom.legend(fontsize=8)
    fig.tight_layout(); fig.savefig(png, dpi=110, format="png"); plt.close(fig)


if __name__ == "__main__":
    run(main)
