#!/usr/bin/env python3
"""hf_eval.py: oscar-eval's evaluation for a Hugging Face model decoding through the oscar-kv CUDA kernels
(oscar_kv.hf.OscarCache); the work is oscar_kv.hf_eval (kernels/python/oscar_kv/hf_eval.py documents the contract).

  # kjv-llama-hd128 exported (experiments/hf/export_llama2c.py), token ids from oscar-dump:
  python3 experiments/hf_eval.py --model /tmp/kjv-hf --token-ids rev.h5 --calib-ids gen.h5 \
      --recipes oscar-omni,oscar-cov --bits 2 --needle 256,512,1024,1536 --out results/hf_eval/kjv
  # a model folder with its own tokenizer:
  python3 experiments/hf_eval.py --model HF_FOLDER --text data/text/kjv.txt.gz --offset -404 --tokens 1024 \
      --recipes oscar-omni --bits 2,4 --prompt 'The capital of France is' --generate 24 --out OUT
  # long-context tasks (oscar-tasks --model GGUF writes them with the model's ids), oscar-cov calibrated on a dump:
  python3 experiments/hf_eval.py --model HF_FOLDER --tasks tasks.jsonl --calib-ids gen.h5 \
      --recipes bf16,oscar-omni,oscar-cov --bits 2 --out OUT
  # smoke test on a tiny random model (seeded random token ids unless --text):
  python3 experiments/hf_eval.py --random llama --tokens 256 --recipes oscar-omni --out OUT

Writes OUT/eval.md, eval.csv (and needle.csv, greedy.csv when asked), all at the end, each renamed into place; the
folder is checked before any work. oscar-cov's rotations: --rotations FILE (oscar-rotate), else fitted on the
calibration passage (oscar_kv.hf.calibrate, which runs oscar-rotate: installed with the package, or beside the kernel library)
and kept as OUT/rotations-oscar-cov.h5. Errors: one line `hf_eval.py: error: ...; what to do`, exit 1.
"""
import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels" / "python"))

PROG = "hf_eval.py"


def fail(msg):
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    return 1


def build_args(argv):
    ap = argparse.ArgumentParser(prog=PROG, description="oscar-eval's evaluation of a Hugging Face model through the "
                                                        "oscar-kv kernels")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="Hugging Face model folder")
    src.add_argument("--random", metavar="ARCH", help="a tiny random model of ARCH (oscar_kv.hf_dump.build_random)")
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


def run(a):
    from oscar_kv import hf_eval as H
    out = H.check_output_folder(a.out)
    recipes = [r.strip() for r in a.recipes.split(",") if r.strip()]
    bits = H.parse_list(a.bits, "bits")
    needle = H.parse_list(a.needle, "needle", 2) if a.needle else []
    for n, v in (("tokens", a.tokens), ("calib-tokens", a.calib_tokens), ("generate", a.generate)):
        if v < 0:
            raise H.Refusal(f"--{n} {v}: give a whole number >= 0")
    for r in recipes:
        if r not in H.RECIPES + H.HALF:
            raise H.Refusal(f"--recipes: {r!r} is not a kernel recipe; give {', '.join(H.RECIPES + H.HALF)} (oscar-eval runs "
                            "the other presets)")
    if any(b not in (2, 4) for b in bits):
        raise H.Refusal(f"--bits {a.bits}: the kernels store 2 or 4 bits")
    if a.model and not os.path.isfile(os.path.join(a.model, "config.json")):
        raise H.Refusal(f"--model {a.model}: not a Hugging Face model folder (no config.json); give one, e.g. made by "
                        "experiments/hf/export_llama2c.py")
    if a.token_ids and a.text:
        raise H.Refusal("--token-ids and --text both given; give one source of the evaluated passage")
    if a.rotations and not os.path.isfile(a.rotations):
        raise H.Refusal(f"--rotations {a.rotations}: no such file; make it with oscar-rotate or leave it out to calibrate")
    for p, what in ((a.token_ids, "--token-ids"), (a.calib_ids, "--calib-ids")):
        if p and not os.path.isfile(p):
            raise H.Refusal(f"{what} {p}: no such file; give an oscar-dump file (oscar-dump --out)")
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        raise H.Refusal(f"{e.name} is not installed; hf_eval needs torch and transformers (pip install torch transformers)")
    if not torch.cuda.is_available() or not str(a.device).startswith("cuda"):
        raise H.Refusal(f"--device {a.device}: no CUDA device (torch sees none or a CPU was named); the oscar-kv kernels "
                        "need an NVIDIA GPU")
    from oscar_kv import _capi
    try:
        _capi.load()
    except FileNotFoundError as e:
        raise H.Refusal(str(e))
    log = (lambda *x: None) if a.quiet else (lambda m: print(m, flush=True))

    if a.model:
        model, tok, name = H.load_model(a.model, a.device)
    else:
        model, tok, name = H.random_model(a.random, a.device)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    if a.tasks:
        return run_tasks(a, H, model, tok, name, vocab, recipes, bits, out, log)

    texts_seen = []
    if a.token_ids:
        ids, texts = H.read_dump_ids(a.token_ids, "--token-ids")
        if a.tokens:
            if a.tokens > len(ids):
                raise H.Refusal(f"--tokens {a.tokens}: {a.token_ids} holds {len(ids)}; give fewer or a longer dump")
            ids, texts = ids[:a.tokens], (texts[:a.tokens] if texts else None)
        source = f"{os.path.basename(a.token_ids)} token ids"
    elif a.text:
        if tok is None:
            raise H.Refusal(f"--text: {name} has no tokenizer; give --token-ids DUMP (oscar-dump's /token_ids)")
        ids, texts, after = H.text_ids(a.text, a.offset, a.tokens or 1024, tok, vocab, "--offset")
        source = f"{os.path.basename(a.text)} lines from {a.offset}"
    elif a.random:
        g = torch.Generator().manual_seed(1)
        n = a.tokens or 1024
        ids = [1] + torch.randint(3, vocab, (n - 1,), generator=g).tolist()
        texts = None
        source = "seeded random token ids"
    else:
        raise H.Refusal("no evaluated passage: give --token-ids DUMP or --text FILE")
    texts_seen.append((ids, texts))
    if max(ids) >= vocab:
        raise H.Refusal(f"the evaluated passage has token id {max(ids)}, {name}'s vocabulary has {vocab}; the dump is "
                        "of another model")

    calib_ids, calib_texts = None, None
    if a.calib_ids:
        calib_ids, calib_texts = H.read_dump_ids(a.calib_ids, "--calib-ids")
    elif a.text:
        n = max(a.calib_tokens or 1024, (max(needle) + 2 * a.needle_span + 2) if needle else 0)
        calib_offset = a.calib_offset
        if calib_offset is None:
            if after is None:
                raise H.Refusal(f"{a.text}: the evaluated passage runs to the end of the text, no line after it to "
                                "calibrate on; give --calib-offset LINE or --calib-ids DUMP")
            calib_offset = after
        calib_ids, calib_texts, _ = H.text_ids(a.text, calib_offset, n, tok, vocab, "--calib-offset")
    elif a.random:
        g = torch.Generator().manual_seed(2)
        n = max(a.calib_tokens or 1024, (max(needle) + 2) if needle else 0)
        calib_ids = [1] + torch.randint(3, vocab, (n - 1,), generator=g).tolist()
    if calib_ids is not None:
        texts_seen.append((calib_ids, calib_texts))
        if max(calib_ids) >= vocab:
            raise H.Refusal(f"the calibration passage has token id {max(calib_ids)}, beyond {name}'s vocabulary of {vocab}")
    fit_ids = calib_ids
    if calib_ids is not None and a.calib_tokens:
        if a.calib_tokens > len(calib_ids):
            raise H.Refusal(f"--calib-tokens {a.calib_tokens}: the calibration passage holds {len(calib_ids)}")
        fit_ids = calib_ids[:a.calib_tokens]
    elif calib_ids is not None and not a.calib_ids:
        fit_ids = calib_ids[:a.calib_tokens or 1024]
    newline = a.newline_id if a.newline_id is not None else H.newline_id(texts_seen, tok)
    if newline is None and a.random:
        newline = 13
    prompt = None
    if a.generate:
        if not a.prompt:
            raise H.Refusal("--generate needs --prompt (text, or ids:1,2,3)")
        if a.prompt.startswith("ids:"):
            prompt = H.parse_list(a.prompt[4:], "prompt", 0)
        elif tok is None:
            raise H.Refusal(f"--prompt text: {name} has no tokenizer; give ids:1,2,3")
        else:
            prompt = tok(a.prompt, add_special_tokens=True)["input_ids"]
    rotations = {"oscar-cov": a.rotations} if a.rotations else {}

    work = tempfile.mkdtemp(prefix=".hf_eval-", dir=out if os.path.isdir(out) else None)
    try:
        res = H.evaluate(model, tok, name, ids, fit_ids, calib_texts, recipes, bits, rotations=rotations, needle=needle,
                         needle_span=a.needle_span, needle_prefix=a.needle_prefix, newline=newline,
                         filler_start=H.body_start(calib_texts, tok), prompt=prompt, generate=a.generate,
                         out_dir=work, log=log, filler_ids=calib_ids)
        files = H.output_files(res, source, tok)
        H.write_outputs(out, files)
        for r in recipes:
            p = os.path.join(work, f"rotations-{r}.h5")
            if os.path.isfile(p):
                shutil.move(p, os.path.join(out, f"rotations-{r}.h5"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(files["eval.md"])
    return 0


def run_tasks(a, H, model, tok, name, vocab, recipes, bits, out, log):
    """--tasks: every sample through full precision and each recipe (oscar_kv.hf_tasks)."""
    from oscar_kv import hf, hf_tasks as T
    if a.token_ids or a.text or a.needle or a.generate:
        raise H.Refusal("--tasks evaluates the task file alone: drop --token-ids/--text, --needle and --generate")
    T.check_recipes(recipes, bits)
    samples = T.read_tasks(a.tasks, vocab)
    rotations = {"oscar-cov": a.rotations} if a.rotations else {}
    work = tempfile.mkdtemp(prefix=".hf_eval-", dir=out if os.path.isdir(out) else None)
    try:
        hf.enable(model)
        for r in recipes:
            if r.startswith("oscar-cov") and r not in rotations:
                if not a.calib_ids:
                    raise H.Refusal(f"{r}: needs rotations: give --rotations FILE (oscar-rotate) or --calib-ids DUMP")
                ids, _ = H.read_dump_ids(a.calib_ids, "--calib-ids")
                ids = ids[:a.calib_tokens] if a.calib_tokens else ids
                path = os.path.join(work, f"rotations-{r}.h5")
                log(f"calibrating {r} on {len(ids)} tokens (oscar-rotate) ...")
                hf.calibrate(model, ids, path, recipe=r, name=name)
                hf.enable(model)
                rotations[r] = path
        res = T.run(model, tok, name, samples, H.Jobs(model, recipes, bits, rotations), log)
        files = T.output_files(res, os.path.basename(a.tasks))
        H.write_outputs(out, files)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(files["tasks.md"])
    return 0


def main(argv=None):
    a = build_args(argv)
    try:
        from oscar_kv import hf_eval as H
    except ImportError as e:
        return fail(f"cannot import oscar_kv ({e}); run from an oscar-kv checkout")
    try:
        return run(a)
    except H.Refusal as e:
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
    sys.exit(main())
