#!/usr/bin/env python3
"""recall.py RECALL.csv OUT.png [TITLE]: loss on a repeated passage vs the distance since its first
occurrence, one line per recipe (copying from context needs the old tokens intact)."""
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

    with open(sys.argv[1], newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{sys.argv[1]} has no rows to plot")
    by = defaultdict(list)
    for r in rows:
        name = r["recipe"] + (" (gpu)" if r.get("device") == "gpu" else "")  # attended through the CUDA kernels
        by[name].append((int(r["distance"]), float(r["repeat_loss"])))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, pts in sorted(by.items()):
        pts.sort(); ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    first = sum(float(r["first_loss"]) for r in rows) / len(rows)
    ax.axhline(first, color="gray", ls=":", label="first occurrence (mean)")
    ax.set_xlabel("distance to the first occurrence (tokens)"); ax.set_ylabel("mean loss on the repeat (nats)")
    ax.set_title((sys.argv[3] if len(sys.argv) > 3 else "") + ": recall through the quantized cache", fontsize=10)
    ax.grid(alpha=0.3); ax.legend(fontsize=7); fig.tight_layout(); fig.savefig(sys.argv[2], dpi=110, format="png")


if __name__ == "__main__":
    run(main)
