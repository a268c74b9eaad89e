#!/usr/bin/env python3
"""recall.py RECALL.csv OUT.png [TITLE]: loss on a repeated passage vs the distance since its first occurrence, one
line per recipe (copying from context needs the old tokens intact), on a log scale so that full precision's small
losses and a broken recipe's large ones both read. The first reading's loss (mean over recipes) is the dotted line:
a recipe at it no longer recalls. A point whose first copy was mostly in full precision when it was read again
(quantized_share under 50%) is hollow: it tests the recipe's windows, not its quantizer."""
import os, signal, sys
for _s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # quiet on signals: the tool reports them
    signal.signal(_s, lambda s, f: os._exit(128 + s))
from plot_common import run


def main():
    import csv
    from collections import defaultdict
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    with open(sys.argv[1], newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{sys.argv[1]} has no rows to plot")
    by = defaultdict(list)
    for r in rows:
        name = r["recipe"] + (" (gpu)" if r.get("device") == "gpu" else "")  # attended through the CUDA kernels
        share = r.get("quantized_share", "")
        quantized = float(share) if share not in ("", None) else 1.0
        fp = r["recipe"] in ("fp16", "bf16", "fp32")
        by[name].append((int(r["distance"]), float(r["repeat_loss"]), fp or quantized >= 0.5))
    fig, ax = plt.subplots(figsize=(9, 5.2))
    markers = "osD^v<>pPX*h"
    hollow = False
    for i, (name, pts) in enumerate(sorted(by.items())):
        pts.sort()
        line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], ls="-", lw=1.2, marker=markers[i % len(markers)], ms=7, label=name)
        for d, loss, ok in pts:
            ax.plot(d, loss, marker=markers[i % len(markers)], ms=7, color=line.get_color(), mfc=line.get_color() if ok else "none")
            hollow = hollow or not ok
    first = sum(float(r["first_loss"]) for r in rows) / len(rows)
    ax.axhline(first, color="gray", ls=":", label=f"first reading (mean over recipes): {first:.2f}")
    ys = [p[1] for pts in by.values() for p in pts] + [first]
    if max(ys) / max(min(ys), 1e-9) > 5:  # full precision's ~0.3 nats and a broken recipe's ~5 on one axis
        from matplotlib.ticker import FixedLocator, NullLocator
        ax.set_yscale("log")
        ticks = [t for t in (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10) if min(ys) / 1.5 <= t <= max(ys) * 1.5]
        ax.yaxis.set_major_locator(FixedLocator(ticks)); ax.yaxis.set_minor_locator(NullLocator())
        ax.set_yticklabels([f"{t:g}" for t in ticks])
    ax.set_xlabel("distance to the first occurrence (tokens)")
    ax.set_ylabel("mean loss on the repeated passage (nats)")
    ax.set_title((sys.argv[3] if len(sys.argv) > 3 else "") + ": recall through the quantized cache (lower is better)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    handles, labels = ax.get_legend_handles_labels()
    if hollow:
        handles.append(Line2D([], [], marker="o", mfc="none", color="0.4", ls="none"))
        labels.append("hollow: first copy mostly in full precision")
    ax.legend(handles, labels, fontsize=9, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=100, format="png")


if __name__ == "__main__":
    run(main)
