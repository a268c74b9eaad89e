#!/usr/bin/env python3
"""hf_dump.py: oscar-kv dump format v2 from a Hugging Face causal LM, captured through transformers'
attention interface: the registered function "oscar_capture" receives query, key and value exactly as each
layer's attention sees them (after q/k norms and (partial) RoPE, with the layer's scaling, sliding window,
soft-cap and sink logits), records them and then runs the real attention (SDPA, or the model's own eager
function where soft-capping or sinks need it).

  python3 experiments/hf_dump.py --model HF_FOLDER --text kjv.txt.gz --offset -404 --tokens 4096 --out d.h5
  python3 experiments/hf_dump.py --gguf FILE.gguf  --text ... --out d.h5      # GGUF read by transformers
  python3 experiments/hf_dump.py --random qwen3 --text ... --out d.h5         # tiny random model, no download
  python3 experiments/hf_dump.py --random all --text ... --out FOLDER          # all eleven, FOLDER/ARCH.h5

Supported model types: llama, qwen2, qwen3, mistral, gemma2, gemma3 (gemma3_text), phi3, olmo2, granite,
smollm3, gpt_oss. Anything else is refused before a weight is read, and nothing is written.

Long passages go through the model in chunks of --chunk tokens with a DynamicCache: each layer-chunk of
q, k, v is written into preallocated HDF5 datasets as it is produced, and the loss is taken from each chunk's
own logits, so no T x T scores and no T x vocab logits exist at once.

The check (on by default, --check quick): after writing, a few layers (the first, the last, one middle and
one of every distinct attention kind: sliding window, NoPE, ...) and a few hundred query positions are
recomputed from the DUMPED tensors and per-layer attributes with the spec's reference attention in float64
(torch, no transformers code), and compared with the output transformers' attention produced in the run.
--check full does every layer and position, --check off skips it. The tolerance on the relative error
(Frobenius norm over the checked rows) is 8 * (u_model + u_store) + 1e-5, with u the unit roundoff of the
model's compute dtype and of the storage dtype (bf16 2^-8, fp16 2^-11, fp32 2^-24): rounding the inputs,
the probabilities and the output costs a few u each; a wrong tensor or attribute costs O(0.1 .. 1). Above
it the run fails (exit 1) and no file is left under the final name.

Pre-RoPE q/k (q_pre, k_pre) are recovered by inverting each layer's rotation with the cos/sin the model
passed to that layer (the inverse is divided by cos^2 + sin^2, so scaled RoPE variants invert too); the
recovered tensors are re-rotated and compared with the captured ones. NoPE layers store q_pre = q. For plain
RoPE, half-split RoPE(rope_theta, rotary_dim) of k_pre as written must give k within 0.05, else the run fails.
The per-layer rope_theta/rotary_dim/"half-split" describe the rotation exactly only for plain RoPE; for
scaled RoPE (llama3, yarn, longrope, ...) the root attribute `rope_scaling_type` names the variant and
config_json holds its parameters.
"""
import argparse, gzip, hashlib, json, math, os, signal, sys, tempfile, time

ARCHS = ["llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3", "phi3", "olmo2", "granite", "smollm3", "gpt_oss"]
MODEL_TYPES = ARCHS + ["gemma3_text"]  # HF model_type values accepted (gemma3_text: text-only Gemma 3)
PROG = "hf_dump"


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


def passage_ids(args, tok, vocab):
    lines = read_lines(args.text)
    if lines and lines[-1] == "":
        lines.pop()
    first = args.offset if args.offset >= 0 else len(lines) + args.offset
    if not 0 <= first < len(lines):
        raise Refusal(f"{args.text}: --offset {args.offset} is outside the text ({len(lines)} lines); "
                      f"give an offset in -{len(lines)}..{len(lines) - 1}")
    text = "\n".join(lines[first:])
    if tok is not None:
        # tokenize a prefix long enough for the tokens asked (about 4 characters a token; grown if short)
        n = max(4096, 6 * args.tokens)
        while True:
            ids = tok(text[:n], add_special_tokens=True)["input_ids"]
            if len(ids) > args.tokens + 16 or n >= len(text):  # the cut word lies past the passage
                break
            n *= 2
        texts = tok.convert_ids_to_tokens(ids)
    else:  # random model without a tokenizer: bytes as ids, BOS = 1
        raw = text[: 4 * args.tokens + 16].encode("utf-8")
        ids = [1] + [(3 + b) % vocab for b in raw]
        texts = ["<s>"] + [chr(b) if 32 <= b < 127 else f"<0x{b:02X}>" for b in raw]
    if len(ids) < args.tokens:
        raise Refusal(f"{args.text}: --tokens {args.tokens} is beyond the text ({len(ids)} tokens after line "
                      f"{first}); give fewer tokens or an earlier --offset")
    return ids[: args.tokens], [str(t) for t in texts[: args.tokens]], first, len(lines)


# ----------------------------------------------------------------------------------------------- models

def tiny_config(arch, big=False, head_dim=32, sliding_window=24):
    """Small configurations of each architecture, chosen so that every feature the dump records bites:
    sliding windows shorter than the passage, strong soft-capping, sinks, partial RoPE, NoPE layers,
    granite's attention_multiplier, gemma3's two RoPE bases, gpt_oss's yarn RoPE (attention factor != 1).
    head_dim: 32 for the dumps; 64 gives shapes the kernels take (4 query / 2 KV heads, hidden 4 * head_dim).
    sliding_window: mistral's (None: full attention on every layer, as recent Mistral checkpoints)."""
    import transformers as tf
    if big:  # Llama-3-8B shapes (random weights), for timing and memory at long context
        return tf.LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                              num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                              max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5,
                              bos_token_id=1, eos_token_id=2, pad_token_id=0)
    common = dict(vocab_size=512, hidden_size=4 * head_dim, intermediate_size=256, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32768,
                  initializer_range=0.1, bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
    W = 24
    hd = head_dim
    if arch == "llama":
        return tf.LlamaConfig(head_dim=hd, rope_theta=10000.0, **common)
    if arch == "qwen2":
        return tf.Qwen2Config(rope_theta=1000000.0, use_sliding_window=False, **common)
    if arch == "qwen3":
        return tf.Qwen3Config(head_dim=hd, rope_theta=1000000.0, **common)
    if arch == "mistral":
        return tf.MistralConfig(head_dim=hd, sliding_window=sliding_window, rope_theta=10000.0, **common)
    if arch == "gemma2":
        return tf.Gemma2Config(head_dim=hd, query_pre_attn_scalar=24, sliding_window=W, attn_logit_softcapping=3.0,
                               final_logit_softcapping=30.0, layer_types=["sliding_attention", "full_attention"] * 2,
                               **common)
    if arch == "gemma3":
        return tf.Gemma3TextConfig(head_dim=hd, query_pre_attn_scalar=24, sliding_window=W,
                                   layer_types=["sliding_attention"] * 3 + ["full_attention"],
                                   rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                                                    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
                                   **common)
    if arch == "phi3":
        return tf.Phi3Config(rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
                             sliding_window=None, **common)
    if arch == "olmo2":
        return tf.Olmo2Config(rope_theta=500000.0, **common)
    if arch == "granite":
        return tf.GraniteConfig(attention_multiplier=0.09, embedding_multiplier=4.0, residual_multiplier=0.5,
                                logits_scaling=2.0, rope_theta=10000.0, **common)
    if arch == "smollm3":
        return tf.SmolLM3Config(rope_theta=10000.0, no_rope_layer_interval=2, use_sliding_window=False, **common)
    if arch == "gpt_oss":
        c = dict(common, intermediate_size=128)
        return tf.GptOssConfig(head_dim=hd, num_local_experts=4, num_experts_per_tok=2, sliding_window=W,
                               layer_types=["sliding_attention", "full_attention"] * 2, **c)
    raise Refusal(f"--random {arch}: unknown architecture; give one of {', '.join(ARCHS)}, all or llama-8b")


def build_random(arch, device, dtype, cfg=None):
    """A seeded random model of `arch` (tiny_config's, or `cfg`): (model, None, name, sha)."""
    import torch
    from transformers import AutoModelForCausalLM
    big = arch == "llama-8b"
    cfg = cfg if cfg is not None else tiny_config("llama" if big else arch, big=big)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype if dtype is not None else torch.float32)
    if arch == "gpt_oss":  # sinks of order 1 so that the extra softmax term matters
        with torch.no_grad():
            g = torch.Generator(device="cpu").manual_seed(1)
            for layer in model.model.layers:
                layer.self_attn.sinks.copy_(torch.randn(layer.self_attn.sinks.shape, generator=g))
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
                      f"supported: {', '.join(ARCHS)}")


def build_pretrained(args, dtype):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if args.gguf:
        src = os.path.abspath(args.gguf)
        if not os.path.isfile(src):
            raise Refusal(f"{args.gguf}: no such file; give a GGUF file")
        folder, gfile = os.path.dirname(src), os.path.basename(src)
    else:
        src = folder = args.model
        gfile = None
        if not os.path.isdir(folder):
            raise Refusal(f"{folder}: not a folder; give a Hugging Face model folder (or --gguf FILE)")
    mt = model_type_of(folder, gfile)
    if mt not in MODEL_TYPES:
        raise Refusal(f"{src}: architecture '{mt}' is not supported; supported: {', '.join(ARCHS)}")
    kw = {"gguf_file": gfile} if gfile else {}
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype if dtype is not None else "auto",
                                                     attn_implementation="oscar_capture", **kw)
        tok = AutoTokenizer.from_pretrained(args.tokenizer or folder, **({} if args.tokenizer else kw))
    except Refusal:
        raise
    except Exception as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise Refusal(f"{src}: transformers could not load the model ({type(e).__name__}: {msg}); "
                      "check the folder/file and the transformers version")
    h = hashlib.sha256()
    files = [src] if gfile else [os.path.join(folder, n) for n in sorted(os.listdir(folder))
                                  if n.endswith((".safetensors", ".bin"))]
    for p in files:
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                h.update(block)
    name = os.path.splitext(gfile)[0] if gfile else os.path.basename(os.path.normpath(folder))
    return model, tok, name, h.hexdigest()


# ----------------------------------------------------------------------------------------------- capture

def unit_roundoff(dt):
    import torch
    return {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24,
            torch.float64: 2.0 ** -53}.get(dt, 2.0 ** -8)


def rope_params(cfg, layer_type):
    rp = getattr(cfg, "rope_parameters", None) or {}
    if isinstance(rp, dict) and layer_type in rp and isinstance(rp[layer_type], dict):
        rp = rp[layer_type]
    theta = rp.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)) if isinstance(rp, dict) else 10000.0
    rtype = rp.get("rope_type", "default") if isinstance(rp, dict) else "default"
    prf = rp.get("partial_rotary_factor", getattr(cfg, "partial_rotary_factor", 1.0)) if isinstance(rp, dict) else 1.0
    return float(theta), str(rtype), float(prf if prf is not None else 1.0)


class Capture:
    """State shared by the registered attention function and the dump loop."""

    def __init__(self, model, f, T, store_dtype, check_layers, check_pos, want_pre):
        import torch
        self.torch = torch
        self.cfg = model.config.get_text_config()
        self.f, self.T, self.store = f, T, store_dtype
        self.layers = {}      # layer_idx -> attention module
        self.pos = {}         # layer_idx -> tokens written so far
        self.meta = {}        # layer_idx -> dict of per-layer attributes (fixed at the first chunk)
        self.cos_sin = {}     # layer_idx -> (cos, sin) the model passed to this layer for the current chunk
        self.check_layers = set(check_layers)
        self.check_pos = check_pos  # sorted tensor of query positions to check (CPU, int64)
        self.outputs = {}     # layer_idx -> list of (positions, [H, n, D] float64 CPU output rows)
        self.want_pre = want_pre
        self.fault = None
        self.pre_ok = want_pre
        self.pre_note = ""
        self.rope_worst = 0.0  # re-rotation residual of the recovered pre-RoPE tensors
        self.theta_worst = None  # residual of plain RoPE(theta, rotary_dim) applied to q_pre vs q (rope layers)
        for m in model.modules():
            if isinstance(getattr(m, "layer_idx", None), int) and hasattr(m, "o_proj"):
                self.layers[m.layer_idx] = m
        self.handles = [m.register_forward_pre_hook(self._pre_hook(i), with_kwargs=True)
                        for i, m in self.layers.items()]

    def _pre_hook(self, idx):
        def fn(mod, args, kwargs):
            pe = kwargs.get("position_embeddings")
            if pe is None and len(args) > 1:
                pe = args[1]
            self.cos_sin[idx] = pe
        return fn

    def remove(self):
        for h in self.handles:
            h.remove()

    def layer_meta(self, module, idx, q, scaling, sliding_window, softcap, sinks):
        """Per-layer attributes from what attention received (the same at every chunk)."""
        H, D = q.shape[1], q.shape[3]
        ltypes = getattr(self.cfg, "layer_types", None)
        ltype = ltypes[idx] if ltypes and idx < len(ltypes) else getattr(module, "layer_type", None)
        theta, rtype, prf = rope_params(self.cfg, ltype)
        uses_rope = bool(getattr(module, "use_rope", True))
        if getattr(self.cfg, "model_type", "") == "smollm3":
            uses_rope = bool(self.cfg.no_rope_layers[idx])
        rdim = int(D * prf) if uses_rope else 0
        if scaling is None:
            scaling = D ** -0.5
        return {"scaling": float(scaling), "sliding_window": int(sliding_window or 0), "softcap": float(softcap or 0.0),
                "rope_convention": "half-split" if uses_rope else "none", "rotary_dim": rdim,
                # NoPE layers keep the model's base as rope_theta (rotary_dim 0 and "none" say it is unused)
                "rope_theta": theta, "rope_type": rtype, "n_heads": H, "head_dim": D,
                "has_sinks": sinks is not None}

    def unrotate(self, idx, x, rdim):
        """x [H, C, D] post-RoPE (float32) -> pre-RoPE, inverting with the model's cos/sin for this layer."""
        torch = self.torch
        pe = self.cos_sin.get(idx)
        if pe is None:
            return None, "the model passed no position_embeddings to the attention module"
        cos, sin = (t[0].float() for t in pe)  # [C, w]
        w = cos.shape[-1]
        if w * 2 == rdim:  # gpt_oss: cos/sin for one half, applied to both halves
            cos, sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
        elif w != rdim:
            return None, f"cos/sin width {w} does not match rotary_dim {rdim}"
        h = rdim // 2
        if not (torch.equal(cos[:, :h], cos[:, h:]) and torch.equal(sin[:, :h], sin[:, h:])):
            return None, "the rotation's cos/sin halves differ (not the rotate_half layout)"
        y = x[..., :rdim]
        rot = torch.cat([-y[..., h:], y[..., :h]], -1)
        pre = (y * cos - rot * sin) / (cos * cos + sin * sin)
        # re-rotate with the model's cos/sin: the inverse must give the captured tensor back
        back = pre * cos + torch.cat([-pre[..., h:], pre[..., :h]], -1) * sin
        err = ((back - y).norm() / y.norm().clamp_min(1e-30)).item()
        self.rope_worst = max(self.rope_worst, err)
        return torch.cat([pre, x[..., rdim:]], -1), None

    def plain_rope_residual(self, pre, post, start, theta, rdim):
        """How far plain RoPE(theta, rotary_dim, half-split) of pre is from post (float64)."""
        torch = self.torch
        C = pre.shape[1]
        h = rdim // 2
        inv = 1.0 / theta ** (torch.arange(0, h, dtype=torch.float64, device=pre.device) * 2.0 / rdim)
        ang = torch.arange(start, start + C, dtype=torch.float64, device=pre.device)[:, None] * inv[None]
        c, s = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
        p = pre[..., :rdim].double()
        y = p * c + torch.cat([-p[..., h:], p[..., :h]], -1) * s
        ref = post[..., :rdim].double()
        return ((y - ref).norm() / ref.norm().clamp_min(1e-30)).item()

    def write(self, g, name, x, start):
        torch = self.torch
        if not bool(torch.isfinite(x).all()):
            raise Refusal(f"{g.name}/{name}: non-finite activations at tokens {start}..{start + x.shape[1] - 1}; "
                          "load the model in float32 (--model-dtype float32)")
        y = x.to(torch.float16 if self.store.__name__ == "float16" else torch.float32)  # converted on the device
        if not bool(torch.isfinite(y).all()):
            raise Refusal(f"{g.name}/{name}: activations overflow float16 storage at tokens {start}..; "
                          "use --dtype float32")
        g[name][:, start:start + x.shape[1], :] = y.cpu().numpy()

    def __call__(self, module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        torch = self.torch
        idx = getattr(module, "layer_idx", None)
        sinks = kwargs.get("s_aux", getattr(module, "sinks", None))
        softcap = kwargs.get("softcap", None)
        impl = self.attention_impl(module, softcap, sinks)
        out, weights = impl(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
        if idx not in self.layers or self.layers[idx] is not module:
            return out, weights
        if query.shape[0] != 1:
            raise Refusal("batch size must be 1")
        C = query.shape[2]
        start = self.pos.get(idx, 0)
        meta = self.layer_meta(module, idx, query, scaling, kwargs.get("sliding_window"), softcap, sinks)
        g = self.f.require_group(f"layer_{idx:03d}")
        if idx not in self.meta:
            self.meta[idx] = meta
            H, Hkv, D = query.shape[1], key.shape[1], query.shape[3]
            ch = lambda: (1, min(self.T, 1024), D)
            for nm, n in (("q", H), ("k", Hkv), ("v", Hkv)) + ((("q_pre", H), ("k_pre", Hkv)) if self.want_pre else ()):
                g.create_dataset(nm, shape=(n, self.T, D), dtype=self.store, chunks=ch())
            for a in ("scaling", "sliding_window", "softcap", "rope_convention", "rotary_dim", "rope_theta"):
                g.attrs[a] = meta[a]
            if sinks is not None:
                g.create_dataset("sinks", data=sinks.detach().float().cpu().numpy().reshape(-1))
            if self.fault:  # tests only: a wrong attribute the check must catch
                if self.fault == "scaling":
                    g.attrs["scaling"] = meta["scaling"] * 1.25
                elif self.fault == "window" and meta["sliding_window"]:
                    g.attrs["sliding_window"] = meta["sliding_window"] + 1
                elif self.fault == "softcap" and meta["softcap"]:
                    g.attrs["softcap"] = 0.0
                elif self.fault == "sinks" and sinks is not None:
                    del g["sinks"]
                elif self.fault == "theta" and meta["rotary_dim"]:
                    g.attrs["rope_theta"] = meta["rope_theta"] * 10
        elif meta != self.meta[idx]:
            raise Refusal(f"layer {idx}: attention arguments changed between chunks ({self.meta[idx]} vs {meta}); "
                          "use --chunk 0")
        q, k, v = query[0].detach(), key[0, :, -C:].detach(), value[0, :, -C:].detach()
        self.write(g, "q", q, start)
        self.write(g, "k", k, start)
        self.write(g, "v", v, start)
        if self.want_pre:
            rdim = meta["rotary_dim"]
            if rdim == 0:
                qp, kp = q, k
            else:
                qp, why = self.unrotate(idx, q.float(), rdim)
                kp, why2 = self.unrotate(idx, k.float(), rdim) if qp is not None else (None, why)
                if qp is None or kp is None:
                    raise Refusal(f"layer {idx}: cannot recover pre-RoPE q/k ({why or why2}); use --no-pre-rope")
                if meta["rope_type"] == "default":
                    self.theta_worst = max(self.theta_worst or 0.0,
                                           self.plain_rope_residual(kp, k.float(), start,
                                                                    float(g.attrs["rope_theta"]), int(g.attrs["rotary_dim"])))
            self.write(g, "q_pre", qp, start)
            self.write(g, "k_pre", kp, start)
        if idx in self.check_layers:
            sel = self.check_pos[(self.check_pos >= start) & (self.check_pos < start + C)]
            if len(sel):
                rows = out[0, (sel - start).to(out.device)].detach().float().cpu()  # [n, H, D]
                self.outputs.setdefault(idx, []).append((sel, rows.transpose(0, 1)))
        self.pos[idx] = start + C
        return out, weights

    def attention_impl(self, module, softcap, sinks):
        try:
            return model_attention(module, softcap, sinks)
        except RuntimeError as e:
            raise Refusal(str(e))


def model_attention(module, softcap, sinks):
    """The attention function that computes what `module` computes: transformers' SDPA function, or the model's own
    eager attention where the layer soft-caps its logits or adds sink logits (SDPA has neither)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    if softcap is None and sinks is None:
        return sdpa_attention_forward
    eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if eager is None:
        raise RuntimeError(f"{type(module).__name__}: soft-capping or sink logits need the model's eager attention, "
                           "which its module does not define; report the architecture")
    return eager


# ----------------------------------------------------------------------------------------------- check

def reference_attention(q, k, v, scaling, window, softcap, sinks, qpos):
    """The spec's reference attention in float64. q [H, n, D] at positions qpos (int64 [n]); k, v [Hkv, Tk, D]
    for positions 0..Tk-1. Returns o [H, n, D]."""
    import torch
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


def run_check(path, cap, tol, device):
    """Recompute the checked rows from the file and compare with what the model's attention produced."""
    import h5py, torch
    worst, lines = 0.0, []
    with h5py.File(path, "r") as f:
        for idx in sorted(cap.outputs):
            g = f[f"layer_{idx:03d}"]
            a = g.attrs
            sinks = torch.from_numpy(g["sinks"][...]).double().to(device) if "sinks" in g else None
            num = den = 0.0
            for sel, got in cap.outputs[idx]:
                hi = int(sel.max()) + 1
                k = torch.from_numpy(g["k"][:, :hi, :]).double().to(device)
                v = torch.from_numpy(g["v"][:, :hi, :]).double().to(device)
                for b in range(0, len(sel), 64):
                    s = sel[b:b + 64]
                    q = torch.from_numpy(g["q"][:, s.numpy(), :]).double().to(device)
                    o = reference_attention(q, k, v, float(a["scaling"]), int(a["sliding_window"]), float(a["softcap"]),
                                            sinks, s)
                    ref = got[:, b:b + 64].to(device).double()
                    num += ((o - ref) ** 2).sum().item()
                    den += (ref ** 2).sum().item()
            err = math.sqrt(num / max(den, 1e-300))
            n = sum(len(s) for s, _ in cap.outputs[idx])
            worst = max(worst, err)
            lines.append(f"check layer {idx} ({n} queries, window {int(a['sliding_window'])}, softcap "
                         f"{float(a['softcap']):g}, rope {a['rope_convention']}, sinks {'yes' if sinks is not None else 'no'}): "
                         f"rel err {err:.2e}")
    return worst, lines


def choose_check(cap_meta_fn, n_layers, T, mode, n_layers_quick, n_queries):
    """Layers and query positions the check covers (positions sorted, int64)."""
    import torch
    if mode == "full":
        return list(range(n_layers)), torch.arange(T)
    layers = sorted({0, n_layers // 2, n_layers - 1} | set(cap_meta_fn()))[: max(n_layers_quick, 1) + 3]
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
    seen, out = set(), []
    lt = getattr(cfg, "layer_types", None) or []
    nr = getattr(cfg, "no_rope_layers", None) or []
    for i in range(cfg.num_hidden_layers):
        kind = (lt[i] if i < len(lt) else None, nr[i] if i < len(nr) else None)
        if kind not in seen:
            seen.add(kind)
            out.append(i)
    return out


# ----------------------------------------------------------------------------------------------- dump

def dump_one(args, arch_or_none, out_path):
    import torch

    out_dir = os.path.dirname(os.path.abspath(out_path))
    if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK):
        raise Refusal(f"{out_path}: the folder {out_dir} does not exist or is not writable; create it first")
    dtype = {"auto": None, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.model_dtype]
    register_capture({})
    if arch_or_none is not None:
        model, tok, name, sha = build_random(arch_or_none, args.device, dtype)
    else:
        model, tok, name, sha = build_pretrained(args, dtype)
    ids, texts, first, total = passage_ids(args, tok, model.config.get_text_config().vocab_size)
    source = f"{os.path.basename(args.text)} lines {first}.. ({total - first} of {total} lines), first {len(ids)} tokens"
    return dump_model(args, model, name, sha, ids, texts, source, out_path)


def register_capture(holder):
    """Registers the "oscar_capture" attention (calling holder["cap"]) and its mask function."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    AttentionInterface.register("oscar_capture", lambda *a, **k: holder["cap"](*a, **k))
    AttentionMaskInterface.register("oscar_capture", eager_mask)  # a materialized additive mask: right for sdpa and eager


def dump_model(args, model, name, sha, ids, texts, text_source, out_path):
    """Dumps a loaded model over the token ids `ids` (texts: their strings) to out_path (atomic). args: the
    options of main() (device, dtype, chunk, check, ...). The model's attention implementation is restored after."""
    import numpy as np, h5py, torch
    from transformers import DynamicCache

    out_dir = os.path.dirname(os.path.abspath(out_path))
    if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK):
        raise Refusal(f"{out_path}: the folder {out_dir} does not exist or is not writable; create it first")
    holder = {}
    register_capture(holder)
    cfg = model.config.get_text_config()
    mt = getattr(cfg, "model_type", "?")
    if mt not in MODEL_TYPES:
        raise Refusal(f"{name}: architecture '{mt}' is not supported; supported: {', '.join(ARCHS)}")
    previous_impl = model.config._attn_implementation
    model.set_attn_implementation("oscar_capture")
    model = model.to(args.device).eval()
    compute_dtype = next(model.parameters()).dtype
    n_layers = cfg.num_hidden_layers
    T = len(ids)
    maxpos = getattr(cfg, "max_position_embeddings", None)
    if maxpos and T > maxpos:
        raise Refusal(f"{name}: --tokens {T} exceeds the model's context ({maxpos}); give fewer tokens")
    chunk = T if args.chunk <= 0 else min(args.chunk, T)
    _, rtype, _ = rope_params(cfg, (getattr(cfg, "layer_types", None) or [None])[0])
    if chunk < T and rtype in ("dynamic", "longrope"):
        raise Refusal(f"{name}: '{rtype}' RoPE changes with the sequence length, so chunks would rotate keys "
                      f"differently from one pass; use --chunk 0 (one pass of {T} tokens)")

    store = np.float16 if args.dtype == "float16" else np.float32
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(out_path) + ".tmp-", dir=out_dir)
    os.close(fd)
    cap = f = None
    try:
        f = h5py.File(tmp, "w")
        check_layers, check_pos = ([], torch.zeros(0, dtype=torch.int64)) if args.check == "off" else \
            choose_check(lambda: distinct_kind_layers(cfg), n_layers, T, args.check, args.check_layers, args.check_queries)
        cap = Capture(model, f, T, store, check_layers, check_pos, not args.no_pre_rope)
        holder["cap"] = cap
        cap.fault = args.fault
        if len(cap.layers) != n_layers:
            raise Refusal(f"{name}: found {len(cap.layers)} attention modules for {n_layers} layers; "
                          "this model's layout is not supported")
        a = f.attrs
        a["format"], a["format_version"], a["model_name"], a["checkpoint_sha256"] = "oscar-kv-dump", 2, name, sha
        a["architecture"], a["config_json"] = mt, cfg.to_json_string(use_diff=False)
        a["text_source"] = text_source
        a["token_count"], a["storage_dtype"], a["producer"] = T, args.dtype, "experiments/hf_dump.py"
        f.create_dataset("token_ids", data=np.asarray(ids, dtype=np.int32))
        f.create_dataset("token_text", data=texts, dtype=h5py.string_dtype("utf-8"))

        cache = DynamicCache(config=model.config)
        tgt = torch.tensor(ids[1:] + [0], device=args.device)
        loss_sum, t0 = 0.0, time.time()
        with torch.no_grad():
            for s in range(0, T, chunk):
                x = torch.tensor([ids[s:s + chunk]], device=args.device)
                logits = model(input_ids=x, past_key_values=cache, use_cache=True).logits[0]
                n = min(chunk, T - 1 - s)  # the last token has no target
                for b in range(0, n, 256):  # cross-entropy in slices: never chunk x vocab in float32 at once
                    lg = logits[b:min(b + 256, n)].float()
                    loss_sum += torch.nn.functional.cross_entropy(lg, tgt[s + b:s + b + lg.shape[0]],
                                                                  reduction="sum").item()
                del logits
                done = min(s + chunk, T)
                if T >= 8192 and (done // chunk) % max(1, (T // chunk) // 8) == 0:
                    print(f"  {done}/{T} tokens, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
        secs = time.time() - t0
        cap.remove()
        missing = [i for i in range(n_layers) if cap.pos.get(i) != T]
        if missing:
            raise Refusal(f"{name}: layers {missing[:8]} were not captured for all {T} tokens; "
                          "this model does not route its attention through the attention interface")
        loss = loss_sum / max(T - 1, 1)
        m0 = cap.meta[0]
        n_kv = f["layer_000/k"].shape[0]
        a["n_layers"], a["n_heads"], a["n_kv_heads"] = n_layers, m0["n_heads"], n_kv
        a["head_dim"] = m0["head_dim"]
        a["rope_convention"] = "half-split"  # root: the model's default view (v1 readers); per-layer is authoritative
        roped = [m for m in cap.meta.values() if m["rope_convention"] != "none"]
        full = [m for m in roped if m["sliding_window"] == 0]
        a["rope_theta"] = (full or roped)[0]["rope_theta"] if roped else rope_params(cfg, None)[0]
        types = sorted({m["rope_type"] for m in cap.meta.values() if m["rope_convention"] != "none"})
        scaling_type = ",".join(types) if types else "default"
        a["rope_scaling_type"] = scaling_type
        a["has_pre_rope"] = int(not args.no_pre_rope)
        a["mean_next_token_loss"] = loss
        if any(m["has_sinks"] for m in cap.meta.values()):
            a["note"] = "sinks: per-layer learned sink logits (dataset 'sinks') add exp(sinks[h]) to each softmax denominator"
        f.close()
        print(f"{name} ({mt}): {T} tokens in chunks of {chunk}, {n_layers} layers, {m0['n_heads']}q/"
              f"{n_kv}kv heads, head_dim {m0['head_dim']}, model {str(compute_dtype).replace('torch.', '')}: "
              f"mean next-token loss {loss:.4f}, forward+capture {secs:.1f} s" +
              (f", peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB"
               if str(args.device).startswith("cuda") else ""))
        if not args.no_pre_rope:
            plain = "n/a" if cap.theta_worst is None else f"{cap.theta_worst:.1e}"
            print(f"  pre-RoPE recovered: re-rotation residual {cap.rope_worst:.1e}; plain RoPE(rope_theta, rotary_dim) "
                  f"vs the model's rotation: {plain}" + ("" if types == ["default"] or not types else
                                                         f" (scaled RoPE '{scaling_type}': rope_theta alone does not "
                                                         "give the rotation; config_json has its parameters)"))
        if cap.theta_worst is not None and cap.theta_worst > 0.05:  # float32 angles at 32K positions: ~1e-3
            raise Refusal(f"{out_path}: the per-layer rope_theta/rotary_dim do not describe the model's rotation "
                          f"(residual {cap.theta_worst:.2e}); nothing written; report the architecture")
        if args.check != "off":
            tol = 8 * (unit_roundoff(compute_dtype) + unit_roundoff(torch.float16 if store is np.float16 else torch.float32)) + 1e-5
            worst, lines = run_check(tmp, cap, tol, args.device)
            for l in lines:
                print("  " + l)
            verdict = "ok" if worst <= tol else "FAILED"
            print(f"  check ({args.check}): worst rel err {worst:.2e}, tolerance {tol:.1e}: {verdict}")
            if worst > tol:
                raise Refusal(f"{out_path}: the dumped tensors do not reproduce the model's attention (rel err "
                              f"{worst:.2e} > {tol:.1e}); nothing written; report the architecture")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp made it 0600; the dump gets an ordinary file's mode
        os.replace(tmp, out_path)
        print(f"  -> {out_path}")
        return worst if args.check != "off" else None
    finally:
        if cap is not None:
            cap.remove()
        holder.pop("cap", None)
        if previous_impl and previous_impl != "oscar_capture":
            model.set_attn_implementation(previous_impl)
        if f is not None and f.id.valid:
            f.close()
        if os.path.exists(tmp):
            os.remove(tmp)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="local Hugging Face model folder")
    src.add_argument("--gguf", help="GGUF file, read (dequantized) by transformers; needs the 'gguf' package")
    src.add_argument("--random", metavar="ARCH", help=f"tiny random model: one of {', '.join(ARCHS)}, 'all' "
                     "(then --out is a folder, one ARCH.h5 each) or 'llama-8b' (Llama-3-8B shapes, for timing)")
    ap.add_argument("--tokenizer", help="tokenizer folder (default: the model's)")
    ap.add_argument("--text", required=True)
    ap.add_argument("--offset", type=int, default=0, help="first line of the passage (negative: from the end)")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=["float32", "float16"], default="float32", help="storage dtype")
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
    ap.add_argument("--fault", choices=["scaling", "window", "softcap", "sinks", "theta"], help=argparse.SUPPRESS)  # tests
    args = ap.parse_args()
    if args.fp32:
        args.model_dtype = "float32"
    if args.tokens < 2:
        die("--tokens must be at least 2")
    try:
        import torch, h5py, numpy  # noqa: F401
        import transformers
    except ImportError as e:
        die(f"{e.name}: not installed; install torch, transformers, h5py and numpy (pip install ...)")
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also where the shell started us with SIGINT ignored
    try:
        if args.random == "all":
            os.makedirs(args.out, exist_ok=True)
            failed = []
            for arch in ARCHS:
                try:
                    dump_one(args, arch, os.path.join(args.out, f"{arch}.h5"))
                except Refusal as e:
                    print(f"{PROG}: error: {e}", file=sys.stderr)
                    failed.append(arch)
                except Exception as e:
                    print(f"{PROG}: error: --random {arch}: {unexpected(e)}", file=sys.stderr)
                    failed.append(arch)
            if failed:
                die(f"{args.out}: {len(failed)} of {len(ARCHS)} architectures failed: {', '.join(failed)}")
        else:
            if args.random is not None and args.random not in ARCHS + ["llama-8b"]:
                raise Refusal(f"--random {args.random}: unknown architecture; give one of {', '.join(ARCHS)}, "
                              "all or llama-8b")
            dump_one(args, args.random, args.out)
    except Refusal as e:
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
