#!/usr/bin/env python3
"""compare_evals.py OUT HF_RUNS OE_RUNS [TOL]: the hf_eval runs OUT/<hf>/eval.csv (comma list) against the oscar-eval
runs OUT/<oe>/eval.csv (comma list; the first is the reference the verdict uses): OUT/comparison.md, the tables on
stdout, and exit 0 when every |Δloss(HF) - Δloss(oscar-eval)| <= TOL (default 0.01 nats), else 1."""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import hf_eval as H  # noqa: E402  (experiments/hf_eval.py)


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__.split("\n")[0], file=sys.stderr)
        return 2
    out, hf_names, oe_names = argv[0], argv[1].split(","), argv[2].split(",")
    tol = float(argv[3]) if len(argv) == 4 else 0.01
    text, worst = H.compare_runs(out, hf_names, oe_names, tol)
    with open(os.path.join(out, "comparison.md"), "w") as f:
        f.write(text)
    print(text)
    print(f"worst |Δloss(HF) - Δloss({oe_names[0]})| = {worst:.4f} nats: {'PASS' if worst <= tol else 'FAIL'}")
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
