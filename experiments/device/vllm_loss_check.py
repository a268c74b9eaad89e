#!/usr/bin/env python3
"""vllm_loss_check.py OUT MODEL_DIR EVAL_JSON [EVAL_JSON ...] [--bits 2|4]: oscar-eval's teacher-forced loss and greedy generation
reproduced inside vLLM, through the oscar_kv plugin's decode path, on the GPU machine.

Each EVAL_JSON is the eval.json of `oscar-eval --recipes fp16,oscar-cov --bits B --prompt P --generate N` on the model
whose transformers folder is MODEL_DIR (experiments/hf/gguf_to_hf.py of the same GGUF), with the rotations that
OSCAR_KV_ROTATIONS names fitted on the same calibration dump (oscar-rotate --calib D; oscar-eval --calib-dump D). It
carries the passage's token ids and the greedy prompt's (context + prompt) ids and continuations.

oscar-eval decodes every token from the cache as it stood when that token came (token-by-token semantics). vLLM would
prefill a prompt in BF16, so here every request's prompt is its first token only and the rest is forced: vLLM's
sampler (V2 model runner) is wrapped to emit the known next token of each request, the logprob of that token comes from
the raw logits (vLLM's default logprobs mode), and each token then goes through the engine's decode step and the
plugin's paged write and decode kernels (CUDA graphs on). Per passage: the mean next-token loss over the same
predictions as oscar-eval's, and the top-1 next token at every position (agreement with oscar-eval's, when its
eval.json carries argmax_ids); per greedy prompt: the prompt forced, then N free greedy tokens.

Runs, each in its own process: bf16 (vLLM's own cache), int2 (kv_cache_dtype oscar_cov_int2; int4 with --bits 4),
int2-broken (every request's BF16 windows in one shared slot: a deliberately wrong cache, which the check must catch).
All passages and prompts of a run go in one batch. Pass: the engine's Δloss (int2 - bf16), pooled over the passages,
within 0.02 nats of oscar-eval's oscar-cov@2 (@4) Δloss (against its fp32 cache), and the broken run outside it.
Writes OUT/loss.json and OUT/loss.md; prints the table. Needs vLLM importable (vllm_carry.sh run) and oscar_kv with
its kernel library (OSCAR_KERNELS_LIB)."""
import argparse
import json
import os
import subprocess
import sys
import time

TOLERANCE = 0.02  # nats: the engine's Δloss against oscar-eval's

CHILD = r'''
import json, os, sys, time
folder, dtype, mode, cases_path = sys.argv[1:5]
import torch
if dtype.startswith("oscar"):
    import oscar_kv.vllm
    oscar_kv.vllm.register()
    if mode == "broken":  # deliberately wrong: every request's windows in the one scratch slot
        sys.path.insert(0, os.environ["OSCAR_DEVICE_SCRIPTS"])
        from vllm_broken import share_window_slots
        share_window_slots()
from vllm.v1.worker.gpu.sample.sampler import Sampler
FORCE_LEN = 8192
init, add, sample = Sampler.__init__, Sampler.add_request, Sampler.sample
def s_init(self, max_num_reqs, vocab_size, device, *a, **k):
    init(self, max_num_reqs, vocab_size, device, *a, **k)
    self.forced = torch.full((max_num_reqs, FORCE_LEN), -1, dtype=torch.int64, device=device)
def s_add(self, req_idx, prompt_len, sp):
    add(self, req_idx, prompt_len, sp)
    ids = (sp.extra_args or {}).get("force", [])
    self.forced[req_idx].fill_(-1)
    if ids:  # forced[p] = the token at position p
        self.forced[req_idx, :len(ids)] = torch.tensor(ids, dtype=torch.int64, device=self.forced.device)
def s_sample(self, logits, expanded_idx_mapping, idx_mapping_np, pos, *a, **k):
    sampled, processed = sample(self, logits, expanded_idx_mapping, idx_mapping_np, pos, *a, **k)
    f = self.forced[expanded_idx_mapping.long(), (pos.long() + 1).clamp(max=FORCE_LEN - 1)]
    return torch.where(f >= 0, f.to(sampled.dtype), sampled), processed
Sampler.__init__, Sampler.add_request, Sampler.sample = s_init, s_add, s_sample
from vllm import LLM, SamplingParams
cases = json.load(open(cases_path))
t0 = time.time()
llm = LLM(model=folder, dtype="bfloat16", max_model_len=4096, gpu_memory_utilization=0.5, enforce_eager=mode != "graphs",
          seed=0, kv_cache_dtype=dtype, enable_prefix_caching=False, max_num_seqs=16, skip_tokenizer_init=True)
init_s = time.time() - t0
prompts, sps = [], []
for c in cases["passages"]:
    ids = c["ids"]
    prompts.append({"prompt_token_ids": ids[:1]})
    sps.append(SamplingParams(temperature=0.0, max_tokens=len(ids) - 1, ignore_eos=True, logprobs=1, detokenize=False,
                              extra_args={"force": ids}))
for g in cases["greedy"]:
    ctx = g["context_ids"]
    prompts.append({"prompt_token_ids": ctx[:1]})
    sps.append(SamplingParams(temperature=0.0, max_tokens=len(ctx) - 1 + g["generate"], ignore_eos=True, detokenize=False,
                              extra_args={"force": ctx}))
t0 = time.time()
outs = llm.generate(prompts, sps)
gen_s = time.time() - t0
res = {"init_s": init_s, "generate_s": gen_s, "passages": [], "greedy": []}
for c, o in zip(cases["passages"], outs):
    got = list(o.outputs[0].token_ids)
    lps = [d[t].logprob for d, t in zip(o.outputs[0].logprobs, got)]
    top1 = [next((k for k, v in d.items() if v.rank == 1), None) for d in o.outputs[0].logprobs]  # the engine's argmax
    res["passages"].append({"forced_ok": got == c["ids"][1:], "loss": -sum(lps) / len(lps), "predictions": len(lps), "argmax": top1})
for g, o in zip(cases["greedy"], outs[len(cases["passages"]):]):
    got = list(o.outputs[0].token_ids)
    n = len(g["context_ids"]) - 1
    res["greedy"].append({"forced_ok": got[:n] == g["context_ids"][1:], "ids": got[n:]})
print("RESULT " + json.dumps(res))
'''


def shared_prefix(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def cases_of(paths, bits=2):
    """The passages and greedy prompts of oscar-eval's eval.json files, with oscar-eval's numbers of oscar-cov@bits."""
    recipe = f"oscar-cov@{bits}"
    out = {"passages": [], "greedy": []}
    for p in paths:
        try:
            with open(p) as f:
                j = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit(f"vllm_loss_check: error: {p}: cannot read oscar-eval's eval.json ({e}); give the file oscar-eval --out wrote")
        if "passage_ids" not in j:
            sys.exit(f"vllm_loss_check: error: {p}: no passage_ids; run an oscar-eval that writes them (this tree's)")
        rows = {r["recipe"]: r for r in j["rows"]}
        if recipe not in rows:
            sys.exit(f"vllm_loss_check: error: {p}: no {recipe} row; run oscar-eval --recipes fp16,oscar-cov --bits {bits}")
        q = rows[recipe]
        out["passages"].append({"source": p, "passage": j["passage"], "ids": j["passage_ids"], "oe_loss_fp32": q["loss"] - q["dloss"]["mean"],
                                "oe_loss_q": q["loss"], "oe_dloss": q["dloss"]["mean"], "oe_dloss_ci": [q["dloss"]["lo"], q["dloss"]["hi"]],
                                "oe_quantized_share": q["quantized_share"], "oe_argmax_fp32": j.get("fp32_argmax_ids"),
                                "oe_argmax_q": q.get("argmax_ids")})
        if j.get("greedy_context_ids"):
            by = {g["recipe"]: g for g in j["greedy"]}
            out["greedy"].append({"source": p, "context_ids": j["greedy_context_ids"], "generate": by[recipe]["generated"],
                                  "oe_fp32": by["full precision (fp32)"]["ids"], "oe_q": by[recipe]["ids"]})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("model")
    ap.add_argument("evals", nargs="+")
    ap.add_argument("--bits", type=int, choices=(2, 4), default=2)
    a = ap.parse_args()
    out, model, evals, bits = a.out, a.model, a.evals, a.bits
    Q, R = f"int{bits}", f"oscar-cov@{bits}"  # the run's and oscar-eval's names
    cases = cases_of(evals, bits)  # the inputs checked before anything is written
    os.makedirs(out, exist_ok=True)
    cpath = os.path.join(out, "cases.json")
    with open(cpath, "w") as f:
        json.dump(cases, f)
    runs = {}
    for name, dtype, mode in (("bf16", "auto", "graphs"), (Q, f"oscar_cov_{Q}", "graphs"), (f"{Q}-broken", f"oscar_cov_{Q}", "broken")):
        t0 = time.time()
        env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", OSCAR_DEVICE_SCRIPTS=os.path.dirname(os.path.abspath(__file__)))
        try:
            p = subprocess.run([sys.executable, "-c", CHILD, model, dtype, mode, cpath], capture_output=True, text=True,
                               timeout=420, env=env)
            rc, text = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            rc, text = "timeout", (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
        with open(os.path.join(out, f"{name}.log"), "w") as f:
            f.write(text)
        line = next((l for l in text.splitlines() if l.startswith("RESULT ")), None)
        runs[name] = dict(json.loads(line[7:]) if line else {"log_tail": text[-3000:]}, rc=rc, wall_s=round(time.time() - t0, 1))
        print(f"{name}: rc {rc}, {runs[name]['wall_s']} s" + ("" if line else "; log tail:\n" + text[-3000:]), flush=True)
    res = {"cases": [{k: v for k, v in c.items() if k != "ids" and not k.startswith("oe_argmax")} for c in cases["passages"]], "runs": runs, "tolerance": TOLERANCE}
    lines = [f"| passage | predictions | in low bits | oscar-eval fp32 loss | vLLM BF16 loss | oscar-eval Δ {R} [95%] | vLLM Δ oscar_cov_{Q} | "
             "difference | vLLM Δ broken |", "|---|---|---|---|---|---|---|---|---|"]
    ok = all(r.get("rc") == 0 for r in runs.values())
    if ok:
        b, q, x = runs["bf16"]["passages"], runs[Q]["passages"], runs[f"{Q}-broken"]["passages"]
        forced = all(r["forced_ok"] for run in runs.values() for r in run["passages"] + run["greedy"])
        n = [r["predictions"] for r in b]
        pool = lambda v: sum(a * w for a, w in zip(v, n)) / sum(n)
        d_oe = [c["oe_dloss"] for c in cases["passages"]]
        d_en = [qi["loss"] - bi["loss"] for qi, bi in zip(q, b)]
        d_br = [xi["loss"] - bi["loss"] for xi, bi in zip(x, b)]
        for c, bi, do, de, dx, k in zip(cases["passages"], b, d_oe, d_en, d_br, n):
            lines.append(f"| {c['passage']} | {k} | {100 * c['oe_quantized_share']:.0f}% | {c['oe_loss_fp32']:.4f} | {bi['loss']:.4f} | {do:+.4f} [{c['oe_dloss_ci'][0]:+.4f}, "
                         f"{c['oe_dloss_ci'][1]:+.4f}] | {de:+.4f} | {de - do:+.4f} | {dx:+.4f} |")
        lines.append(f"| pooled | {sum(n)} | | | | {pool(d_oe):+.4f} | {pool(d_en):+.4f} | {pool(d_en) - pool(d_oe):+.4f} | {pool(d_br):+.4f} |")
        res.update(pooled_oe=pool(d_oe), pooled_engine=pool(d_en), pooled_broken=pool(d_br), forced_ok=forced,
                   within=abs(pool(d_en) - pool(d_oe)) <= TOLERANCE, broken_caught=abs(pool(d_br) - pool(d_oe)) > TOLERANCE)
        if all(c.get("oe_argmax_q") and c.get("oe_argmax_fp32") for c in cases["passages"]):
            # next-token (top-1) agreement under teacher forcing: the greedy choice at every position of the same text,
            # which does not compound the way a free greedy continuation does
            def agree(pairs):
                same = sum(sum(x == y for x, y in zip(a, b)) for a, b in pairs)
                return same / max(sum(len(a) for a, _ in pairs), 1)
            P = cases["passages"]
            cols = {f"oscar-eval {R} vs its fp32": [(c["oe_argmax_q"], c["oe_argmax_fp32"]) for c in P],
                    "vLLM BF16 vs oscar-eval fp32": [(bi["argmax"], c["oe_argmax_fp32"]) for bi, c in zip(b, P)],
                    f"vLLM {Q} vs oscar-eval {R}": [(qi["argmax"], c["oe_argmax_q"]) for qi, c in zip(q, P)],
                    f"vLLM {Q} vs vLLM BF16": [(qi["argmax"], bi["argmax"]) for qi, bi in zip(q, b)],
                    f"broken vs oscar-eval {R}": [(xi["argmax"], c["oe_argmax_q"]) for xi, c in zip(x, P)]}
            res["top1_agreement"] = {k: agree(v) for k, v in cols.items()}
            lines += ["", "| top-1 next-token agreement (teacher-forced) | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
            for i, c in enumerate(P):
                lines.append(f"| {c['passage']} | " + " | ".join(f"{agree([v[i]]):.3f}" for v in cols.values()) + " |")
            lines.append("| pooled | " + " | ".join(f"{res['top1_agreement'][k]:.3f}" for k in cols) + " |")
        lines += ["", f"| greedy prompt | context tokens | vLLM BF16 = oscar-eval fp32 (shared prefix) | vLLM {Q} = oscar-eval {R} "
                  f"(shared prefix) | tokens agreeing | broken = oscar-eval {R} |", "|---|---|---|---|---|---|"]
        agree = tot = 0
        for g, gb, gq, gx in zip(cases["greedy"], runs["bf16"]["greedy"], runs[Q]["greedy"], runs[f"{Q}-broken"]["greedy"]):
            same = sum(a == c for a, c in zip(gq["ids"], g["oe_q"]))
            agree, tot = agree + same, tot + len(g["oe_q"])
            lines.append(f"| {os.path.splitext(os.path.basename(g['source']))[0]} | {len(g['context_ids'])} | {shared_prefix(gb['ids'], g['oe_fp32'])}/"
                         f"{g['generate']} | {shared_prefix(gq['ids'], g['oe_q'])}/{g['generate']} | {same}/{len(g['oe_q'])} | "
                         f"{shared_prefix(gx['ids'], g['oe_q'])}/{g['generate']} |")
        res["greedy_token_agreement"] = agree / max(tot, 1)
        verdict = (f"forced tokens {'ok' if forced else 'NOT followed'}; pooled Δloss: vLLM {pool(d_en):+.4f}, oscar-eval {pool(d_oe):+.4f}, "
                   f"difference {pool(d_en) - pool(d_oe):+.4f} ({'within' if res['within'] else 'outside'} {TOLERANCE}); broken cache "
                   f"{pool(d_br):+.4f} ({'caught' if res['broken_caught'] else 'NOT caught'})")
        lines += ["", verdict]
    for run in runs.values():  # the per-position argmax ids made the top-1 table; 8K ids a run are not kept
        for r in run.get("passages", []):
            r.pop("argmax", None)
    with open(os.path.join(out, "loss.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(out, "loss.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    sys.exit(0 if ok and res.get("within") and res.get("broken_caught") and res.get("forced_ok") else 1)


if __name__ == "__main__":
    main()
