#!/usr/bin/env python3
"""hf_dump.py: oscar-kv dump format v2 from a Hugging Face causal LM, captured through transformers' attention
interface by oscar_kv.hf.capture (its docstring says how: q, k, v exactly as each layer's attention sees them, the
layer's scaling, sliding window, soft-cap, sink logits and RoPE, pre-RoPE q/k recovered by inverting the rotation).

  python3 experiments/hf_dump.py --model HF_FOLDER --text kjv.txt.gz --offset -404 --tokens 4096 --out d.h5
  python3 experiments/hf_dump.py --gguf FILE.gguf  --text ... --out d.h5      # GGUF read by transformers
  python3 experiments/hf_dump.py --random qwen3 --text ... --out d.h5         # tiny random model, no download
  python3 experiments/hf_dump.py --random all --text ... --out FOLDER          # every architecture, FOLDER/ARCH.h5

Supported architectures: the table of oscar_kv.hf.architectures (llama, qwen2, qwen3, mistral, gemma2, gemma3,
phi3, olmo2, granite, smollm3, gpt_oss). Anything else is refused before a weight is read, and nothing is written.
Long passages go through the model in chunks of --chunk tokens.

The check (on by default, --check quick): after writing, a few layers (the first, the last, one middle and
one of every distinct attention kind: sliding window, NoPE, ...) and a few hundred query positions are
recomputed from the DUMPED tensors and per-layer attributes with the spec's reference attention in float64
(torch, no transformers code), and compared with the output transformers' attention produced in the run.
--check full does every layer and position, --check off skips it. The tolerance on the relative error
(Frobenius norm over the checked rows) is 8 * (u_model + u_store) + 1e-5, with u the unit roundoff of the
model's compute dtype and of the storage dtype (bf16 2^-8, fp16 2^-11, fp32 2^-24): rounding the inputs,
the probabilities and the output costs a few u each; a wrong tensor or attribute costs O(0.1 .. 1). Above
it the run fails (exit 1) and no file is left under the final name.

For plain RoPE, half-split RoPE(rope_theta, rotary_dim) of k_pre as written must give k within 0.05, else the run
fails. The per-layer rope_theta/rotary_dim/"half-split" describe the rotation exactly only for plain RoPE; for
scaled RoPE (llama3, yarn, longrope, ...) the root attribute `rope_scaling_type` names the variant and
config_json holds its parameters.
"""
import argparse
import gzip
import hashlib
import json
import math
import os
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels" / "python"))
try:
    import torch
    from oscar_kv.hf import architectures, capture
except ImportError as e:  # main() refuses in one line
    MISSING = e.name
else:
    MISSING = None

PROG = "hf_dump"
BIG = "llama-8b"  # Llama-3-8B shapes with random weights, for timing and memory at long context


class Refusal(Exception):
    """A one-line user error: hf_dump: error: FILE: what; what to do."""


def unexpected(e):
    """One line for an unexpected exception (HF_DUMP_DEBUG=1 prints the traceback too)."""
    if os.environ.get("HF_DUMP_DEBUG"):
        import traceback
        traceback.print_exc()
    msg = str(e).splitlines()[0] if str(e) else ""
    return f"unexpected {type(e).__name__}: {msg}; nothing written; rerun with HF_DUMP_DEBUG=1 and report it"


def die(msg, code=1):
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(code)


# ----------------------------------------------------------------------------------------------- text

def read_lines(path):
    try:
        with open(path, "rb") as f:
            magic = f.read(2)
        op = gzip.open if magic == b"\x1f\x8b" else open
        with op(path, "rt", encoding="utf-8") as f:
            return f.read().split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise Refusal(f"{path}: cannot read the text ({e}); give a UTF-8 text file, plain or gzip")


def _tokenize(text, tok, vocab, tokens):
    """(ids, token strings) of the start of `text`: the tokenizer's, or bytes as ids (BOS = 1) without one."""
    if tok is None:
        raw = text[: 4 * tokens + 16].encode("utf-8")
        return [1] + [(3 + b) % vocab for b in raw], ["<s>"] + [chr(b) if 32 <= b < 127 else f"<0x{b:02X}>" for b in raw]
    n = max(4096, 6 * tokens)  # a prefix long enough for the tokens asked (about 4 characters a token; grown if short)
    while True:
        ids = tok(text[:n], add_special_tokens=True)["input_ids"]
        if len(ids) > tokens + 16 or n >= len(text):  # the cut word lies past the passage
            return ids, tok.convert_ids_to_tokens(ids)
        n *= 2


def passage_ids(text, offset, tokens, tok, vocab):
    """(ids, token strings, first line, lines in the text) of `tokens` tokens from line `offset` (negative: from the
    end) of the text file `text`, by the tokenizer `tok` (None: bytes as ids, BOS = 1)."""
    lines = read_lines(text)
    if lines and lines[-1] == "":
        lines.pop()
    first = offset if offset >= 0 else len(lines) + offset
    if not 0 <= first < len(lines):
        raise Refusal(f"{text}: --offset {offset} is outside the text ({len(lines)} lines); "
                      f"give an offset in -{len(lines)}..{len(lines) - 1}")
    ids, texts = _tokenize("\n".join(lines[first:]), tok, vocab, tokens)
    if len(ids) < tokens:
        raise Refusal(f"{text}: --tokens {tokens} is beyond the text ({len(ids)} tokens after line "
                      f"{first}); give fewer tokens or an earlier --offset")
    return ids[:tokens], [str(t) for t in texts[:tokens]], first, len(lines)


# ----------------------------------------------------------------------------------------------- models

def big_config():
    import transformers
    return transformers.LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                    num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                                    max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5,
                                    bos_token_id=1, eos_token_id=2, pad_token_id=0)


def build_random(arch, device, dtype):
    """A seeded random model of `arch` (the table's tiny one, or BIG): (model, None, name, sha)."""
    if arch != BIG and arch not in architectures.NAMES:
        raise Refusal(f"--random {arch}: unknown architecture; give one of {', '.join(architectures.NAMES)}, all or {BIG}")
    cfg = big_config() if arch == BIG else architectures.tiny_config(arch)
    model = architectures.random_model("llama" if arch == BIG else arch, device, dtype, config=cfg)
    sha = hashlib.sha256(f"random-{arch}-seed0\n{cfg.to_json_string()}".encode()).hexdigest()
    return model, None, f"random-{arch}", sha


def model_type_of(path, gguf_file=None):
    from transformers import AutoConfig
    if gguf_file is None:
        cj = os.path.join(path, "config.json")
        if not os.path.isfile(cj):
            raise Refusal(f"{path}: no config.json; give a Hugging Face model folder (or --gguf FILE)")
        try:
            with open(cj) as f:
                return json.load(f).get("model_type", "?")
        except (OSError, ValueError) as e:
            raise Refusal(f"{cj}: unreadable ({e}); give a Hugging Face model folder")
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise Refusal(f"{os.path.join(path, gguf_file)}: reading GGUF through transformers needs the 'gguf' "
                      "package; install it (pip install gguf)")
    try:
        return AutoConfig.from_pretrained(path, gguf_file=gguf_file).model_type
    except Exception as e:  # transformers names the unsupported GGUF architecture in its message
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise Refusal(f"{os.path.join(path, gguf_file)}: transformers cannot read this GGUF ({msg}); "
                      f"supported: {', '.join(architectures.NAMES)}")


def _source(args):
    """(the source named in messages, its folder, the GGUF file name or None)."""
    if args.gguf:
        src = os.path.abspath(args.gguf)
        if not os.path.isfile(src):
            raise Refusal(f"{args.gguf}: no such file; give a GGUF file")
        return src, os.path.dirname(src), os.path.basename(src)
    if not os.path.isdir(args.model):
        raise Refusal(f"{args.model}: not a folder; give a Hugging Face model folder (or --gguf FILE)")
    return args.model, args.model, None


def _checkpoint_sha(src, folder, gfile):
    h = hashlib.sha256()
    files = [src] if gfile else [os.path.join(folder, n) for n in sorted(os.listdir(folder))
                                  if n.endswith((".safetensors", ".bin"))]
    for p in files:
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                h.update(block)
    return h.hexdigest()


def build_pretrained(args, dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    src, folder, gfile = _source(args)
    mt = model_type_of(folder, gfile)
    if architectures.by_model_type(mt) is None:
        raise Refusal(architectures.unsupported(src, mt))
    kw = {"gguf_file": gfile} if gfile else {}
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype if dtype is not None else "auto",
                                                     attn_implementation=capture.CAPTURE_ATTN, **kw)
        tok = AutoTokenizer.from_pretrained(args.tokenizer or folder, **({} if args.tokenizer else kw))
    except Exception as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise Refusal(f"{src}: transformers could not load the model ({type(e).__name__}: {msg}); "
                      "check the folder/file and the transformers version")
    name = os.path.splitext(gfile)[0] if gfile else os.path.basename(os.path.normpath(folder))
    return model, tok, name, _checkpoint_sha(src, folder, gfile)


# ----------------------------------------------------------------------------------------------- check

def unit_roundoff(dt):
    return {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24,
            torch.float64: 2.0 ** -53}.get(dt, 2.0 ** -8)


def reference_attention(q, k, v, scaling, window, softcap, sinks, qpos):
    """The spec's reference attention in float64. q [H, n, D] at positions qpos (int64 [n]); k, v [Hkv, Tk, D]
    for positions 0..Tk-1. Returns o [H, n, D]."""
    H, Hkv = q.shape[0], k.shape[0]
    rep = H // Hkv
    kk, vv = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
    logits = scaling * (q @ kk.transpose(1, 2))  # [H, n, Tk]
    if softcap > 0:
        logits = softcap * torch.tanh(logits / softcap)
    j = torch.arange(k.shape[1], device=q.device)[None, :]
    i = qpos.to(q.device)[:, None]
    visible = j <= i
    if window > 0:
        visible &= (i - j) < window
    logits = logits.masked_fill(~visible[None], float("-inf"))
    m = logits.amax(-1, keepdim=True)
    if sinks is not None:
        m = torch.maximum(m, sinks.view(H, 1, 1))
    e = torch.exp(logits - m)
    den = e.sum(-1, keepdim=True)
    if sinks is not None:
        den = den + torch.exp(sinks.view(H, 1, 1) - m)
    return (e / den) @ vv


def _layer_error(g, kept, device):
    """(squared error, squared norm) of one layer's kept outputs against the reference over the dumped tensors."""
    a = g.attrs
    sinks = torch.from_numpy(g["sinks"][...]).double().to(device) if "sinks" in g else None
    num = den = 0.0
    for sel, got in kept:
        hi = int(sel.max()) + 1
        k = torch.from_numpy(g["k"][:, :hi, :]).double().to(device)
        v = torch.from_numpy(g["v"][:, :hi, :]).double().to(device)
        for b in range(0, len(sel), 64):
            s = sel[b:b + 64]
            q = torch.from_numpy(g["q"][:, s.numpy(), :]).double().to(device)
            o = reference_attention(q, k, v, float(a["scaling"]), int(a["sliding_window"]), float(a["softcap"]), sinks, s)
            ref = got[:, b:b + 64].to(device).double()
            num += ((o - ref) ** 2).sum().item()
            den += (ref ** 2).sum().item()
    return num, den


def run_check(path, outputs, device):
    """Recomputes the kept rows from the file and compares them with what the model's attention produced:
    (worst relative error, one line per layer)."""
    import h5py
    worst, lines = 0.0, []
    with h5py.File(path, "r") as f:
        for idx in sorted(outputs):
            g = f[f"layer_{idx:03d}"]
            num, den = _layer_error(g, outputs[idx], device)
            err = math.sqrt(num / max(den, 1e-300))
            worst = max(worst, err)
            a = g.attrs
            lines.append(f"check layer {idx} ({sum(len(s) for s, _ in outputs[idx])} queries, window "
                         f"{int(a['sliding_window'])}, softcap {float(a['softcap']):g}, rope {a['rope_convention']}, "
                         f"sinks {'yes' if 'sinks' in g else 'no'}): rel err {err:.2e}")
    return worst, lines


def choose_check(kinds, n_layers, T, mode, n_layers_quick, n_queries):
    """Layers and query positions the check covers (positions sorted, int64); kinds: one layer of each kind."""
    if mode == "full":
        return list(range(n_layers)), torch.arange(T)
    layers = sorted({0, n_layers // 2, n_layers - 1} | set(kinds))[: max(n_layers_quick, 1) + 3]
    n = min(T, n_queries)
    pos = set(range(min(T, 16))) | set(range(max(0, T - 16), T))
    extra = n - len(pos)
    while len(pos) < n and extra <= T:  # evenly spaced positions in between, grown until n distinct
        pos |= set(torch.linspace(0, T - 1, extra).round().long().tolist())
        extra += n - len(pos)
    pos = set(sorted(pos)[:n]) if len(pos) > n else pos
    return layers, torch.tensor(sorted(pos), dtype=torch.int64)


def distinct_kind_layers(cfg):
    """One layer of each distinct attention kind (layer type, NoPE), from the configuration."""
    arch = architectures.by_model_type(getattr(cfg, "model_type", "?"))
    seen, out = set(), []
    lt = getattr(cfg, "layer_types", None) or []
    nr = (getattr(cfg, arch.nope_layers, None) if arch and arch.nope_layers else None) or []
    for i in range(cfg.num_hidden_layers):
        kind = (lt[i] if i < len(lt) else None, nr[i] if i < len(nr) else None)
        if kind not in seen:
            seen.add(kind)
            out.append(i)
    return out


def verify(args, d, tmp, out_path):
    """The dump's RoPE description and (unless --check off) the reproduction check; Refusal when either fails.
    Returns the check's worst relative error (None when off)."""
    cap = d.capture
    if cap.theta_worst is not None and cap.theta_worst > 0.05:  # float32 angles at 32K positions: ~1e-3
        raise Refusal(f"{out_path}: the per-layer rope_theta/rotary_dim do not describe the model's rotation "
                      f"(residual {cap.theta_worst:.2e}); nothing written; report the architecture")
    if args.check == "off":
        return None
    tol = 8 * (unit_roundoff(d.compute_dtype) + unit_roundoff(capture.STORAGE[args.dtype])) + 1e-5
    worst, lines = run_check(tmp, cap.outputs, args.device)
    for line in lines:
        print("  " + line)
    print(f"  check ({args.check}): worst rel err {worst:.2e}, tolerance {tol:.1e}: {'ok' if worst <= tol else 'FAILED'}")
    if worst > tol:
        raise Refusal(f"{out_path}: the dumped tensors do not reproduce the model's attention (rel err "
                      f"{worst:.2e} > {tol:.1e}); nothing written; report the architecture")
    return worst


# ----------------------------------------------------------------------------------------------- dump

def writable_folder(out_path):
    out_dir = os.path.dirname(os.path.abspath(out_path))
    if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK):
        raise Refusal(f"{out_path}: the folder {out_dir} does not exist or is not writable; create it first")
    return out_dir


def dump_one(args, arch_or_none, out_path):
    writable_folder(out_path)
    dtype = {"auto": None, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.model_dtype]
    capture.register()  # a pretrained model loads with the capture's attention implementation
    if arch_or_none is not None:
        model, tok, name, sha = build_random(arch_or_none, args.device, dtype)
    else:
        model, tok, name, sha = build_pretrained(args, dtype)
    ids, texts, first, total = passage_ids(args.text, args.offset, args.tokens, tok,
                                           model.config.get_text_config().vocab_size)
    source = f"{os.path.basename(args.text)} lines {first}.. ({total - first} of {total} lines), first {len(ids)} tokens"
    return dump_model(args, model, name, sha, ids, texts, source, out_path)


def report(args, model, name, d, n_tokens):
    """The run's summary lines on stdout."""
    cfg = model.config.get_text_config()
    m0, cap = d.capture.meta[0], d.capture
    peak = (f", peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB"
            if str(args.device).startswith("cuda") else "")
    print(f"{name} ({cfg.model_type}): {n_tokens} tokens in chunks of {d.chunk}, {cfg.num_hidden_layers} layers, "
          f"{m0['n_heads']}q/{d.n_kv_heads}kv heads, head_dim {m0['head_dim']}, model "
          f"{str(d.compute_dtype).replace('torch.', '')}: mean next-token loss {d.loss:.4f}, forward+capture "
          f"{d.seconds:.1f} s{peak}")
    if cap.pre_rope:
        plain = "n/a" if cap.theta_worst is None else f"{cap.theta_worst:.1e}"
        scaled = "" if d.rope_types in (["default"], []) else \
            f" (scaled RoPE '{','.join(d.rope_types)}': rope_theta alone does not give the rotation; config_json has its parameters)"
        print(f"  pre-RoPE recovered: re-rotation residual {cap.rope_worst:.1e}; plain RoPE(rope_theta, rotary_dim) "
              f"vs the model's rotation: {plain}{scaled}")


def progress_lines(done, T, secs, chunk):
    if T >= 8192 and (done // chunk) % max(1, (T // chunk) // 8) == 0:
        print(f"  {done}/{T} tokens, {secs:.0f} s", file=sys.stderr, flush=True)


def dump_model(args, model, name, sha, ids, texts, text_source, out_path):
    """Dumps a loaded model over the token ids `ids` (texts: their strings) to out_path (atomic: a temporary file in
    the folder, renamed once the check passed). args: the options of main(). Returns the check's worst error."""
    import h5py
    out_dir = writable_folder(out_path)
    model = model.to(args.device)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(out_path) + ".tmp-", dir=out_dir)
    os.close(fd)
    try:
        check_layers, check_pos = [], None
        if args.check != "off":
            cfg = model.config.get_text_config()
            check_layers, check_pos = choose_check(distinct_kind_layers(cfg), cfg.num_hidden_layers, len(ids), args.check,
                                                   args.check_layers, args.check_queries)
        chunk = len(ids) if args.chunk <= 0 else min(args.chunk, len(ids))
        with h5py.File(tmp, "w") as f:
            d = capture.write_dump(model, ids, f, name, texts=texts, sha=sha, text_source=text_source,
                                   storage=args.dtype, chunk=args.chunk, pre_rope=not args.no_pre_rope,
                                   check_layers=check_layers, check_positions=check_pos, producer="experiments/hf_dump.py",
                                   progress=lambda done, T, secs: progress_lines(done, T, secs, chunk))
        report(args, model, name, d, len(ids))
        worst = verify(args, d, tmp, out_path)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp made it 0600; the dump gets an ordinary file's mode
        os.replace(tmp, out_path)
        print(f"  -> {out_path}")
        return worst
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def parse(argv):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="local Hugging Face model folder")
    src.add_argument("--gguf", help="GGUF file, read (dequantized) by transformers; needs the 'gguf' package")
    src.add_argument("--random", metavar="ARCH", help=f"tiny random model: one of {', '.join(architectures.NAMES)}, "
                     f"'all' (then --out is a folder, one ARCH.h5 each) or '{BIG}' (Llama-3-8B shapes, for timing)")
    ap.add_argument("--tokenizer", help="tokenizer folder (default: the model's)")
    ap.add_argument("--text", required=True)
    ap.add_argument("--offset", type=int, default=0, help="first line of the passage (negative: from the end)")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=list(capture.STORAGE), default="float32", help="storage dtype")
    ap.add_argument("--model-dtype", choices=["auto", "float32", "bfloat16", "float16"], default="auto",
                    help="dtype the model computes in (auto: the checkpoint's; float32 for --random)")
    ap.add_argument("--fp32", action="store_true", help="same as --model-dtype float32")
    ap.add_argument("--chunk", type=int, default=1024, help="tokens per forward chunk (0: the whole passage at once)")
    ap.add_argument("--check", choices=["quick", "full", "off"], nargs="?", const="full", default="quick",
                    help="reproduction check (default quick; a bare --check means full)")
    ap.add_argument("--check-layers", type=int, default=3, help="quick check: layers besides one of each kind")
    ap.add_argument("--check-queries", type=int, default=256, help="quick check: query positions")
    ap.add_argument("--no-pre-rope", action="store_true", help="do not write q_pre/k_pre (has_pre_rope = 0)")
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)
    if args.fp32:
        args.model_dtype = "float32"
    if args.tokens < 2:
        die("--tokens must be at least 2")
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    return args


def dump_all(args):
    """--random all: every architecture of the table into FOLDER/ARCH.h5; the failures named at the end."""
    os.makedirs(args.out, exist_ok=True)
    failed = []
    for arch in architectures.NAMES:
        try:
            dump_one(args, arch, os.path.join(args.out, f"{arch}.h5"))
        except (Refusal, capture.CaptureError) as e:
            print(f"{PROG}: error: {e}", file=sys.stderr)
            failed.append(arch)
        except Exception as e:
            print(f"{PROG}: error: --random {arch}: {unexpected(e)}", file=sys.stderr)
            failed.append(arch)
    if failed:
        die(f"{args.out}: {len(failed)} of {len(architectures.NAMES)} architectures failed: {', '.join(failed)}")


def main(argv=None):
    if MISSING:
        die(f"{MISSING}: not installed; install torch, transformers, h5py and numpy (pip install ...)")
    args = parse(argv)

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also where the shell started us with SIGINT ignored
    try:
        if args.random == "all":
            dump_all(args)
        else:
            dump_one(args, args.random, args.out)
    except (Refusal, capture.CaptureError) as e:
        die(str(e))
    except KeyboardInterrupt:
        die(f"{args.out}: interrupted; nothing written", 130)
    except Exception as e:
        die(f"{args.out}: {unexpected(e)}")


def run():
    """The command line: main(), with a Ctrl-C anywhere (the imports and the model's loading included) one line."""
    try:
        main()
    except KeyboardInterrupt:
        die("interrupted; nothing was written", 130)


if __name__ == "__main__":
    run()
