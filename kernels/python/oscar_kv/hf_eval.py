"""hf_eval.py: oscar-eval's evaluation of a Hugging Face causal LM whose cache is decoded by the oscar-kv kernels
(oscar_kv.hf.OscarCache), so that the GPU path can be held against the C++ reference (oscar-eval) on the same weights.

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
Errors are Refusal (one line: what is wrong; what to do); nothing is written under --out until everything ran.
"""
import csv
import io
import math
import os
import tempfile

RECIPES = ("oscar-omni", "oscar-cov", "oscar-cov-head")
# Unquantized half-precision caches: an ordinary cache whose keys and values are rounded to this dtype as they are
# stored (the model runs in float32), as oscar-eval's fp16 row; one row each, no bit width.
HALF = ("fp16", "bf16")


class Refusal(Exception):
    """A one-line user error: `hf_eval.py: error: <message>`."""


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
    from argparse import Namespace
    from . import hf_dump
    try:
        ids, texts, first, n_lines = hf_dump.passage_ids(Namespace(text=text, offset=offset, tokens=tokens), tok, vocab)
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
    import torch
    from . import hf_dump
    try:
        model, _, name, _ = hf_dump.build_random(arch, device, torch.float32)
    except hf_dump.Refusal as e:
        raise Refusal(str(e)) from None
    return model.eval(), None, name


# ----------------------------------------------------------------------------------------------- decoding

def _step(model, cache, token, device):
    import torch
    ids = torch.tensor([[int(token)]], dtype=torch.long, device=device)
    out = model(input_ids=ids, past_key_values=cache, use_cache=True)
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
        from . import hf
        if recipe in HALF:
            return rounded_cache(self.model, recipe)
        rot = self.rotations.get(recipe)
        return hf.OscarCache(self.model, recipe, bits=bits, max_cache_len=n, rotations=rot)


def evaluate(model, tok, name, ids, calib_ids, calib_texts, recipes, bits, rotations=None, needle=(), needle_span=64,
             needle_prefix=8, newline=None, filler_start=1, prompt=None, generate=0, out_dir=None, log=print, filler_ids=None):
    """Runs the evaluation (see the module docstring) and returns a result dict. rotations: recipe -> file, or None
    to fit oscar-cov's on calib_ids through oscar_kv.hf.calibrate into out_dir (a temporary folder). filler_ids: the
    passage whose body fills the needle test (default calib_ids; may be longer than the calibration cut)."""
    import torch
    from transformers import DynamicCache
    from . import hf
    rotations = dict(rotations or {})
    ctx = getattr(model.config.get_text_config(decoder=True), "max_position_embeddings", None)
    T = len(ids)
    if T < 2:
        raise Refusal(f"the evaluated passage has {T} token(s); give at least 2")
    if ctx and T > ctx:
        raise Refusal(f"the evaluated passage has {T} tokens, beyond {name}'s context of {ctx}; give fewer --tokens")
    for r in recipes:
        if r not in RECIPES + HALF:
            raise Refusal(f"--recipes: {r!r} is not a kernel recipe; give {', '.join(RECIPES + HALF)} (oscar-eval runs the "
                          "other presets)")
    for b in bits:
        if b not in (2, 4):
            raise Refusal(f"--bits: {b}; the kernels store 2 or 4 bits")
    if needle:
        if needle_span < 2 or needle_span > T - 1:
            raise Refusal(f"--needle-span {needle_span}: give 2 .. {T - 1} (the evaluated passage after BOS)")
        if not 1 <= needle_prefix < needle_span:
            raise Refusal(f"--needle-prefix {needle_prefix}: give 1 .. {needle_span - 1}")
        if newline is None:
            raise Refusal("--needle: no newline token found (no tokenizer, no line break among the dumps' token texts); "
                          "give --newline-id")
        far = 2 * needle_span + max(needle) + 1
        if ctx and far > ctx:
            raise Refusal(f"--needle {max(needle)} with --needle-span {needle_span} makes {far} tokens, beyond {name}'s "
                          f"context of {ctx}; lower them")
    if generate and (not prompt or (ctx and len(prompt) + generate > ctx)):
        raise Refusal("--prompt/--generate: give a non-empty prompt whose length plus --generate fits the context")
    for r in recipes:
        if r.startswith("oscar-cov") and r not in rotations:
            if not calib_ids:
                raise Refusal(f"{r}: needs rotations: give --rotations FILE (oscar-rotate) or a calibration passage "
                              "(--calib-ids DUMP or --text with --calib-offset)")
            if calib_ids[: min(64, T)] == ids[: min(64, T)]:
                raise Refusal("the calibration passage is the evaluated passage; calibrate on other text (--calib-offset)")
    device = next(model.parameters()).device
    hf.enable(model)  # layers without an OscarLayer (the reference's DynamicCache) run SDPA
    for r in recipes:
        if r.startswith("oscar-cov") and r not in rotations:
            path = os.path.join(out_dir, f"rotations-{r}.h5")
            log(f"calibrating {r} on {len(calib_ids)} tokens (oscar-rotate) ...")
            hf.calibrate(model, calib_ids, path, recipe=r, name=name)
            hf.enable(model)  # calibrate's capture restores the previous implementation; make sure
            rotations[r] = path
    jobs = Jobs(model, recipes, bits, rotations)
    res = {"model": name, "tokens": T, "rows": [], "needle": [], "greedy": [], "device": torch.cuda.get_device_name(device)}

    log(f"full precision (fp32, DynamicCache): {T} tokens one at a time ...")
    ref = teacher_forced(model, DynamicCache(config=model.config), ids)
    ref_l = losses(ref, ids)
    ref_loss = ref_l.mean().item()
    res["rows"].append(dict(recipe="fp32", bits=32, loss=ref_loss, ppl=math.exp(ref_loss), dloss=0.0, kl=0.0, top1=1.0,
                            summary="DynamicCache (full precision)"))
    for r, b in jobs.list:
        cache = jobs.cache(r, b, T)
        q = teacher_forced(model, cache, ids)
        loss = losses(q, ids).mean().item()
        kl, top1 = compare(ref, q)
        res["rows"].append(dict(recipe=r, bits=b, loss=loss, ppl=math.exp(loss), dloss=loss - ref_loss, kl=kl, top1=top1,
                                summary=cache.summary()))
        log(f"{_label(dict(recipe=r, bits=b))}: loss {loss:.4f} (Δ {loss - ref_loss:+.4f}), KL {kl:.4f}, top-1 {top1:.3f}; "
            f"{cache.summary()}")
        del cache, q
    del ref

    if needle:
        a = ids[1:1 + needle_span]
        filler = (filler_ids if filler_ids is not None else calib_ids)[filler_start:]
        start = ids[0]
        for d in needle:
            seq, first, repeat = needle_sequence(a, newline, filler, d, start)
            variants = [("fp32", 32)] + jobs.list
            for r, b in variants:
                mk = (lambda: DynamicCache(config=model.config)) if r == "fp32" else (lambda: jobs.cache(r, b, len(seq)))
                lg = teacher_forced(model, mk(), seq)
                l = losses(lg, seq)
                rep = l[repeat - 1:repeat - 1 + needle_span].mean().item()
                fst = l[first - 1:first - 1 + needle_span].mean().item()
                del lg
                gen = greedy(model, mk(), seq[:repeat + needle_prefix], needle_span - needle_prefix)
                want = a[needle_prefix:]
                hits = sum(int(x == y) for x, y in zip(gen, want))
                res["needle"].append(dict(recipe=r, bits=b, distance=d, repeat_loss=rep, first_loss=fst,
                                          reproduced=hits / len(want), exact_prefix=shared_prefix(gen, want),
                                          remaining=len(want)))
                log(f"needle D={d} {r}@{b}: repeat loss {rep:.3f} (first {fst:.3f}), reproduced "
                    f"{hits}/{len(want)}, exact prefix {shared_prefix(gen, want)}")

    if generate:
        base = greedy(model, DynamicCache(config=model.config), prompt, generate, ctx)
        res["greedy"].append(dict(recipe="fp32", bits=32, shared=len(base), generated=len(base), ids=base))
        for r, b in jobs.list:
            g = greedy(model, jobs.cache(r, b, len(prompt) + generate), prompt, generate, ctx)
            res["greedy"].append(dict(recipe=r, bits=b, shared=shared_prefix(g, base), generated=len(g), ids=g))
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

