#!/usr/bin/env python3
"""pareto.py SUMMARY.csv OUT.png [TITLE]: effective bits per element (at 128K tokens) vs mean relative
attention-output error, one marker per recipe and bit width, one panel per dump; the Pareto front
(no recipe both cheaper and more accurate) is drawn as a line. Rows whose error is undefined (an empty
field: 0/0) are left out and counted in the panel's title; a summary with no plottable row still gives
a figure that says so."""
import math, os, signal, sys
for _s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # quiet on signals: the tool reports them
    signal.signal(_s, lambda s, f: os._exit(128 + s))
from plot_common import run


def number(s):
    """The field as a float, or None when it is empty or not a finite number (undefined)."""
    try:
        x = float(s)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def main():
    import csv
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(sys.argv[1], newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    out, title = sys.argv[2], (sys.argv[3] if len(sys.argv) > 3 else "")
    dumps = sorted({r.get("dump", "") for r in rows})
    if not dumps:
        fig, ax = plt.subplots(figsize=(6.5, 4.8))
        ax.text(0.5, 0.5, "no rows to plot", ha="center", va="center"); ax.set_axis_off()
        fig.suptitle(title, fontsize=9); fig.savefig(out, dpi=110, format="png")
        return
    fig, axes = plt.subplots(1, len(dumps), figsize=(6.5 * len(dumps), 4.8), squeeze=False)
    markers = "osD^v<>pPX*h"
    for ax, d in zip(axes[0], dumps):
        pts = []
        undefined = 0
        for r in rows:
            if r.get("dump", "") != d:
                continue
            x, e = number(r.get("eff_bits_128k")), number(r.get("out_rel_err"))
            if x is None or e is None:
                undefined += 1
                continue
            pts.append((r, x, e))
        presets = sorted({r.get("preset", "") for r, _, _ in pts})
        for i, p in enumerate(presets):
            mine = sorted((t for t in pts if t[0].get("preset", "") == p), key=lambda t: t[1])
            xs = [x for _, x, _ in mine]
            ys = [max(e, 1e-6) for _, _, e in mine]
            ax.plot(xs, ys, marker=markers[i % len(markers)], ls=":", label=p)
            for (r, _, _), xi, yi in zip(mine, xs, ys):
                ax.annotate(r.get("bits", ""), (xi, yi), fontsize=6, xytext=(2, 2), textcoords="offset points")
        front, best = [], float("inf")
        for _, x, e in sorted(pts, key=lambda t: (t[1], t[2])):
            if e < best:
                best = e; front.append((x, max(e, 1e-6)))
        if front:
            ax.plot(*zip(*front), "k-", lw=0.8, alpha=0.5, label="Pareto front")
            ax.set_yscale("log")
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "no row with a defined error", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("effective bits per element at 128K tokens")
        ax.set_ylabel("mean relative attention-output error")
        ax.set_title(d + (f" ({undefined} undefined left out)" if undefined else "")); ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=9); fig.tight_layout(); fig.savefig(out, dpi=110, format="png")


if __name__ == "__main__":
    run(main)
