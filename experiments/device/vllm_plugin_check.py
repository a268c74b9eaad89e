#!/usr/bin/env python3
"""vllm_plugin_check.py OUT [MODEL_DIR [TASKS]]: vllm.LLM serving through the oscar_kv plugin (kv_cache_dtype oscar_cov_int2)
beside vLLM's own BF16 cache, on the GPU machine. Each configuration runs in its own process (VLLM_ENABLE_V1_MULTIPROCESSING=0,
the plugin registered in it) with a time limit:
  bf16-eager, int2-eager, int2-graphs: the same prompts of mixed lengths (prompts longer than the 320-token windows, so
    most of the cache is in 2-bit pages), greedy, 32 new tokens; KV capacity as vLLM reports it (blocks x block size);
  int2-alone: each prompt alone (eager): the batch must give the same tokens as each request alone.
MODEL_DIR: a transformers folder (config.json + weights); default: a Llama-shaped model of dummy weights (4 layers,
16 query / 8 KV heads, head_dim 128) with random orthogonal rotations (OSCAR_KV_ROTATIONS=random); dummy weights give
degenerate text, so only the real model's runs say anything about accuracy.
TASKS: an oscar-tasks file (prompt_ids): the prompts are its samples (the whole prompt prefilled, the answer decoded from
the cache, RULER's string_match_all against its answers), int2-preempt runs them in a pool of 17 pages, so that vLLM
preempts requests (frees their pages and windows) and recomputes them later (the preemptions are counted; a recomputed
request prefills its generated tokens in BF16, so its ids may differ from int2-eager's after the preemption, its answer
should not), and a deliberately broken run (int2-broken: every request's BF16 windows in one shared slot) must lose
accuracy, which shows the check can fail. OSCAR_CHECK_RUNS=NAME,... runs only those configurations. Writes
OUT/plugin.json and a log per configuration; prints one line each. Needs vllm importable (vllm_carry.sh sets PYTHONPATH)
and the package oscar_kv with its kernel library (OSCAR_KERNELS_LIB)."""
import json
import os
import sys
import tempfile

from vllm_child import SMALL_LLAMA as CONFIG, run_child, write_config

CHILD = r'''
import json, os, sys, time
folder, dtype, eager, alone, dummy, tasks, variant = sys.argv[1:8]
eager, alone, dummy, broken = eager == "eager", alone == "alone", dummy == "dummy", variant == "broken"
import oscar_kv.vllm
oscar_kv.vllm.register()
if broken:  # deliberately wrong: every request's windows in the one scratch slot
    sys.path.insert(0, os.environ["OSCAR_DEVICE_SCRIPTS"])
    from vllm_broken import share_window_slots
    share_window_slots()
preempted = []
if variant == "preempt":  # a pool of 17 pages (the 4096-token context and little more): requests get preempted (vLLM frees their pages) and recomputed later
    from vllm.v1.core.sched.scheduler import Scheduler
    preempt = Scheduler._preempt_request
    def counted(self, request, *a, **k):
        preempted.append(request.request_id)
        return preempt(self, request, *a, **k)
    Scheduler._preempt_request = counted
from vllm import LLM, SamplingParams
t0 = time.time()
kw = dict(load_format="dummy", skip_tokenizer_init=True) if dummy else {}
llm = LLM(model=folder, dtype="bfloat16", max_model_len=4096, gpu_memory_utilization=0.5, enforce_eager=eager, seed=0,
          kv_cache_dtype=dtype, enable_prefix_caching=False, max_num_seqs=16,
          **(dict(num_gpu_blocks_override=17) if variant == "preempt" else {}), **kw)
t_init = time.time() - t0
cc = llm.llm_engine.vllm_config.cache_config
if tasks != "-":
    samples = [json.loads(l) for l in open(tasks) if l.strip()]
    prompts = [{"prompt_token_ids": s["prompt_ids"]} for s in samples]
    ntok = {"passkey": 8, "niah_single": 12, "niah_multikey": 12, "variable_tracking": 32}
    sps = [SamplingParams(temperature=0.0, max_tokens=ntok[s["task"]], ignore_eos=True) for s in samples]
else:
    lens = [150, 700, 1500, 333, 2600, 40]
    samples = []
    prompts = [{"prompt_token_ids": [(7 * i + 13 * t) % 30000 + 100 for t in range(n)]} for i, n in enumerate(lens)]
    sps = [SamplingParams(temperature=0.0, max_tokens=32, detokenize=False, ignore_eos=True)] * len(prompts)
t0 = time.time()
if alone:
    outs = [llm.generate([p], sp)[0] for p, sp in zip(prompts, sps)]
else:
    outs = llm.generate(prompts, sps)
t_gen = time.time() - t0
ids = [list(o.outputs[0].token_ids) for o in outs]
texts = [o.outputs[0].text or "" for o in outs]
scores = []
for s, t in zip(samples, texts):
    scores.append(sum(a.lower() in t.lower() for a in s["answers"]) / len(s["answers"]))
print("RESULT " + json.dumps({"init_s": t_init, "generate_s": t_gen, "ids": ids, "texts": texts, "scores": scores,
                              "cells": [[s["task"], s["target_tokens"]] for s in samples],
                              "num_gpu_blocks": cc.num_gpu_blocks, "block_size": cc.block_size, "preemptions": len(preempted)}))
'''


def agreement(a, b):
    """Share of positions where two greedy continuations agree, up to the first disagreement of each request."""
    same = tot = prefix = 0
    for x, y in zip(a, b):
        k = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), len(x))
        prefix += k
        tot += len(x)
        same += sum(p == q for p, q in zip(x, y))
    return same / max(tot, 1), prefix / max(len(a), 1)


def main():
    out = sys.argv[1]
    model = sys.argv[2] if len(sys.argv) > 2 else None
    tasks = sys.argv[3] if len(sys.argv) > 3 else "-"
    os.makedirs(out, exist_ok=True)
    res = {"model": model or CONFIG, "runs": {}}
    with tempfile.TemporaryDirectory() as d:
        if model is None:
            write_config(d, CONFIG)
        folder = model or d
        runs = [("bf16-eager", "auto", "eager", "batch"), ("bf16-alone", "auto", "eager", "alone"), ("int2-eager", "oscar_cov_int2", "eager", "batch"),
                ("int2-alone", "oscar_cov_int2", "eager", "alone"), ("int2-graphs", "oscar_cov_int2", "graphs", "batch")]
        if tasks != "-":
            runs += [("int2-preempt", "oscar_cov_int2", "eager", "batch"), ("int2-broken", "oscar_cov_int2", "eager", "batch")]
        only = [n for n in os.environ.get("OSCAR_CHECK_RUNS", "").split(",") if n]  # a subset, e.g. bf16-eager,int2-eager,int2-preempt
        if only:
            unknown = sorted(set(only) - {n for n, *_ in runs})
            if unknown:
                sys.exit(f"vllm_plugin_check: error: OSCAR_CHECK_RUNS: unknown run(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(n for n, *_ in runs)}")
            runs = [r for r in runs if r[0] in only]
        for name, dtype, mode, how in runs:
            env = dict(os.environ, OSCAR_DEVICE_SCRIPTS=os.path.dirname(os.path.abspath(__file__)))
            env.setdefault("OSCAR_KV_ROTATIONS", "random")
            line, rc, wall, text = run_child(CHILD, [folder, dtype, mode, how, "dummy" if model is None else "real", tasks,
                                                     name.split("-")[-1] if name.endswith(("broken", "preempt")) else "ok"],
                                             400, env)
            r = dict(line or {}, rc=rc, wall_s=wall)
            res["runs"][name] = r
            with open(os.path.join(out, f"{name}.log"), "w") as f:
                f.write(text)
            msg = f"{name}: rc {rc}, {r['wall_s']} s"
            if line:
                msg += (f", init {r['init_s']:.1f} s, generate {r['generate_s']:.2f} s, KV capacity "
                        f"{r['num_gpu_blocks'] * r['block_size']} tokens ({r['num_gpu_blocks']} blocks of {r['block_size']})")
                base = res["runs"].get("bf16-eager", {}).get("ids")
                if base and not name.startswith("bf16"):
                    share, prefix = agreement(r["ids"], base)
                    msg += f"; vs bf16: {share:.1%} of tokens agree, mean agreeing prefix {prefix:.1f}"
                if r["scores"]:
                    r["accuracy"] = sum(r["scores"]) / len(r["scores"])
                    by = {}
                    for (task, n), sc in zip(r["cells"], r["scores"]):
                        by.setdefault(f"{task}@{n}", []).append(sc)
                    r["by_cell"] = {k: f"{sum(v):g}/{len(v)}" for k, v in sorted(by.items())}
                    msg += f"; tasks {sum(r['scores']):g}/{len(r['scores'])} {r['by_cell']}"
                if name == "bf16-alone" and base:
                    r["same_as_bf16_eager"] = r["ids"] == base
                    msg += f"; same ids as bf16-eager: {r['ids'] == base} ({sum(x != y for x, y in zip(r['ids'], base))} requests differ)"
                ref = res["runs"].get("int2-eager", {}).get("ids")
                if ref and name in ("int2-alone", "int2-graphs", "int2-preempt"):
                    r["same_as_int2_eager"] = r["ids"] == ref
                    msg += f"; same ids as int2-eager: {r['ids'] == ref} ({sum(x != y for x, y in zip(r['ids'], ref))} requests differ)"
                    if name == "int2-preempt":
                        share, _ = agreement(r["ids"], ref)
                        msg += f", {r['preemptions']} preemptions (pool of {r['num_gpu_blocks']} pages), {share:.1%} of tokens as int2-eager"
            else:
                msg += "; log tail:\n" + text[-3000:]
            print(msg, flush=True)
    with open(os.path.join(out, "plugin.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
