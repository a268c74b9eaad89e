#!/usr/bin/env python3
"""splice_readme.py README STAMP [RESULTS]: replaces the text between <!-- BEGIN x --> and <!-- END x -->
markers with the freshly generated tables (results/...), each headed by the command, data and date it came
from. The GPU sections (kernel-bench, eval-gpu-kjv-hd128) are replaced only when the environment variable
OSCAR_GPU_STAMP is non-empty (a GPU run: its date, device, time); otherwise they are left as they are. The
sections named in OSCAR_KEEP_SECTIONS (space-separated; regenerate.sh --quick: sweep-smollm2, and tni and eval-smollm2
where SmolLM2 is absent) are left as they are too.
Writes README atomically; fails (README untouched) if any table is missing."""
import os, re, sys

readme, stamp = sys.argv[1], sys.argv[2]
res = sys.argv[3] if len(sys.argv) > 3 else "results"
def tni(folder="tni", cmd="bash experiments/main.sh", plots=True):
    t = open(f"{res}/{folder}/table.txt").read()
    # "Token Norm Imbalance: PATH (MODEL; 30 layers, ..., 2048 tokens, float16)": the model and passage
    what = re.search(r"^Token Norm Imbalance: \S+ \((.*)\)$", t, re.M).group(1)
    loss = re.search(r"^passage mean next-token loss: (.*)$", t, re.M)
    summary = t[t.index("TNI summary"):].strip()
    return (f"`{cmd}` ({stamp}); Revelation (held out), {what}"
            f"{'; mean next-token loss ' + loss.group(1) if loss else ''}:\n\n```\n{summary}\n```\n\n"
            f"![Attention sink per layer]({res}/{folder}/sinks.png)\n\n![Token norms]({res}/{folder}/token_norms.png)")
def tasks(name):
    md = open(f"{res}/tasks/{name}/tasks.md").read().strip()
    return f"`experiments/run_tasks.sh` ({stamp}):\n\n{md}"
def sweep(name):
    md = open(f"{res}/sweep/{name}/summary.md").read()
    md = "\n".join(l for l in md.splitlines() if not l.startswith("<!--")).strip()
    return f"`oscar-sweep experiments/sweeps/{name}.yaml` ({stamp}):\n\n{md}\n\n![Pareto plot]({res}/sweep/{name}/pareto.png)"
def evaluation(name, cmd):
    md = open(f"{res}/eval/{name}/eval.md").read().strip()
    return f"`{cmd}` ({stamp}):\n\n{md}\n\n![Recall plot]({res}/eval/{name}/recall.png)"
gpu_stamp = os.environ.get("OSCAR_GPU_STAMP", "")
def kernel_bench():
    cmd = open(f"{res}/kernel_bench.cmd").read().strip()
    md = open(f"{res}/kernel_bench.md").read().strip().replace("\n### ", "\n#### ")  # under README's ### heading
    return f"GPU run: `{cmd}` ({gpu_stamp}; JSON in `{res}/kernel_bench.json`):\n\n{md}"
def eval_gpu():
    cmd = open(f"{res}/eval-gpu-kjv-hd128/cmd").read().strip()
    md = open(f"{res}/eval-gpu-kjv-hd128/eval.md").read().strip()
    return f"GPU run: `{cmd}` ({gpu_stamp}):\n\n{md}"
blocks = {"eval-kjv-hd128": lambda: evaluation("kjv-hd128", "experiments/run_eval.sh"),
          "eval-stories260k": lambda: evaluation("stories260k", "experiments/run_eval.sh"),
          "tni": tni, "sweep-kjv-hd128": lambda: sweep("kjv-hd128"), "sweep-stories260k": lambda: sweep("stories260k"),
          "sweep-smollm2": lambda: sweep("smollm2"), "eval-smollm2": lambda: evaluation("smollm2", "experiments/run_eval.sh"),
          "tni-gemma3": lambda: tni("tni-gemma3", "oscar-analyze results/dumps/gemma3-revelation.h5 (regenerate.sh)"),
          "sweep-gemma3": lambda: sweep("gemma3"), "eval-gemma3": lambda: evaluation("gemma3", "experiments/run_eval.sh"),
          "tasks-smollm2": lambda: tasks("smollm2"), "tasks-gemma3": lambda: tasks("gemma3")}
for name in os.environ.get("OSCAR_KEEP_SECTIONS", "").split():
    blocks.pop(name, None)
if gpu_stamp:
    blocks.update({"kernel-bench": kernel_bench, "eval-gpu-kjv-hd128": eval_gpu})
text = open(readme).read()
for name, make in blocks.items():
    pat = re.compile(rf"(<!-- BEGIN {re.escape(name)} -->\n).*?(<!-- END {re.escape(name)} -->)", re.S)
    if not pat.search(text):
        sys.exit(f"splice_readme: {readme} has no <!-- BEGIN {name} --> ... <!-- END {name} --> markers")
    body = make()
    text = pat.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)
tmp = readme + ".tmp"
open(tmp, "w").write(text)
os.replace(tmp, readme)
