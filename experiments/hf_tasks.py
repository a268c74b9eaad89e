"""hf_tasks.py: long-context task accuracy of a Hugging Face model whose cache is decoded by the oscar-kv kernels
(experiments/hf_eval.py --tasks), served as oscar-eval --tasks serves it on the CPU (lib/include/oscar/09_eval/
task_eval.h): each sample's context (its ids [0, question_start) as oscar-tasks wrote them) is one forward pass (the
prompt's own attention by SDPA, its keys and values then written into the quantized cache), the question's ids are a
second pass (the kernels decode them one at a time), and the answer is generated greedily from that cache. Scores:
RULER's string_match_all (the share of the expected answers in the generated text, case ignored); cells (recipe, task,
length) with Wilson's 95% interval; ⚠ where full precision (the model in float32, an ordinary DynamicCache) scores under
80%. The prompts' ids come from the task file, so a model whose transformers tokenizer is wrong (Gemma 3's from GGUF)
runs the same tokens; the tokenizer only decodes the answers.
Errors are hf_eval.Refusal (one line: what is wrong; what to do). Used by experiments/hf_eval.py --tasks (this
folder on sys.path).
"""
import json
import math
import os
import re

from hf_eval import HALF, Refusal, _csv

REFERENCE = "full precision (fp32)"
FLOOR = 0.8  # full precision under this: the cell cannot separate recipes
ANSWER_TOKENS = {"passkey": 8, "niah_single": 12, "niah_multikey": 12, "variable_tracking": 32}  # as long_tasks.cpp


def read_tasks(path, vocab):
    """The samples of an oscar-tasks file; each must carry prompt_ids and question_start."""
    if not os.path.isfile(path):
        raise Refusal(f"--tasks {path}: no such file; write one with oscar-tasks --model MODEL --out FILE")
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                s = json.loads(line)
                for k in ("task", "target_tokens", "depth", "index", "answers"):
                    if k not in s:
                        raise ValueError(f"no '{k}'")
                if s["task"] not in ANSWER_TOKENS:
                    raise ValueError(f"unknown task {s['task']!r}")
            except ValueError as e:
                raise Refusal(f"{path}: line {n}: not a task of oscar-tasks ({e}); regenerate the file") from None
            if "prompt_ids" not in s:
                raise Refusal(f"{path}: line {n} has no prompt_ids; write the file with this version of oscar-tasks (it adds "
                              "the model's token ids)")
            ids, q = s["prompt_ids"], s.get("question_start", -1)
            if not ids or not 1 <= q < len(ids) or max(ids) >= vocab or min(ids) < 0:
                raise Refusal(f"{path}: line {n}: prompt_ids / question_start do not fit a model of {vocab} tokens; the file "
                              "was written for another model: run oscar-tasks with this model")
            out.append(s)
    if not out:
        raise Refusal(f"{path}: holds no task; write one with oscar-tasks")
    return out


def score(answers, text):
    """RULER's string_match_all for one sample, each answer matched as a whole value (lib's score_answer): not inside
    a longer run of letters and digits, so that the key 22855 is not found in "228555"."""
    t = text.lower()
    return sum(1.0 for a in answers if re.search(r"(?<![^\W_])" + re.escape(a.lower()) + r"(?![^\W_])", t)) / len(answers)


def wilson(successes, n, z=1.959963984540054):
    """Wilson's score interval of successes / n (NaN, NaN when n = 0), as lib's wilson_interval."""
    if n <= 0:
        return float("nan"), float("nan")
    p, z2 = successes / n, z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    return (0.0 if successes <= 0 else max(0.0, centre - half)), (1.0 if successes >= n else min(1.0, centre + half))


def answer(model, cache, ids, q, n):
    """Context ids[:q] in one pass, the question ids[q:] in a second, then n greedy tokens; returns the new ids."""
    import torch
    from oscar_kv.hf import cache_argument
    device = next(model.parameters()).device
    kw = dict(use_cache=True, logits_to_keep=1, **cache_argument(model, cache))
    out = []
    with torch.inference_mode():
        t = torch.tensor([ids[:q]], dtype=torch.long, device=device)
        model(input_ids=t, **kw)
        t = torch.tensor([ids[q:]], dtype=torch.long, device=device)
        logits = model(input_ids=t, **kw).logits[0, -1]
        for i in range(n):
            nxt = int(torch.argmax(logits).item())
            out.append(nxt)
            if i + 1 < n:
                t = torch.tensor([[nxt]], dtype=torch.long, device=device)
                logits = model(input_ids=t, **kw).logits[0, -1]
    return out


def run(model, tok, name, samples, jobs, log=print):
    """Every sample through full precision, then every job of `jobs` (hf_eval.Jobs); returns the result dict."""
    import torch
    from transformers import DynamicCache
    ctx = getattr(model.config.get_text_config(decoder=True), "max_position_embeddings", None)
    for s in samples:
        need = len(s["prompt_ids"]) + ANSWER_TOKENS[s["task"]]
        if ctx and need > ctx:
            raise Refusal(f"a {s['task']} prompt of {len(s['prompt_ids'])} tokens with its answer exceeds {name}'s context of "
                          f"{ctx}; write the tasks with oscar-tasks for this model")
    variants = [(REFERENCE, None, None)] + [(r if r in HALF else f"{r}@{b}", r, b) for r, b in jobs.list]
    res = {"model": name, "device": torch.cuda.get_device_name(next(model.parameters()).device), "outcomes": [],
           "summaries": {}}
    for label, r, b in variants:
        for s in samples:
            ids, q, n = s["prompt_ids"], s["question_start"], ANSWER_TOKENS[s["task"]]
            cache = DynamicCache(config=model.config) if r is None else jobs.cache(r, b, len(ids) + n)
            gen = answer(model, cache, ids, q, n)
            text = tok.decode(gen) if tok is not None else ""
            res["outcomes"].append(dict(recipe=label, task=s["task"], length=s["target_tokens"], depth=s["depth"],
                                        index=s["index"], prompt_tokens=len(ids), score=score(s["answers"], text),
                                        answer=text, ids=gen))
            res["summaries"][label] = cache.summary() if hasattr(cache, "summary") else "DynamicCache (full precision)"
            del cache
        done = [o for o in res["outcomes"] if o["recipe"] == label]
        log(f"{label}: {sum(o['score'] for o in done):g} of {len(done)}; {res['summaries'][label]}")
    return res


def cells(res):
    """[(recipe, task, length, n, score, lo, hi, weak)], tasks pooled as 'all' too."""
    recipes, tasks, lengths = [], [], []
    for o in res["outcomes"]:
        for lst, v in ((recipes, o["recipe"]), (tasks, o["task"]), (lengths, o["length"])):
            if v not in lst:
                lst.append(v)
    lengths.sort()
    table = {}
    for r in recipes:
        for t in tasks + ["all"]:
            for L in lengths:
                sel = [o for o in res["outcomes"] if o["recipe"] == r and o["length"] == L and t in ("all", o["task"])]
                sc = sum(o["score"] for o in sel)
                table[(r, t, L)] = (len(sel), sc) + wilson(sc, len(sel))
    rows = []
    for (r, t, L), (n, sc, lo, hi) in table.items():
        rn, rsc = table[(REFERENCE, t, L)][:2]
        rows.append(dict(recipe=r, task=t, length=L, n=n, score=sc, accuracy=sc / n if n else float("nan"), ci_lo=lo,
                         ci_hi=hi, reference_below_80=int(rn > 0 and rsc / rn < FLOOR)))
    return rows, recipes, tasks, lengths


def markdown(res, source):
    rows, recipes, tasks, lengths = cells(res)
    get = {(c["recipe"], c["task"], c["length"]): c for c in rows}
    pct = lambda x: "-" if x != x else f"{100 * x:.0f}"  # noqa: E731
    out = [f"**{res['model']}** (Hugging Face, transformers + oscar_kv.hf, {res['device']}), long-context tasks of {source} "
           f"({len([o for o in res['outcomes'] if o['recipe'] == REFERENCE])} samples; the context prefilled and stored in "
           "the cache, the question decoded and the answer generated greedily from it; the oscar-* rows through the "
           "oscar-kv kernels): accuracy (RULER's string_match_all) with Wilson's 95% interval and (score/samples); ⚠: "
           f"full precision scores under {100 * FLOOR:.0f}% there, so the cell cannot separate recipes.", ""]
    for t in ["all"] + tasks:
        out += ["All tasks pooled:" if t == "all" else f"`{t}`:", "",
                "| recipe | " + " | ".join(f"{L // 1024}K" if L % 1024 == 0 else str(L) for L in lengths) + " |",
                "|---|" + "---|" * len(lengths)]
        for r in recipes:
            cs = []
            for L in lengths:
                c = get[(r, t, L)]
                cs.append("-" if not c["n"] else f"{'⚠ ' if c['reference_below_80'] else ''}{pct(c['accuracy'])}% "
                          f"[{pct(c['ci_lo'])}, {pct(c['ci_hi'])}] ({c['score']:g}/{c['n']})")
            out.append(f"| {r} | " + " | ".join(cs) + " |")
        out.append("")
    out += ["Caches: " + "; ".join(f"{k}: {v}" for k, v in res["summaries"].items()), ""]
    return "\n".join(out)


def output_files(res, source):
    rows = cells(res)[0]
    jsonl = "".join(json.dumps({k: v for k, v in o.items()}, ensure_ascii=False) + "\n" for o in res["outcomes"])
    return {"tasks.md": markdown(res, source),
            "tasks.csv": _csv(rows, ["recipe", "task", "length", "n", "score", "accuracy", "ci_lo", "ci_hi",
                                     "reference_below_80"]),
            "answers.jsonl": jsonl}
