#!/usr/bin/env python3
"""hf_dump.py: oscar-kv dump format v1 from any Hugging Face causal LM with Llama-style attention
(q_proj/k_proj/v_proj/o_proj, rotary embeddings), via forward hooks. Each layer is written to the
HDF5 file as soon as the forward pass leaves it (streamed), under a temporary name renamed at the end.

  python3 experiments/hf_dump.py --model PATH --text kjv.txt.gz --offset -404 --tokens 2048 --out d.h5
  python3 experiments/hf_dump.py --random-llama --text ... --out d.h5   # tiny random Llama, no download
  python3 experiments/hf_dump.py --random-llama --check ...             # also verify the dump reproduces
                                                                        # each layer's attention output
Keys and queries after RoPE are recomputed with the model's own rotary embedding and
apply_rotary_pos_emb (Hugging Face's rotate_half layout: rope_convention = "half-split").
"""
import argparse, gzip, hashlib, os, sys, tempfile
import numpy as np
import h5py
import torch


def read_lines(path):
    op = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    with op(path, "rt", encoding="utf-8") as f:
        return f.read().split("\n")


def passage_ids(args, tok, vocab):
    lines = [l for l in read_lines(args.text)]
    if lines and lines[-1] == "":
        lines.pop()
    first = args.offset if args.offset >= 0 else len(lines) + args.offset
    if not 0 <= first < len(lines):
        sys.exit(f"hf_dump: error: {args.text}: --offset {args.offset} is outside the text ({len(lines)} lines)")
    text = "\n".join(lines[first:first + max(64, args.tokens)])
    if tok is not None:
        ids = tok(text, add_special_tokens=True)["input_ids"]
        texts = tok.convert_ids_to_tokens(ids)
    else:  # random model without a tokenizer: bytes as ids, BOS = 1
        raw = text.encode("utf-8")
        ids = [1] + [3 + b for b in raw][: args.tokens - 1]
        ids = [i % vocab for i in ids]
        texts = ["<s>"] + [chr(b) if 32 <= b < 127 else f"<0x{b:02X}>" for b in raw][: args.tokens - 1]
    if len(ids) < args.tokens:
        sys.exit(f"hf_dump: error: {args.text}: --tokens {args.tokens} is beyond the text ({len(ids)} tokens after line {first})")
    return ids[: args.tokens], texts[: args.tokens], first, len(lines)


def build_model(args):
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
    if args.random_llama:
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=688, num_hidden_layers=3,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
                          rope_theta=10000.0)
        return LlamaForCausalLM(cfg), None, "random-llama-hd64", hashlib.sha256(b"random-llama-seed0").hexdigest()
    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32 if args.fp32 else "auto")
    tok = AutoTokenizer.from_pretrained(args.tokenizer or args.model)
    h = hashlib.sha256()
    for name in sorted(os.listdir(args.model)) if os.path.isdir(args.model) else []:
        if name.endswith((".safetensors", ".bin")):
            with open(os.path.join(args.model, name), "rb") as f:
                for chunk in iter(lambda: f.read(1 << 24), b""):
                    h.update(chunk)
    return model, tok, os.path.basename(os.path.normpath(args.model)), h.hexdigest()


def rope_theta(cfg):
    for src in (getattr(cfg, "rope_parameters", None), getattr(cfg, "rope_scaling", None)):
        if isinstance(src, dict) and "rope_theta" in src:
            return float(src["rope_theta"])
    return float(getattr(cfg, "rope_theta", 10000.0))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="local Hugging Face model folder")
    ap.add_argument("--tokenizer", help="tokenizer folder (default: the model's)")
    ap.add_argument("--random-llama", action="store_true", help="tiny random Llama (3 layers, 4q/2kv heads, head_dim 64)")
    ap.add_argument("--text", required=True)
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    ap.add_argument("--fp32", action="store_true", help="load weights in float32")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--check", action="store_true", help="verify the dump reproduces each layer's attention output")
    args = ap.parse_args()
    if not args.random_llama and not args.model:
        sys.exit("hf_dump: error: give --model PATH or --random-llama")

    model, tok, name, sha = build_model(args)
    model = model.to(args.device).eval()
    cfg = model.config
    n_layers, n_heads, n_kv = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads
    ids, texts, first, total = passage_ids(args, tok, cfg.vocab_size)
    T = len(ids)
    if T > getattr(cfg, "max_position_embeddings", T):
        sys.exit(f"hf_dump: error: --tokens {T} exceeds the model's context {cfg.max_position_embeddings}")

    from transformers.models.llama import modeling_llama
    apply_rope = getattr(sys.modules[type(model.model.layers[0].self_attn).__module__], "apply_rotary_pos_emb",
                         modeling_llama.apply_rotary_pos_emb)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(args.out) + ".tmp-", dir=out_dir)
    os.close(fd)
    store = np.float16 if args.dtype == "float16" else np.float32
    try:
        f = h5py.File(tmp, "w")
        a = f.attrs
        a["format"], a["format_version"], a["model_name"], a["checkpoint_sha256"] = "oscar-kv-dump", 1, name, sha
        a["n_layers"], a["n_heads"], a["n_kv_heads"], a["head_dim"] = n_layers, n_heads, n_kv, hd
        a["rope_convention"], a["rope_theta"] = "half-split", rope_theta(cfg)
        a["text_source"] = f"{os.path.basename(args.text)} lines {first}.. ({total - first} of {total} lines), first {T} tokens"
        a["token_count"], a["storage_dtype"], a["producer"] = T, args.dtype, "experiments/hf_dump.py"
        f.create_dataset("token_ids", data=np.asarray(ids, dtype=np.int32))
        f.create_dataset("token_text", data=texts, dtype=h5py.string_dtype("utf-8"))

        pos = torch.arange(T, device=args.device)[None]
        captured, checks = {}, []

        def hook(layer, kind):
            def fn(mod, inp, out):
                captured[kind] = out.detach().float()[0]  # [T, heads*hd]
                if kind == "o_in":
                    return
                if len(captured) == 3 and all(k in captured for k in ("q", "k", "v")):
                    q_pre = captured.pop("q").view(T, n_heads, hd).transpose(0, 1)  # [H, T, hd]
                    k_pre = captured.pop("k").view(T, n_kv, hd).transpose(0, 1)
                    v = captured.pop("v").view(T, n_kv, hd).transpose(0, 1)
                    cos, sin = model.model.rotary_emb(v[None], pos)
                    q, k = apply_rope(q_pre[None], k_pre[None], cos, sin)
                    q, k = q[0], k[0]
                    g = f.create_group(f"layer_{layer:03d}")
                    for nm, x in (("q", q), ("q_pre", q_pre), ("k", k), ("k_pre", k_pre), ("v", v)):
                        arr = x.cpu().numpy()
                        if not np.isfinite(arr).all():
                            raise RuntimeError(f"layer {layer} {nm}: non-finite activations")
                        g.create_dataset(nm, data=arr.astype(store), chunks=(1, min(T, 1024), hd))
                    if args.check:
                        checks.append((layer, q, k, v))
            return fn

        handles = []
        for i, L in enumerate(model.model.layers):
            at = L.self_attn
            handles += [at.q_proj.register_forward_hook(hook(i, "q")), at.k_proj.register_forward_hook(hook(i, "k")),
                        at.v_proj.register_forward_hook(hook(i, "v"))]
            if args.check:
                handles.append(at.o_proj.register_forward_hook(
                    (lambda i: lambda m, inp, out: checks.append(("o", i, inp[0].detach().float()[0])))(i)))
        with torch.no_grad():
            logits = model(torch.tensor([ids], device=args.device)).logits.float()[0]
        for h in handles:
            h.remove()
        loss = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:], device=args.device)).item()
        a["mean_next_token_loss"] = loss
        f.close()
        if args.check:  # the dumped q, k, v must reproduce the attention output the model computed
            outs = {c[1]: c[2] for c in checks if c[0] == "o"}
            worst = 0.0
            for c in checks:
                if c[0] == "o":
                    continue
                layer, q, k, v = c
                rep = n_heads // n_kv
                kk, vv = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
                s = (q @ kk.transpose(1, 2)) / hd ** 0.5
                s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool, device=s.device), 1), float("-inf"))
                o = (s.softmax(-1) @ vv).transpose(0, 1).reshape(T, n_heads * hd)
                err = ((o - outs[layer]).norm() / outs[layer].norm()).item()
                worst = max(worst, err)
                print(f"check layer {layer}: attention output from dumped q/k/v vs model: rel err {err:.2e}")
            if worst > 1e-3:
                raise RuntimeError(f"dumped activations do not reproduce the model's attention (rel err {worst:.2e})")
        os.replace(tmp, args.out)
        print(f"{name}: {T} tokens, {n_layers} layers, {n_heads}q/{n_kv}kv heads, head_dim {hd}: "
              f"mean next-token loss {loss:.4f} -> {args.out}")
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


if __name__ == "__main__":
    main()
