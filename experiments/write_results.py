#!/usr/bin/env python3
"""write_results.py RESULTS_MD STAMP [RESULTS]: writes the freshly generated tables (RESULTS, default results/) into
RESULTS_MD (RESULTS.md) between its <!-- BEGIN x --> and <!-- END x --> markers, each headed by the command, data and
date it came from and, for the sweeps and evaluations, followed by a reading computed from the same data (the text
outside the markers says what each table shows without quoting its numbers). The GPU sections (kernel-bench,
eval-gpu-kjv-hd128) are replaced only when the environment variable OSCAR_GPU_STAMP is non-empty (a GPU run: its
date, device, time); otherwise they are left as they are. The sections named in OSCAR_KEEP_SECTIONS
(space-separated; regenerate.sh --quick names those it does not run) are left as they are too.
Writes RESULTS_MD atomically; fails (RESULTS_MD untouched) if any table or marker is missing."""
import json
import os
import re
import sys

# Variants that a shipped sweep sets beside a preset: (variant, preset, what the pair measures).
PAIRS = [("oscar-omni-noscale", "oscar-omni", "Omni-Token Scaling (oscar-omni against oscar-omni-noscale, without it)"),
         ("oscar-cov-nowindows", "oscar-cov", "oscar-cov's BF16 windows (oscar-cov against oscar-cov-nowindows)"),
         ("kivi-windows", "kivi", "oscar-cov's windows given to KIVI (kivi-windows against kivi)"),
         ("oscar-cov-fp32", "oscar-cov", "fp32 scale and zero (oscar-cov-fp32 against oscar-cov's fp16)"),
         ("oscar-cov-head", "oscar-cov", "a rotation per KV head (oscar-cov-head against oscar-cov's per layer)"),
         ("oscar-cov-U", "oscar-cov", "the eigenbasis alone (oscar-cov-U, R = U, against oscar-cov's U·H·P)"),
         ("oscar-cov-UPH", "oscar-cov", "the order U·P·H (oscar-cov-UPH) against oscar-cov's U·H·P")]
# The published presets, ordered by attention KL in a sweep's reading.
PRESETS = ("naive", "kivi", "quarot", "turboquant", "oscar-omni", "oscar-cov", "oscar-cov-head")


def read(path):
    with open(path) as f:
        return f.read()


def nums(values, digits=3):
    return " / ".join(f"{v:.{digits}g}" for v in values)


def sweep_reading(summary):
    """Lines computed from a sweep's summary.json: the 2-bit order of the presets and each variant against its preset."""
    lines = []
    for dump in dict.fromkeys(r["dump"] for r in summary["rows"]):
        rows = [r for r in summary["rows"] if r["dump"] == dump]
        by = {(r["recipe"].split("@")[0], r["bits"]): r for r in rows}
        two = sorted((by[(p, "2")] for p in PRESETS if (p, "2") in by), key=lambda r: r["mean"]["kl"])
        if two:
            order = ", ".join(f"{r['recipe']} {r['mean']['kl']:.3g}" + (" ⚠" if (r["quantized_share"] or 0) < 0.5 else "")
                              for r in two)
            lines.append(f"- {dump}, the presets at 2 bits by attention KL (lowest first): {order}.")
        for variant, preset, what in PAIRS:
            bits = [b for b in ("2", "3", "4") if (preset, b) in by and (variant, b) in by]
            if not bits:
                continue
            base = [by[(preset, b)]["mean"] for b in bits]
            var = [by[(variant, b)]["mean"] for b in bits]
            lines.append(f"- {what}, at {' / '.join(bits)} bits: attention KL {nums(m['kl'] for m in base)} against "
                         f"{nums(m['kl'] for m in var)}; output error {nums(m['out_rel_err'] for m in base)} against "
                         f"{nums(m['out_rel_err'] for m in var)}.")
    return "Reading, computed from `summary.json`:\n\n" + "\n".join(lines) if lines else ""


def eval_reading(ev):
    """Lines computed from an evaluation's eval.json: the quantized recipes by Δloss, which are not told apart from
    full precision, which break the model (over 1 nat)."""
    rows = sorted((r for r in ev["rows"] if r["quantized_share"] is not None), key=lambda r: r["dloss"]["mean"])
    if not rows:
        return ""
    def name(r):
        return r["recipe"] + (" ⚠" if r["quantized_share"] < 0.5 else "")
    d = ", ".join(f"{name(r)} {r['dloss']['mean']:+.3f} [{r['dloss']['lo']:+.3f}, {r['dloss']['hi']:+.3f}]" for r in rows)
    lines = [f"- Δloss against fp32, lowest first: {d}."]
    tied = [name(r) for r in rows if r["dloss"]["lo"] <= 0 <= r["dloss"]["hi"]]
    if tied:
        lines.append(f"- Not told apart from full precision (the interval holds 0): {', '.join(tied)}.")
    broken = [name(r) for r in rows if r["dloss"]["mean"] > 1]
    if broken:
        lines.append(f"- Over 1 nat above full precision (the model breaks): {', '.join(broken)}.")
    return "Reading, computed from `eval.json` (⚠: under 50% of what attention read was in low bits):\n\n" + "\n".join(lines)


class Blocks:
    """The generated sections, by marker name; `res` is the results folder, `stamp` the run's date, cores, time."""

    def __init__(self, res, stamp, gpu_stamp):
        self.res, self.stamp, self.gpu_stamp = res, stamp, gpu_stamp

    def tni(self, folder="tni", cmd="bash experiments/main.sh"):
        t = read(f"{self.res}/{folder}/table.txt")
        # "Token Norm Imbalance: PATH (MODEL; 30 layers, ..., 2048 tokens, float16)": the model and passage
        what = re.search(r"^Token Norm Imbalance: \S+ \((.*)\)$", t, re.M).group(1)
        loss = re.search(r"^passage mean next-token loss: (.*)$", t, re.M)
        summary = t[t.index("TNI summary"):].strip()
        return (f"`{cmd}` ({self.stamp}); Revelation (held out), {what}"
                f"{'; mean next-token loss ' + loss.group(1) if loss else ''}:\n\n```\n{summary}\n```\n\n"
                f"![Attention sink per layer]({self.res}/{folder}/sinks.png)\n\n"
                f"![Token norms]({self.res}/{folder}/token_norms.png)")

    def tasks(self, name):
        md = read(f"{self.res}/tasks/{name}/tasks.md").strip()
        return f"`experiments/run_tasks.sh` ({self.stamp}):\n\n{md}"

    def sweep(self, name, config=None):
        md = read(f"{self.res}/sweep/{name}/summary.md")
        md = "\n".join(line for line in md.splitlines() if not line.startswith("<!--")).strip()
        reading = sweep_reading(json.loads(read(f"{self.res}/sweep/{name}/summary.json")))
        return (f"`oscar-sweep {config or f'experiments/sweeps/{name}.yaml'}` ({self.stamp}):\n\n{md}\n\n"
                f"![Pareto plot]({self.res}/sweep/{name}/pareto.png)\n\n{reading}")

    def evaluation(self, name, cmd="experiments/run_eval.sh", plot=True):
        md = read(f"{self.res}/eval/{name}/eval.md").strip()
        reading = eval_reading(json.loads(read(f"{self.res}/eval/{name}/eval.json")))
        figure = f"\n\n![Recall plot]({self.res}/eval/{name}/recall.png)" if plot else ""
        return f"`{cmd}` ({self.stamp}):\n\n{md}{figure}\n\n{reading}"

    def covariance_scope(self):
        runs = "`oscar-eval ... --recipes fp16,oscar-cov,oscar-cov-head --bits 2,4` (regenerate.sh)"
        parts = [self.sweep("covariance-scope", "experiments/ablations/covariance-scope.yaml")]
        parts += [self.evaluation(f"{m}-scope", runs, plot=False) for m in ("smollm2", "kjv-hd128")]
        return "\n\n".join(parts)

    def kernel_bench(self):
        cmd = read(f"{self.res}/kernel_bench.cmd").strip()
        md = read(f"{self.res}/kernel_bench.md").strip().replace("\n### ", "\n#### ")  # under a ### heading
        return f"GPU run: `{cmd}` ({self.gpu_stamp}; JSON in `{self.res}/kernel_bench.json`):\n\n{md}"

    def eval_gpu(self):
        cmd = read(f"{self.res}/eval-gpu-kjv-hd128/cmd").strip()
        md = read(f"{self.res}/eval-gpu-kjv-hd128/eval.md").strip()
        return f"GPU run: `{cmd}` ({self.gpu_stamp}):\n\n{md}"

    def makers(self):
        m = {"tni": self.tni, "tni-gemma3": lambda: self.tni("tni-gemma3", "oscar-analyze results/dumps/gemma3-revelation.h5 (regenerate.sh)")}
        for name in ("smollm2", "gemma3", "kjv-hd128", "stories260k"):
            m[f"sweep-{name}"] = lambda n=name: self.sweep(n)
            m[f"eval-{name}"] = lambda n=name: self.evaluation(n)
        m.update({"covariance-scope": self.covariance_scope,
                  "tasks-smollm2": lambda: self.tasks("smollm2"), "tasks-gemma3": lambda: self.tasks("gemma3")})
        if self.gpu_stamp:
            m.update({"kernel-bench": self.kernel_bench, "eval-gpu-kjv-hd128": self.eval_gpu})
        return m


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: write_results.py RESULTS_MD STAMP [RESULTS]")
    doc, stamp = sys.argv[1], sys.argv[2]
    makers = Blocks(sys.argv[3] if len(sys.argv) > 3 else "results", stamp, os.environ.get("OSCAR_GPU_STAMP", "")).makers()
    for name in os.environ.get("OSCAR_KEEP_SECTIONS", "").split():
        makers.pop(name, None)
    try:
        text = read(doc)
    except OSError as e:
        sys.exit(f"write_results: error: {doc}: cannot read it ({e.strerror}); give the RESULTS.md to write into")
    for name, make in makers.items():
        pat = re.compile(rf"(<!-- BEGIN {re.escape(name)} -->\n).*?(<!-- END {re.escape(name)} -->)", re.S)
        if not pat.search(text):
            sys.exit(f"write_results: error: {doc}: no <!-- BEGIN {name} --> ... <!-- END {name} --> markers; "
                     f"restore them from git")
        try:
            body = make()
        except (OSError, AttributeError, ValueError, KeyError) as e:
            sys.exit(f"write_results: error: section {name}: {e}; run experiments/regenerate.sh to make it")
        text = pat.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)
    tmp = doc + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, doc)


if __name__ == "__main__":
    main()
