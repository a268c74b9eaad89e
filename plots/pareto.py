#!/usr/bin/env python3
"""pareto.py SUMMARY.csv OUT.png [TITLE]: effective bits per element (at 128K tokens) vs mean relative
attention-output error, one marker per recipe and bit width, one panel per dump; the Pareto front
(no recipe both cheaper and more accurate) is drawn as a line."""
import os, signal, sys
for _s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # quiet on signals: the tool reports them
    signal.signal(_s, lambda s, f: os._exit(128 + s))
from plot_common import run


def main():
    import csv
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(sys.argv[1], newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{sys.argv[1]} has no rows to plot")
    out, title = sys.argv[2], (sys.argv[3] if len(sys.argv) > 3 else "")
    dumps = sorted({r["dump"] for r in rows})
    fig, axes = plt.subplots(1, len(dumps), figsize=(6.5 * len(dumps), 4.8), squeeze=False)
    markers = "osD^v<>pPX*h"
    for ax, d in zip(axes[0], dumps):
        pts = [r for r in rows if r["dump"] == d]
        presets = sorted({r["preset"] for r in pts})
        for i, p in enumerate(presets):
            mine = sorted((r for r in pts if r["preset"] == p), key=lambda r: float(r["eff_bits_128k"]))
            x = [float(r["eff_bits_128k"]) for r in mine]
            y = [max(float(r["out_rel_err"]), 1e-6) for r in mine]
            ax.plot(x, y, marker=markers[i % len(markers)], ls=":", label=p)
            for r, xi, yi in zip(mine, x, y):
                ax.annotate(r["bits"], (xi, yi), fontsize=6, xytext=(2, 2), textcoords="offset points")
        front, best = [], float("inf")
        for r in sorted(pts, key=lambda r: (float(r["eff_bits_128k"]), float(r["out_rel_err"]))):
            e = float(r["out_rel_err"])
            if e < best:
                best = e; front.append((float(r["eff_bits_128k"]), max(e, 1e-6)))
        ax.plot(*zip(*front), "k-", lw=0.8, alpha=0.5, label="Pareto front")
        ax.set_yscale("log"); ax.set_xlabel("effective bits per element at 128K tokens")
        ax.set_ylabel("mean relative attention-output error"); ax.set_title(d); ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9); fig.tight_layout(); fig.savefig(out, dpi=110, format="png")


if __name__ == "__main__":
    run(main)
