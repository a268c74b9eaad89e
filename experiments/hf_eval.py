#!/usr/bin/env python3
"""hf_eval.py: oscar-eval's evaluation of a Hugging Face causal LM whose cache is decoded by the oscar-kv kernels
(oscar_kv.hf.OscarCache), so that the GPU path can be held against the C++ reference (oscar-eval) on the same weights.

  # kjv-llama-hd128 exported (experiments/hf/export_llama2c.py), token ids from oscar-dump:
  python3 experiments/hf_eval.py --model /tmp/kjv-hf --token-ids rev.h5 --calib-ids gen.h5 \\
      --recipes oscar-omni,oscar-cov --bits 2 --needle 256,512,1024,1536 --out results/hf_eval/kjv
  # a model folder with its own tokenizer:
  python3 experiments/hf_eval.py --model HF_FOLDER --text data/text/kjv.txt.gz --offset -404 --tokens 1024 \\
      --recipes oscar-omni --bits 2,4 --prompt 'The capital of France is' --generate 24 --out OUT
  # long-context tasks (oscar-tasks --model GGUF writes them with the model's ids; experiments/hf_tasks.py scores them),
  # oscar-cov calibrated on a dump:
  python3 experiments/hf_eval.py --model HF_FOLDER --tasks tasks.jsonl --calib-ids gen.h5 \\
      --recipes bf16,oscar-omni,oscar-cov --bits 2 --out OUT
  # smoke test on a tiny random model (seeded random token ids unless --text):
  python3 experiments/hf_eval.py --random llama --tokens 256 --recipes oscar-omni --out OUT

Contract (as lib/include/oscar/09_eval/*.h does it): every token is fed ONE AT A TIME, teacher-forced, so the first
pass is one token (SDPA over it, then quantized on write) and every later token is appended and attended by the
decode kernel; full precision decoded the same way (the model in float32 with an ordinary DynamicCache) is the
reference. Per recipe and bit width: mean next-token loss over the T-1 predictions, perplexity, Δloss vs full
precision, mean KL(full || quantized) of the next-token distributions (float64 log-softmax), top-1 agreement (argmax,
lowest id on ties), and the cache summary (which layers ran on the kernels). The needle test lays out oscar-eval's
recall sequence (start, A, newline, filler[0 .. D-2), newline, A, with A the first `span` tokens of the evaluated
passage after BOS and the filler the calibration passage's body): the loss on the repeat and on the first reading,
teacher-forced, and from the repeat's first `prefix` tokens a greedy continuation: the fraction of A's remaining
tokens reproduced position by position, and how many before the first miss. Greedy agreement: from a prompt, the
generated tokens equal to full precision's before the first divergence.

Writes OUT/eval.md, eval.csv (and needle.csv, greedy.csv when asked), all at the end, each renamed into place; the
folder is checked before any work. oscar-cov's rotations: --rotations FILE (oscar-rotate), else fitted on the
calibration passage (oscar_kv.hf.calibrate, which runs oscar-rotate: installed with the package, or beside the kernel
library) and kept as OUT/rotations-oscar-cov.h5. Errors: one line `hf_eval.py: error: ...; what to do`, exit 1;
nothing is written under --out until everything ran. Imported as a module (sys.path: experiments/), its functions
serve experiments/hf/compare_evals.py and the tests.
"""
import argparse
import csv
import io
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels" / "python"))
from oscar_kv.checks import BITS, RECIPES  # noqa: E402  (no torch needed)

PROG = "hf_eval.py"
# Unquantized half-precision caches: an ordinary cache whose keys and values are rounded to this dtype as they are
# stored (the model runs in float32), as oscar-eval's fp16 row; one row each, no bit width.
HALF = ("fp16", "bf16")


class Refusal(Exception):
    """A one-line user error: `hf_eval.py: error: <message>`."""


def check_jobs(recipes, bits):
    """Refuses a recipe the kernels do not decode (nor an unquantized half-precision cache) or a bit width they do not
    store."""
    for r in recipes:
        if r not in RECIPES + HALF:
            raise Refusal(f"--recipes: {r!r} is not a kernel recipe; give {', '.join(RECIPES + HALF)} (oscar-eval runs "
                          "the other presets)")
    for b in bits:
        if b not in BITS:
            raise Refusal(f"--bits {b}: the kernels store 2 or 4 bits")


# ----------------------------------------------------------------------------------------------- inputs

def read_dump_ids(path, what):
    """(token ids, token texts or None) from an oscar-kv dump's /token_ids (and /token_text)."""
    import h5py
    if not os.path.isfile(path):
        raise Refusal(f"{path}: no such file; give an oscar-dump or hf_dump file for {what}")
    try:
        with h5py.File(path, "r") as f:
            if "token_ids" not in f:
                raise Refusal(f"{path}: has no /token_ids; give a dump written by oscar-dump or experiments/hf_dump.py")
            ids = [int(t) for t in f["token_ids"][...]]
            texts = None
            if "token_text" in f:
                texts = [t.decode("utf-8", "replace") if isinstance(t, bytes) else str(t) for t in f["token_text"][...]]
    except OSError as e:
        raise Refusal(f"{path}: not a readable HDF5 file ({e}); give an oscar-dump or hf_dump file for {what}")
    if not ids:
        raise Refusal(f"{path}: /token_ids is empty; dump a passage of some tokens")
    return ids, texts


def text_ids(text, offset, tokens, tok, vocab, what):
    """A passage of `tokens` ids from lines offset.. of `text`, tokenized as experiments/hf_dump.py does, and the
    first line after it (the line that follows the one the passage ends in; None past the end of the text)."""
    import hf_dump
    try:
        ids, texts, first, n_lines = hf_dump.passage_ids(text, offset, tokens, tok, vocab)
    except hf_dump.Refusal as e:
        raise Refusal(f"{e} (for {what})") from None
    if tok is not None:
        breaks = tok.decode(ids, skip_special_tokens=True).count("\n")
    else:  # byte ids: a line break is the token <0x0A>
        breaks = texts.count("<0x0A>")
    after = first + breaks + 1
    return ids, texts, (after if after < n_lines else None)


def newline_id(texts_list, tok):
    """The newline token: from the tokenizer when there is one, else a token whose text is a line break."""
    if tok is not None:
        ids = tok("\n", add_special_tokens=False)["input_ids"]
        if len(ids) >= 1:
            return ids[-1]
    for ids, texts in texts_list:
        for i, t in zip(ids, texts or []):
            if t in ("\n", "<0x0A>", "Ċ"):
                return i
    return None


def body_start(texts, tok):
    """Where a passage's body starts (oscar-eval's passage_body_start): after BOS, and after llama2.c's dummy-prefix
    space when the first token carries it."""
    start = 1
    if tok is None and texts and len(texts) > 1 and texts[1].startswith(" "):
        start += 1
    return start


def parse_list(s, what, lo=1):
    try:
        vals = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise Refusal(f"--{what} {s!r}: give comma-separated whole numbers") from None
    if not vals or any(v < lo for v in vals):
        raise Refusal(f"--{what} {s!r}: give comma-separated whole numbers >= {lo}")
    return vals


def check_output_folder(out):
    """Refuses `out` unless it is a writable folder or can be created (nearest existing ancestor writable)."""
    out = os.path.abspath(out)
    if os.path.exists(out):
        if not os.path.isdir(out):
            raise Refusal(f"{out}: exists and is not a folder; choose another --out")
        if not os.access(out, os.W_OK):
            raise Refusal(f"{out}: not writable; choose another --out")
        return out
    p = os.path.dirname(out)
    while not os.path.exists(p):
        p = os.path.dirname(p)
    if not os.path.isdir(p) or not os.access(p, os.W_OK):
        raise Refusal(f"{out}: cannot be created ({p} is not a writable folder); choose another --out")
    return out


# ----------------------------------------------------------------------------------------------- models

def load_model(folder, device):
    """(model in float32 on `device`, its tokenizer or None, name) from a Hugging Face folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if not os.path.isdir(folder) or not os.path.isfile(os.path.join(folder, "config.json")):
        raise Refusal(f"{folder}: not a Hugging Face model folder (no config.json); give one, e.g. made by "
                      "experiments/hf/export_llama2c.py")
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa")
    except Exception as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise Refusal(f"{folder}: transformers could not load the model ({type(e).__name__}: {msg}); check the folder")
    tok = None
    try:
        tok = AutoTokenizer.from_pretrained(folder)
    except Exception:
        tok = None  # e.g. an exported llama2.c checkpoint: give token ids instead
    return model.to(device).eval(), tok, os.path.basename(os.path.normpath(folder))


def random_model(arch, device):
    """(a seeded tiny random model of `arch` in float32 on `device`, no tokenizer, name)."""
    import torch
    from oscar_kv.hf import architectures
    if arch not in architectures.NAMES:
        raise Refusal(f"--random {arch}: unknown architecture; give one of {', '.join(architectures.NAMES)}")
    return architectures.random_model(arch, device, torch.float32).eval(), None, f"random-{arch}"


# ----------------------------------------------------------------------------------------------- decoding

def _step(model, cache, token, device):
    import torch
    from oscar_kv.hf import cache_argument
    ids = torch.tensor([[int(token)]], dtype=torch.long, device=device)
    out = model(input_ids=ids, use_cache=True, **cache_argument(model, cache))
    return out.logits[0, -1].float()


def teacher_forced(model, cache, ids):
    """Logits [len(ids)][vocab] (float32, on the model's device) of every position, the tokens fed one at a time."""
    import torch
    device = next(model.parameters()).device
    rows = []
    with torch.inference_mode():
        for t in ids:
            rows.append(_step(model, cache, t, device))
    return torch.stack(rows)


def greedy(model, cache, prompt, n, limit=None):
    """Feeds `prompt` one token at a time, then appends the argmax token (lowest id on ties) n times (or until
    `limit` tokens); returns the generated ids."""
    import torch
    device = next(model.parameters()).device
    out = []
    with torch.inference_mode():
        for t in prompt:
            logits = _step(model, cache, t, device)
        total = len(prompt)
        while len(out) < n and (limit is None or total < limit):
            nxt = int(torch.argmax(logits).item())
            out.append(nxt)
            total += 1
            if len(out) < n and (limit is None or total < limit):
                logits = _step(model, cache, nxt, device)
    return out


def losses(logits, ids):
    """Next-token losses (float64) predicting ids[1:] from rows [0, T-1)."""
    import torch
    lp = torch.log_softmax(logits[:-1].double(), dim=-1)
    tgt = torch.tensor(ids[1:], dtype=torch.long, device=logits.device)
    return -lp.gather(1, tgt[:, None])[:, 0]


def compare(ref, q):
    """(mean KL(ref || q), top-1 agreement) over rows [0, T-1)."""
    import torch
    a = torch.log_softmax(ref[:-1].double(), dim=-1)
    b = torch.log_softmax(q[:-1].double(), dim=-1)
    kl = (a.exp() * (a - b)).sum(-1).mean().item()
    top1 = (ref[:-1].argmax(-1) == q[:-1].argmax(-1)).double().mean().item()
    return kl, top1


def shared_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def needle_sequence(a, newline, filler, distance, start):
    """oscar-eval's recall sequence: (tokens, first, repeat), repeat - first = len(a) + distance."""
    if distance < 2:
        raise Refusal(f"--needle {distance}: too short; each distance must be at least 2 (the two line breaks)")
    if len(filler) < distance - 2:
        raise Refusal(f"--needle {distance}: the filler (calibration passage body) has {len(filler)} tokens, "
                      f"{distance - 2} are needed; give a longer calibration passage (--calib-ids of more tokens)")
    toks = [start] + list(a) + [newline] + list(filler[: distance - 2]) + [newline]
    repeat = len(toks)
    return toks + list(a), 1, repeat


# ----------------------------------------------------------------------------------------------- the run

def rounded_cache(model, dtype_name):
    """A DynamicCache that stores keys and values rounded to float16 / bfloat16 (then back to the model's dtype)."""
    import torch
    from transformers import DynamicCache
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]

    class RoundedCache(DynamicCache):
        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            return super().update(key_states.to(dt).to(key_states.dtype), value_states.to(dt).to(value_states.dtype),
                                  layer_idx, *args, **kwargs)

        def summary(self):
            return f"DynamicCache, keys and values rounded to {dt}".replace("torch.", "")
    return RoundedCache(config=model.config)


class Jobs:
    """The recipe x bits jobs and their caches (a half-precision recipe is one job, bits 16)."""

    def __init__(self, model, recipes, bits, rotations):
        self.model, self.rotations = model, rotations
        self.list = []
        for r in recipes:
            for b in ([16] if r in HALF else bits):
                self.list.append((r, b))

    def cache(self, recipe, bits, n):
        from oscar_kv import hf
        if recipe in HALF:
            return rounded_cache(self.model, recipe)
        rot = self.rotations.get(recipe)
        return hf.OscarCache(self.model, recipe, bits=bits, max_cache_len=n, rotations=rot)


def _check_passage(name, ctx, ids, recipes, bits, generate, prompt):
    T = len(ids)
    if T < 2:
        raise Refusal(f"the evaluated passage has {T} token(s); give at least 2")
    if ctx and T > ctx:
        raise Refusal(f"the evaluated passage has {T} tokens, beyond {name}'s context of {ctx}; give fewer --tokens")
    check_jobs(recipes, bits)
    if generate and (not prompt or (ctx and len(prompt) + generate > ctx)):
        raise Refusal("--prompt/--generate: give a non-empty prompt whose length plus --generate fits the context")


def _check_needle(name, ctx, T, needle, span, prefix, newline):
    if span < 2 or span > T - 1:
        raise Refusal(f"--needle-span {span}: give 2 .. {T - 1} (the evaluated passage after BOS)")
    if not 1 <= prefix < span:
        raise Refusal(f"--needle-prefix {prefix}: give 1 .. {span - 1}")
    if newline is None:
        raise Refusal("--needle: no newline token found (no tokenizer, no line break among the dumps' token texts); "
                      "give --newline-id")
    far = 2 * span + max(needle) + 1
    if ctx and far > ctx:
        raise Refusal(f"--needle {max(needle)} with --needle-span {span} makes {far} tokens, beyond {name}'s "
                      f"context of {ctx}; lower them")


def uncalibrated(recipes, rotations):
    """The oscar-cov recipes among `recipes` without rotations."""
    return [r for r in recipes if r.startswith("oscar-cov") and r not in rotations]


def calibrate_missing(model, name, recipes, rotations, calib_ids, out_dir, log):
    """`rotations` (recipe -> file or rotations) with oscar-cov's missing ones fitted on calib_ids by
    oscar_kv.hf.calibrate, each also written to out_dir/rotations-RECIPE.h5."""
    from oscar_kv import hf
    rotations = dict(rotations or {})
    for r in uncalibrated(recipes, rotations):
        log(f"calibrating {r} on {len(calib_ids)} tokens (oscar-rotate) ...")
        rotations[r] = hf.calibrate(model, calib_ids, os.path.join(out_dir, f"rotations-{r}.h5"), recipe=r, name=name)
    return rotations


def passage_rows(model, ids, jobs, log):
    """Full precision and every job over the passage, teacher-forced: (rows, the reference's logits)."""
    from transformers import DynamicCache
    log(f"full precision (fp32, DynamicCache): {len(ids)} tokens one at a time ...")
    ref = teacher_forced(model, DynamicCache(config=model.config), ids)
    ref_loss = losses(ref, ids).mean().item()
    rows = [dict(recipe="fp32", bits=32, loss=ref_loss, ppl=math.exp(ref_loss), dloss=0.0, kl=0.0, top1=1.0,
                 summary="DynamicCache (full precision)")]
    for r, b in jobs.list:
        cache = jobs.cache(r, b, len(ids))
        q = teacher_forced(model, cache, ids)
        loss = losses(q, ids).mean().item()
        kl, top1 = compare(ref, q)
        rows.append(dict(recipe=r, bits=b, loss=loss, ppl=math.exp(loss), dloss=loss - ref_loss, kl=kl, top1=top1,
                         summary=cache.summary()))
        log(f"{_label(dict(recipe=r, bits=b))}: loss {loss:.4f} (Δ {loss - ref_loss:+.4f}), KL {kl:.4f}, top-1 {top1:.3f}; "
            f"{cache.summary()}")
        del cache, q
    return rows


def needle_rows(model, ids, jobs, needle, span, prefix, newline, filler, log):
    """The recall test at each distance, full precision and every job (see the module docstring)."""
    from transformers import DynamicCache
    a, rows = ids[1:1 + span], []
    for d in needle:
        seq, first, repeat = needle_sequence(a, newline, filler, d, ids[0])
        for r, b in [("fp32", 32)] + jobs.list:
            mk = (lambda: DynamicCache(config=model.config)) if r == "fp32" else (lambda: jobs.cache(r, b, len(seq)))
            l = losses(teacher_forced(model, mk(), seq), seq)
            rep = l[repeat - 1:repeat - 1 + span].mean().item()
            fst = l[first - 1:first - 1 + span].mean().item()
            gen = greedy(model, mk(), seq[:repeat + prefix], span - prefix)
            want = a[prefix:]
            hits = sum(int(x == y) for x, y in zip(gen, want))
            rows.append(dict(recipe=r, bits=b, distance=d, repeat_loss=rep, first_loss=fst, reproduced=hits / len(want),
                             exact_prefix=shared_prefix(gen, want), remaining=len(want)))
            log(f"needle D={d} {r}@{b}: repeat loss {rep:.3f} (first {fst:.3f}), reproduced "
                f"{hits}/{len(want)}, exact prefix {shared_prefix(gen, want)}")
    return rows


def greedy_rows(model, jobs, prompt, generate, ctx):
    """Greedy continuations of `prompt`: full precision's, then each job's with the tokens shared before divergence."""
    from transformers import DynamicCache
    base = greedy(model, DynamicCache(config=model.config), prompt, generate, ctx)
    rows = [dict(recipe="fp32", bits=32, shared=len(base), generated=len(base), ids=base)]
    for r, b in jobs.list:
        g = greedy(model, jobs.cache(r, b, len(prompt) + generate), prompt, generate, ctx)
        rows.append(dict(recipe=r, bits=b, shared=shared_prefix(g, base), generated=len(g), ids=g))
    return rows


def evaluate(model, tok, name, ids, calib_ids, calib_texts, recipes, bits, rotations=None, needle=(), needle_span=64,
             needle_prefix=8, newline=None, filler_start=1, prompt=None, generate=0, out_dir=None, log=print, filler_ids=None):
    """Runs the evaluation (see the module docstring) and returns a result dict. rotations: recipe -> file (or
    rotations as oscar_kv.hf.calibrate returns them); oscar-cov's missing ones are fitted on calib_ids through
    oscar_kv.hf.calibrate, their files kept in out_dir. filler_ids: the passage whose body fills the needle test
    (default calib_ids; may be longer than the calibration cut)."""
    import torch
    from oscar_kv import hf
    ctx = getattr(model.config.get_text_config(decoder=True), "max_position_embeddings", None)
    _check_passage(name, ctx, ids, recipes, bits, generate, prompt)
    if needle:
        _check_needle(name, ctx, len(ids), needle, needle_span, needle_prefix, newline)
    rotations = dict(rotations or {})
    if uncalibrated(recipes, rotations):
        if not calib_ids:
            raise Refusal(f"{uncalibrated(recipes, rotations)[0]}: needs rotations: give --rotations FILE (oscar-rotate) "
                          "or a calibration passage (--calib-ids DUMP or --text with --calib-offset)")
        if calib_ids[: min(64, len(ids))] == ids[: min(64, len(ids))]:
            raise Refusal("the calibration passage is the evaluated passage; calibrate on other text (--calib-offset)")
    hf.enable(model)  # layers without an OscarLayer (the reference's DynamicCache) run SDPA
    jobs = Jobs(model, recipes, bits, calibrate_missing(model, name, recipes, rotations, calib_ids, out_dir, log))
    res = {"model": name, "tokens": len(ids), "needle": [], "greedy": [],
           "device": torch.cuda.get_device_name(next(model.parameters()).device)}
    res["rows"] = passage_rows(model, ids, jobs, log)
    if needle:
        filler = (filler_ids if filler_ids is not None else calib_ids)[filler_start:]
        res["needle"] = needle_rows(model, ids, jobs, needle, needle_span, needle_prefix, newline, filler, log)
    if generate:
        res["greedy"] = greedy_rows(model, jobs, prompt, generate, ctx)
    return res


# ----------------------------------------------------------------------------------------------- outputs

def _label(r):
    return r["recipe"] if r["recipe"] in ("fp32",) + HALF else f"{r['recipe']}@{r['bits']}"


def markdown(res, source, tok=None):
    out = [f"**{res['model']}** (Hugging Face, transformers + oscar_kv.hf), {source}, {res['tokens']} tokens, "
           f"{res['device']}: every token fed one at a time; the oscar-* rows decode through the oscar-kv kernels", "",
           "| recipe | loss (nats) | perplexity | Δ loss vs fp32 | KL(fp32 ‖ quant) | top-1 agreement | cache |",
           "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        out.append(f"| {_label(r)} | {r['loss']:.4f} | {r['ppl']:.3f} | {r['dloss']:+.4f} | {r['kl']:.4f} | "
                   f"{r['top1']:.3f} | {r['summary']} |")
    if res["needle"]:
        ds = sorted({n["distance"] for n in res["needle"]})
        span = res["needle"][0]["remaining"]
        out += ["", f"Needle: loss (nats) on the repeated passage after D tokens of other text (first reading in "
                    f"brackets); greedy from the repeat's first tokens: share of the {span} remaining tokens reproduced "
                    "(tokens before the first miss)", "",
                "| recipe | " + " | ".join(f"D = {d}" for d in ds) + " |", "|---|" + "---|" * len(ds)]
        labels = []
        for n in res["needle"]:
            if _label(n) not in labels:
                labels.append(_label(n))
        for lab in labels:
            cells = []
            for d in ds:
                n = next(x for x in res["needle"] if _label(x) == lab and x["distance"] == d)
                cells.append(f"{n['repeat_loss']:.3f} ({n['first_loss']:.2f}); {n['reproduced']:.2f} ({n['exact_prefix']})")
            out.append(f"| {lab} | " + " | ".join(cells) + " |")
    if res["greedy"]:
        out += ["", "Greedy continuation: tokens equal to fp32's before the first divergence", "",
                "| recipe | shared | generated | text |", "|---|---|---|---|"]
        for g in res["greedy"]:
            text = tok.decode(g["ids"]) if tok is not None else " ".join(map(str, g["ids"]))
            text = text.replace("\n", "⏎").replace("|", "\\|")
            out.append(f"| {_label(g)} | {g['shared']} | {g['generated']} | {text} |")
    return "\n".join(out) + "\n"


def _csv(rows, fields):
    s = io.StringIO()
    w = csv.DictWriter(s, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    return s.getvalue()


def write_outputs(out, files):
    """Writes name -> text into folder `out`, each under a temporary name, renamed together at the end."""
    os.makedirs(out, exist_ok=True)
    tmps = []
    try:
        for name, text in files.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.tmp-", dir=out)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, 0o644)
            tmps.append((tmp, os.path.join(out, name)))
        for tmp, final in tmps:
            os.replace(tmp, final)
    except BaseException:
        for tmp, _ in tmps:
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise


def output_files(res, source, tok=None):
    files = {"eval.md": markdown(res, source, tok),
             "eval.csv": _csv([dict(r, recipe=r["recipe"]) for r in res["rows"]],
                              ["recipe", "bits", "loss", "ppl", "dloss", "kl", "top1", "summary"])}
    if res["needle"]:
        files["needle.csv"] = _csv(res["needle"], ["recipe", "bits", "distance", "repeat_loss", "first_loss", "reproduced",
                                                   "exact_prefix", "remaining"])
    if res["greedy"]:
        files["greedy.csv"] = _csv([dict(g, ids=" ".join(map(str, g["ids"]))) for g in res["greedy"]],
                                   ["recipe", "bits", "shared", "generated", "ids"])
    return files


# ----------------------------------------------------------------------------------------------- against oscar-eval

def read_eval_csv(path):
    """recipe label ("oscar-omni@2", "fp16", "fp32") -> dict of floats, from oscar-eval's or hf_eval's eval.csv."""
    if not os.path.isfile(path):
        raise Refusal(f"{path}: no such file; run oscar-eval / hf_eval.py with --out first")
    out = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            name = r["recipe"]
            bits = r.get("bits", "")
            if name not in ("fp32",) + HALF and "@" not in name and bits:
                name = f"{name}@{bits}"
            out[name.replace(" (gpu)", "")] = {k: float(r[k]) for k in ("loss", "dloss", "kl", "top1")}
    return out


def comparison(hf_rows, oe_rows, tol=0.01):
    """(markdown table, worst |Δloss(HF) - Δloss(oscar-eval)|, labels compared) for the labels both hold."""
    lines = ["| recipe | loss HF | loss oscar-eval | Δloss HF | Δloss oscar-eval | Δloss diff | KL HF | KL oscar-eval | "
             "top-1 HF | top-1 oscar-eval |", "|---|---|---|---|---|---|---|---|---|---|"]
    worst, labels = 0.0, []
    ref_hf = hf_rows.get("fp32")
    ref_oe = oe_rows.get("fp32") or oe_rows.get("fp16")
    if ref_hf and ref_oe:
        lines.append(f"| full precision | {ref_hf['loss']:.4f} | {ref_oe['loss'] - ref_oe['dloss']:.4f} | | | "
                     f"loss diff {ref_hf['loss'] - (ref_oe['loss'] - ref_oe['dloss']):+.5f} | | | | |")
    for lab, h in hf_rows.items():
        o = oe_rows.get(lab)
        if lab == "fp32" or o is None:
            continue
        d = h["dloss"] - o["dloss"]
        worst = max(worst, abs(d))
        labels.append(lab)
        lines.append(f"| {lab} | {h['loss']:.4f} | {o['loss']:.4f} | {h['dloss']:+.4f} | {o['dloss']:+.4f} | {d:+.4f}"
                     f"{'' if abs(d) <= tol else ' (over ' + str(tol) + ')'} | {h['kl']:.4f} | {o['kl']:.4f} | "
                     f"{h['top1']:.3f} | {o['top1']:.3f} |")
    return "\n".join(lines) + "\n", worst, labels


def compare_runs(out, hf_names, oe_names, tol=0.01):
    """(markdown, worst |Δloss(HF) - Δloss(oscar-eval)| over the comparisons against oe_names[0]) for the eval.csv
    files of OUT/<name>/ (hf_eval runs against oscar-eval runs); a missing run is said and counts as a failure when
    it is an HF run or the first oscar-eval run."""
    parts, worst_all = [], 0.0
    oe = {}
    for name in oe_names:
        p = os.path.join(out, name, "eval.csv")
        oe[name] = read_eval_csv(p) if os.path.isfile(p) else None
    if oe_names and oe[oe_names[0]] is None:
        worst_all = float("inf")
    for hf_name in hf_names:
        p = os.path.join(out, hf_name, "eval.csv")
        if not os.path.isfile(p):
            parts.append(f"{hf_name}: no eval.csv (the run failed)\n")
            worst_all = float("inf")
            continue
        hf = read_eval_csv(p)
        for oe_name, rows in oe.items():
            if rows is None:
                parts.append(f"{oe_name}: no eval.csv (the run failed)\n")
                continue
            table, worst, labels = comparison(hf, rows, tol)
            parts.append(f"### {hf_name} vs {oe_name} (worst |Δloss diff| {worst:.4f} nats over {', '.join(labels)})\n\n{table}")
            if oe_name == oe_names[0]:
                worst_all = max(worst_all, worst)
    return "\n".join(parts), worst_all


# ----------------------------------------------------------------------------------------------- command line

def fail(msg):
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    return 1



def build_args(argv):
    ap = argparse.ArgumentParser(prog=PROG, description="oscar-eval's evaluation of a Hugging Face model through the "
                                                        "oscar-kv kernels")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="Hugging Face model folder")
    src.add_argument("--random", metavar="ARCH", help="a tiny random model of ARCH (oscar_kv.hf.architectures)")
    ap.add_argument("--token-ids", metavar="DUMP", help="evaluated passage: /token_ids of an oscar-kv dump "
                                                        "(oscar-dump --offset -404 for Revelation)")
    ap.add_argument("--calib-ids", metavar="DUMP", help="calibration passage (and needle filler): /token_ids of a dump")
    ap.add_argument("--text", help="text (one verse a line, plain or .gz) tokenized by the model folder's tokenizer")
    ap.add_argument("--offset", type=int, default=0, help="first line of the evaluated passage (with --text; negative: "
                                                          "from the end, -404 is Revelation in data/text/kjv.txt.gz)")
    ap.add_argument("--calib-offset", type=int, default=None, help="first line of the calibration passage (with --text; "
                                                                   "default: the line after the evaluated passage)")
    ap.add_argument("--tokens", type=int, default=0, help="evaluated tokens, BOS included (default: all of --token-ids, "
                                                          "else 1024)")
    ap.add_argument("--calib-tokens", type=int, default=0, help="calibration tokens (default: all of --calib-ids, else "
                                                                "1024); the needle filler uses the whole passage")
    ap.add_argument("--recipes", default="oscar-omni", help="comma list of oscar-omni, oscar-cov, oscar-cov-head, and the "
                    "unquantized fp16 / bf16 caches (keys and values rounded as stored)")
    ap.add_argument("--bits", default="2", help="comma list of 2, 4")
    ap.add_argument("--rotations", help="oscar-cov's rotations file (oscar-rotate); default: fitted on the calibration "
                                        "passage")
    ap.add_argument("--needle", default="", help="needle distances in tokens, e.g. 256,1024")
    ap.add_argument("--needle-span", type=int, default=64, help="tokens of the needle (from the evaluated passage)")
    ap.add_argument("--needle-prefix", type=int, default=8, help="needle tokens given again before the greedy continuation")
    ap.add_argument("--newline-id", type=int, help="the newline token (default: from the tokenizer or the dumps' texts)")
    ap.add_argument("--prompt", help="greedy agreement: prompt text (tokenizer) or ids:1,2,3")
    ap.add_argument("--generate", type=int, default=0, help="tokens to generate greedily from --prompt")
    ap.add_argument("--tasks", metavar="JSONL", help="long-context task accuracy instead of the passage's evaluation: a task "
                    "file of oscar-tasks (with the model's token ids) into tasks.md, tasks.csv, answers.jsonl; oscar-cov "
                    "calibrates on --calib-ids or takes --rotations")
    ap.add_argument("--device", default="cuda", help="torch device (a CUDA device: the kernels run there)")
    ap.add_argument("--out", required=True, help="folder for eval.md, eval.csv, needle.csv, greedy.csv")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    return ap.parse_args(argv)




def check_arguments(a):
    """The refusals that need neither torch nor a model; (recipes, bits, needle distances)."""
    recipes = [r.strip() for r in a.recipes.split(",") if r.strip()]
    bits = parse_list(a.bits, "bits")
    needle = parse_list(a.needle, "needle", 2) if a.needle else []
    for n, v in (("tokens", a.tokens), ("calib-tokens", a.calib_tokens), ("generate", a.generate)):
        if v < 0:
            raise Refusal(f"--{n} {v}: give a whole number >= 0")
    check_jobs(recipes, bits)
    if a.model and not os.path.isfile(os.path.join(a.model, "config.json")):
        raise Refusal(f"--model {a.model}: not a Hugging Face model folder (no config.json); give one, e.g. made by "
                      "experiments/hf/export_llama2c.py")
    if a.token_ids and a.text:
        raise Refusal("--token-ids and --text both given; give one source of the evaluated passage")
    if a.rotations and not os.path.isfile(a.rotations):
        raise Refusal(f"--rotations {a.rotations}: no such file; make it with oscar-rotate or leave it out to calibrate")
    for p, what in ((a.token_ids, "--token-ids"), (a.calib_ids, "--calib-ids")):
        if p and not os.path.isfile(p):
            raise Refusal(f"{what} {p}: no such file; give an oscar-dump file (oscar-dump --out)")
    return recipes, bits, needle


def load(a):
    """(model, tokenizer or None, name) once torch, transformers, a CUDA device and the kernels are there."""
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        raise Refusal(f"{e.name} is not installed; hf_eval needs torch and transformers (pip install torch transformers)")
    if not torch.cuda.is_available() or not str(a.device).startswith("cuda"):
        raise Refusal(f"--device {a.device}: no CUDA device (torch sees none or a CPU was named); the oscar-kv kernels "
                      "need an NVIDIA GPU")
    from oscar_kv import _capi
    try:
        _capi.load()
    except FileNotFoundError as e:
        raise Refusal(str(e))
    return load_model(a.model, a.device) if a.model else random_model(a.random, a.device)


def seeded_ids(vocab, n, seed):
    import torch
    return [1] + torch.randint(3, vocab, (n - 1,), generator=torch.Generator().manual_seed(seed)).tolist()


def evaluated_passage(a, tok, name, vocab):
    """(ids, token texts or None, source, the line after the passage or None) of the evaluated passage."""
    after = None
    if a.token_ids:
        ids, texts = read_dump_ids(a.token_ids, "--token-ids")
        if a.tokens:
            if a.tokens > len(ids):
                raise Refusal(f"--tokens {a.tokens}: {a.token_ids} holds {len(ids)}; give fewer or a longer dump")
            ids, texts = ids[:a.tokens], (texts[:a.tokens] if texts else None)
        source = f"{os.path.basename(a.token_ids)} token ids"
    elif a.text:
        if tok is None:
            raise Refusal(f"--text: {name} has no tokenizer; give --token-ids DUMP (oscar-dump's /token_ids)")
        ids, texts, after = text_ids(a.text, a.offset, a.tokens or 1024, tok, vocab, "--offset")
        source = f"{os.path.basename(a.text)} lines from {a.offset}"
    elif a.random:
        ids, texts, source = seeded_ids(vocab, a.tokens or 1024, 1), None, "seeded random token ids"
    else:
        raise Refusal("no evaluated passage: give --token-ids DUMP or --text FILE")
    if max(ids) >= vocab:
        raise Refusal(f"the evaluated passage has token id {max(ids)}, {name}'s vocabulary has {vocab}; the dump is "
                      "of another model")
    return ids, texts, source, after


def calibration_passage(a, tok, name, vocab, needle, after):
    """(the whole calibration passage or None, its texts, the part oscar-cov is fitted on)."""
    calib_ids, calib_texts = None, None
    if a.calib_ids:
        calib_ids, calib_texts = read_dump_ids(a.calib_ids, "--calib-ids")
    elif a.text:
        n = max(a.calib_tokens or 1024, (max(needle) + 2 * a.needle_span + 2) if needle else 0)
        offset = a.calib_offset
        if offset is None:
            if after is None:
                raise Refusal(f"{a.text}: the evaluated passage runs to the end of the text, no line after it to "
                              "calibrate on; give --calib-offset LINE or --calib-ids DUMP")
            offset = after
        calib_ids, calib_texts, _ = text_ids(a.text, offset, n, tok, vocab, "--calib-offset")
    elif a.random:
        calib_ids = seeded_ids(vocab, max(a.calib_tokens or 1024, (max(needle) + 2) if needle else 0), 2)
    if calib_ids is None:
        return None, None, None
    if max(calib_ids) >= vocab:
        raise Refusal(f"the calibration passage has token id {max(calib_ids)}, beyond {name}'s vocabulary of {vocab}")
    if a.calib_tokens and a.calib_tokens > len(calib_ids):
        raise Refusal(f"--calib-tokens {a.calib_tokens}: the calibration passage holds {len(calib_ids)}")
    fit = calib_ids[:a.calib_tokens] if a.calib_tokens else calib_ids if a.calib_ids else calib_ids[:1024]
    return calib_ids, calib_texts, fit


def prompt_ids(a, tok, name):
    if not a.generate:
        return None
    if not a.prompt:
        raise Refusal("--generate needs --prompt (text, or ids:1,2,3)")
    if a.prompt.startswith("ids:"):
        return parse_list(a.prompt[4:], "prompt", 0)
    if tok is None:
        raise Refusal(f"--prompt text: {name} has no tokenizer; give ids:1,2,3")
    return tok(a.prompt, add_special_tokens=True)["input_ids"]


def in_work_folder(out, recipes, fn):
    """fn(work): a temporary folder under `out` for the fitted rotations, moved into `out` once fn returned."""
    work = tempfile.mkdtemp(prefix=".hf_eval-", dir=out if os.path.isdir(out) else None)
    try:
        result = fn(work)
        for r in recipes:
            p = os.path.join(work, f"rotations-{r}.h5")
            if os.path.isfile(p):
                shutil.move(p, os.path.join(out, f"rotations-{r}.h5"))
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(a):
    out = check_output_folder(a.out)
    recipes, bits, needle = check_arguments(a)
    log = (lambda *x: None) if a.quiet else (lambda m: print(m, flush=True))
    model, tok, name = load(a)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    if a.tasks:
        return run_tasks(a, model, tok, name, vocab, recipes, bits, out, log)
    ids, texts, source, after = evaluated_passage(a, tok, name, vocab)
    calib_ids, calib_texts, fit_ids = calibration_passage(a, tok, name, vocab, needle, after)
    newline = a.newline_id if a.newline_id is not None else newline_id([(ids, texts), (calib_ids or [], calib_texts)], tok)
    if newline is None and a.random:
        newline = 13
    prompt = prompt_ids(a, tok, name)
    rotations = {"oscar-cov": a.rotations} if a.rotations else {}

    def work(folder):
        res = evaluate(model, tok, name, ids, fit_ids, calib_texts, recipes, bits, rotations=rotations, needle=needle,
                       needle_span=a.needle_span, needle_prefix=a.needle_prefix, newline=newline,
                       filler_start=body_start(calib_texts, tok), prompt=prompt, generate=a.generate,
                       out_dir=folder, log=log, filler_ids=calib_ids)
        files = output_files(res, source, tok)
        write_outputs(out, files)
        return files
    print(in_work_folder(out, recipes, work)["eval.md"])
    return 0


def run_tasks(a, model, tok, name, vocab, recipes, bits, out, log):
    """--tasks: every sample through full precision and each recipe (hf_tasks)."""
    import hf_tasks
    from oscar_kv import hf
    if a.token_ids or a.text or a.needle or a.generate:
        raise Refusal("--tasks evaluates the task file alone: drop --token-ids/--text, --needle and --generate")
    samples = hf_tasks.read_tasks(a.tasks, vocab)
    rotations = {"oscar-cov": a.rotations} if a.rotations else {}
    if uncalibrated(recipes, rotations) and not a.calib_ids:
        raise Refusal(f"{uncalibrated(recipes, rotations)[0]}: needs rotations: give --rotations FILE (oscar-rotate) or "
                      "--calib-ids DUMP")
    ids = read_dump_ids(a.calib_ids, "--calib-ids")[0] if a.calib_ids else None
    ids = ids[:a.calib_tokens] if ids and a.calib_tokens else ids

    def work(folder):
        hf.enable(model)
        res = hf_tasks.run(model, tok, name, samples,
                           Jobs(model, recipes, bits, calibrate_missing(model, name, recipes, rotations, ids, folder, log)),
                           log)
        files = hf_tasks.output_files(res, os.path.basename(a.tasks))
        write_outputs(out, files)
        return files
    print(in_work_folder(out, [], work)["tasks.md"])
    return 0


def main(argv=None):
    a = build_args(argv)
    try:
        return run(a)
    except Refusal as e:
        return fail(str(e))
    except (ValueError, FileNotFoundError) as e:
        return fail(f"{e}")
    except KeyboardInterrupt:
        return fail("interrupted; nothing written")
    except Exception as e:  # noqa: BLE001 - one line for anything unexpected
        if os.environ.get("HF_EVAL_DEBUG"):
            import traceback
            traceback.print_exc()
        msg = str(e).splitlines()[0] if str(e) else ""
        return fail(f"unexpected {type(e).__name__}: {msg}; nothing written; rerun with HF_EVAL_DEBUG=1 and report it")


if __name__ == "__main__":
    # run as the module hf_eval, the one hf_tasks imports, so that both share its classes (Refusal, Jobs)
    import hf_eval
    sys.exit(hf_eval.main())
