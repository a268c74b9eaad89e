#!/usr/bin/env python3
"""pareto.py SUMMARY.csv OUT.png [TITLE]: accuracy against cost for every recipe and bit width of an oscar-sweep.
Per dump one row of panels: the attention-output relative error and the attention KL (log scale, lower is better),
each against the effective bits per element at the dump's own length and at 128K tokens. One colour and marker per
preset, its bit widths joined and labelled (labels placed so that they do not overlap); the Pareto front (no recipe
both cheaper and more accurate) over the rows that are ranked. A row whose queries read mostly full-precision window
tokens (quantized_share under 50%) is drawn hollow and grey and left out of the front: at this length it measures
full precision, not its quantizer. fp16 is the reference: a dashed line at its error, or a note when its error is 0
(a dump stored in fp16). Rows whose metric is undefined (an empty field: 0/0) are counted in the panel's title."""
import math, os, signal, sys
for _s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # quiet on signals: the tool reports them
    signal.signal(_s, lambda s, f: os._exit(128 + s))
from plot_common import run

METRICS = [("out_rel_err", "attention-output relative error", "output error"),
           ("kl", "attention KL(full ‖ quantized), nats", "attention KL")]
XS = [("eff_bits_dump", "at the dump's length"), ("eff_bits_128k", "at 128K tokens")]
MIN_SHARE = 0.5


def number(s):
    """The field as a float, or None when it is empty or not a finite number (undefined)."""
    try:
        x = float(s)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def place_labels(fig, ax, items):
    """items: (text, x, y) in data coordinates; each label goes to the first of a few offsets around its point
    where it overlaps no label placed before it (else the least-overlapping one)."""
    from matplotlib.transforms import Bbox
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    placed = []
    offsets = [(5, 4), (5, -11), (-12, 4), (-12, -11), (7, -3), (-14, -3), (0, 8), (0, -15)]
    for text, x, y in items:
        best, best_overlap = None, None
        for dx, dy in offsets:
            t = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=7, color="0.15")
            bb = t.get_window_extent(renderer).expanded(1.05, 1.1)
            overlap = sum(max(0, min(bb.x1, o.x1) - max(bb.x0, o.x0)) * max(0, min(bb.y1, o.y1) - max(bb.y0, o.y0)) for o in placed)
            if best is None or overlap < best_overlap:
                if best is not None:
                    best.remove()
                best, best_overlap, best_bb = t, overlap, bb
                if overlap == 0:
                    break
            else:
                t.remove()
        placed.append(Bbox(best_bb.get_points()))


def main():
    import csv
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    with open(sys.argv[1], newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    out, title = sys.argv[2], (sys.argv[3] if len(sys.argv) > 3 else "")
    dumps = sorted({r.get("dump", "") for r in rows})
    if not dumps:
        fig, ax = plt.subplots(figsize=(6.5, 4.8))
        ax.text(0.5, 0.5, "no rows to plot", ha="center", va="center"); ax.set_axis_off()
        fig.suptitle(title, fontsize=10); fig.savefig(out, dpi=110, format="png")
        return
    presets = sorted({r.get("preset", "") for r in rows if r.get("bits") != "16"})
    # distinct colours first: tab10's, then tab20's lighter ones (with other markers)
    palette = [plt.get_cmap("tab10")(i) for i in range(10)] + [plt.get_cmap("tab20")(2 * i + 1) for i in range(10)]
    style = {p: (palette[i % len(palette)], "osD^v<>pPX*h"[i % 12]) for i, p in enumerate(presets)}
    fig, axes = plt.subplots(2 * len(dumps), 2, figsize=(13, 8.6 * len(dumps)), squeeze=False)
    low_drawn = False
    for di, d in enumerate(dumps):
        mine = [r for r in rows if r.get("dump", "") == d]
        reference = [r for r in mine if r.get("bits") == "16" and not r.get("quantized_share")]
        quant = [r for r in mine if r not in reference]
        tokens = next((r.get("tokens") for r in mine if r.get("tokens")), "?")
        for mi, (metric, mlabel, short) in enumerate(METRICS):
            for xi, (xkey, xlabel) in enumerate(XS):
                ax = axes[2 * di + mi][xi]
                pts, undefined = [], 0
                for r in quant:
                    x, y = number(r.get(xkey)), number(r.get(metric))
                    if x is None or y is None or y <= 0:
                        undefined += 1
                        continue
                    share = number(r.get("quantized_share"))
                    pts.append((r, x, y, share is not None and share < MIN_SHARE))
                labels = []
                for p in presets:
                    own = sorted((t for t in pts if t[0].get("preset", "") == p), key=lambda t: t[1])
                    if not own:
                        continue
                    color, marker = style[p]
                    ax.plot([t[1] for t in own], [t[2] for t in own], ls=":", lw=1, color=color, alpha=0.7)
                    for r, x, y, low in own:
                        if low:
                            ax.plot(x, y, marker=marker, ms=7, mfc="none", mec="0.55", mew=1.2, ls="none")
                            low_drawn = True
                        else:
                            ax.plot(x, y, marker=marker, ms=7, color=color, ls="none")
                        labels.append((r.get("bits", ""), x, y))
                front, best = [], float("inf")
                for _, x, y, _ in sorted((t for t in pts if not t[3]), key=lambda t: (t[1], t[2])):
                    if y < best:
                        best = y; front.append((x, y))
                if front:
                    ax.step(*zip(*front), where="post", color="k", lw=0.9, alpha=0.45)
                ref_note = ""
                if pts:
                    ax.set_yscale("log")
                    xs, ys = [t[1] for t in pts], [t[2] for t in pts]
                    ax.set_xlim(min(xs) - 0.3, max(xs) + 0.6)
                    lo, hi = min(ys) / 1.6, max(ys) * 1.6
                    ax.set_ylim(lo, hi)
                    for r in reference:  # fp16, the reference: a line where it falls in range, else a note
                        y = number(r.get(metric))
                        if y is not None and lo < y < hi:
                            ax.axhline(y, color="0.3", ls="--", lw=1)
                            ax.annotate(f"fp16 (16 bits): {y:.2g}", (0.99, y), xycoords=("axes fraction", "data"), ha="right",
                                        va="bottom", fontsize=8, color="0.3")
                        elif y is not None:
                            ref_note = f" (fp16, the reference: {y:.2g})" if y > 0 else " (fp16, the reference: 0)"
                else:
                    ax.text(0.5, 0.5, "no row with a defined value", ha="center", va="center", transform=ax.transAxes)
                ax.set_xlabel(f"effective bits per element {xlabel}" + (f" ({tokens})" if xi == 0 else ""), fontsize=9)
                ax.set_ylabel(mlabel, fontsize=9)
                ax.tick_params(labelsize=8)
                ax.grid(alpha=0.3, which="both")
                extra = f" ({undefined} undefined left out)" if undefined else ""
                ax.set_title(f"{d}: {short}{extra}{ref_note}", fontsize=9)
                if labels:
                    place_labels(fig, ax, labels)
    handles = [Line2D([], [], color=style[p][0], marker=style[p][1], ls=":", label=p) for p in presets]
    handles.append(Line2D([], [], color="k", alpha=0.45, label="Pareto front (ranked rows)"))
    if low_drawn:
        handles.append(Line2D([], [], marker="o", mfc="none", mec="0.55", ls="none",
                              label="under 50% in low bits at this length: not ranked"))
    fig.legend(handles=handles, loc="center right", fontsize=9, frameon=False, title="preset (labels: bits)", title_fontsize=9)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0, 0.82, 0.97))
    fig.savefig(out, dpi=100, format="png")


if __name__ == "__main__":
    run(main)
