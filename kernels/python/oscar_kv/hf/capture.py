"""capture.py: a transformers model's attention inputs written as an oscar-kv dump (format v2,
lib/include/oscar/03_dump/dump.h), the one writer of experiments/hf_dump.py (a file) and calibrate() (an in-memory
HDF5 file for oscar-rotate).

write_dump() runs the model over a passage through the registered attention function "oscar_capture", which receives
query, key and value exactly as each layer's attention sees them (after q/k norms and (partial) RoPE, with the layer's
scaling, sliding window, soft-cap and sink logits), records them and then runs the real attention (SDPA, or the
model's own eager function where soft-capping or sinks need it: model_attention). Long passages go through in chunks
with a DynamicCache: each layer-chunk of q, k, v is written into preallocated HDF5 datasets as it is produced, and the
loss is taken from each chunk's own logits, so no T x T scores and no T x vocab logits exist at once.

Pre-RoPE q/k (q_pre, k_pre, when asked) are recovered by inverting each layer's rotation with the cos/sin the model
passed to that layer (the inverse is divided by cos^2 + sin^2, so scaled RoPE variants invert too); the recovered
tensors are re-rotated and compared with the captured ones (Capture.rope_worst). NoPE layers store q_pre = q. For
plain RoPE, the residual of half-split RoPE(rope_theta, rotary_dim) of k_pre against k is Capture.theta_worst.
Errors are CaptureError: one line, what is wrong and what to do.
"""
import inspect
import sys
import time
from dataclasses import dataclass

import torch
from transformers import AttentionInterface, DynamicCache
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from . import architectures

CAPTURE_ATTN = "oscar_capture"
DUMP_FORMAT, DUMP_VERSION = "oscar-kv-dump", 2
LAYER_ATTRIBUTES = ("scaling", "sliding_window", "softcap", "rope_convention", "rotary_dim", "rope_theta")
STORAGE = {"float32": torch.float32, "float16": torch.float16}


class CaptureError(ValueError):
    """A model or passage the capture cannot dump; the message is one line naming the fix."""


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


def cache_argument(model, cache):
    """{keyword: cache} for model(...) and model.generate(...): recent transformers 5.x releases take the cache as
    `cache` (and deprecate `past_key_values`), earlier ones as `past_key_values`."""
    return {"cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values": cache}


def _not_capturing(*args, **kwargs):
    raise RuntimeError(f"the '{CAPTURE_ATTN}' attention runs only inside oscar_kv.hf.capture.write_dump")


def register(fn=None):
    """Registers the "oscar_capture" attention (fn, or a function refusing calls outside write_dump) and its mask (a
    materialized additive mask: right for SDPA and eager). A model may be loaded with this implementation."""
    AttentionInterface.register(CAPTURE_ATTN, fn or _not_capturing)
    AttentionMaskInterface.register(CAPTURE_ATTN, eager_mask)


def rope_params(cfg, layer_type):
    """(rope_theta, rope_type, partial_rotary_factor) of a layer type from the configuration."""
    rp = getattr(cfg, "rope_parameters", None) or {}
    if isinstance(rp, dict) and layer_type in rp and isinstance(rp[layer_type], dict):
        rp = rp[layer_type]
    if not isinstance(rp, dict):
        return 10000.0, "default", 1.0
    theta = rp.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
    prf = rp.get("partial_rotary_factor", getattr(cfg, "partial_rotary_factor", 1.0))
    return float(theta), str(rp.get("rope_type", "default")), float(prf if prf is not None else 1.0)


def write_layer_attributes(g, meta, sinks):
    """A layer group's attributes (what its attention received) and its sinks dataset."""
    for a in LAYER_ATTRIBUTES:
        g.attrs[a] = meta[a]
    if sinks is not None:
        g.create_dataset("sinks", data=sinks.detach().float().cpu().numpy().reshape(-1))


def _unrotate(pe, x, rdim):
    """x [H, C, D] post-RoPE (float32) -> (pre-RoPE, re-rotation residual, None), inverting with the model's cos/sin
    `pe` for this layer; (None, None, why) where that is not rotate_half's rotation."""
    if pe is None:
        return None, None, "the model passed no position_embeddings to the attention module"
    cos, sin = (t[0].float() for t in pe)  # [C, w]
    w = cos.shape[-1]
    if w * 2 == rdim:  # gpt_oss: cos/sin for one half, applied to both halves
        cos, sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    elif w != rdim:
        return None, None, f"cos/sin width {w} does not match rotary_dim {rdim}"
    h = rdim // 2
    if not (torch.equal(cos[:, :h], cos[:, h:]) and torch.equal(sin[:, :h], sin[:, h:])):
        return None, None, "the rotation's cos/sin halves differ (not the rotate_half layout)"
    y = x[..., :rdim]
    rot = torch.cat([-y[..., h:], y[..., :h]], -1)
    pre = (y * cos - rot * sin) / (cos * cos + sin * sin)
    # re-rotate with the model's cos/sin: the inverse must give the captured tensor back
    back = pre * cos + torch.cat([-pre[..., h:], pre[..., :h]], -1) * sin
    err = ((back - y).norm() / y.norm().clamp_min(1e-30)).item()
    return torch.cat([pre, x[..., rdim:]], -1), err, None


def plain_rope_residual(pre, post, start, theta, rdim):
    """How far plain RoPE(theta, rotary_dim, half-split) of pre is from post (float64)."""
    C = pre.shape[1]
    h = rdim // 2
    inv = 1.0 / theta ** (torch.arange(0, h, dtype=torch.float64, device=pre.device) * 2.0 / rdim)
    ang = torch.arange(start, start + C, dtype=torch.float64, device=pre.device)[:, None] * inv[None]
    c, s = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    p = pre[..., :rdim].double()
    y = p * c + torch.cat([-p[..., h:], p[..., :h]], -1) * s
    ref = post[..., :rdim].double()
    return ((y - ref).norm() / ref.norm().clamp_min(1e-30)).item()


class Capture:
    """The registered "oscar_capture" attention of one write_dump: writes each layer-chunk's q/k/v into `f`, and keeps
    the attention output at the checked layers and positions (outputs) for a reproduction check."""

    def __init__(self, model, arch, f, T, storage, pre_rope, check_layers=(), check_positions=None):
        self.cfg = model.config.get_text_config()
        self.arch, self.f, self.T, self.storage = arch, f, T, storage
        self.layers = {m.layer_idx: m for m in model.modules()
                       if isinstance(getattr(m, "layer_idx", None), int) and hasattr(m, "o_proj")}
        self.pos = {}         # layer_idx -> tokens written so far
        self.meta = {}        # layer_idx -> dict of per-layer attributes (fixed at the first chunk)
        self.cos_sin = {}     # layer_idx -> (cos, sin) the model passed to this layer for the current chunk
        self.check_layers = set(check_layers)
        self.check_positions = check_positions if check_positions is not None else torch.zeros(0, dtype=torch.int64)
        self.outputs = {}     # layer_idx -> list of (positions, [H, n, D] float32 CPU output rows)
        self.pre_rope = pre_rope
        self.rope_worst = 0.0  # re-rotation residual of the recovered pre-RoPE tensors
        self.theta_worst = None  # residual of plain RoPE(theta, rotary_dim) applied to k_pre vs k (RoPE layers)
        self.handles = [m.register_forward_pre_hook(self._pre_hook(i), with_kwargs=True) for i, m in self.layers.items()]

    def _pre_hook(self, idx):
        def fn(mod, args, kwargs):
            pe = kwargs.get("position_embeddings")
            self.cos_sin[idx] = pe if pe is not None or len(args) <= 1 else args[1]
        return fn

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []

    def layer_meta(self, module, idx, q, scaling, sliding_window, softcap, sinks):
        """Per-layer attributes from what attention received (the same at every chunk)."""
        H, D = q.shape[1], q.shape[3]
        ltypes = getattr(self.cfg, "layer_types", None)
        ltype = ltypes[idx] if ltypes and idx < len(ltypes) else getattr(module, "layer_type", None)
        theta, rtype, prf = rope_params(self.cfg, ltype)
        uses_rope = bool(getattr(module, "use_rope", True))
        if self.arch.nope_layers:
            uses_rope = bool(getattr(self.cfg, self.arch.nope_layers)[idx])
        return {"scaling": float(scaling if scaling is not None else D ** -0.5), "sliding_window": int(sliding_window or 0),
                "softcap": float(softcap or 0.0), "rope_convention": "half-split" if uses_rope else "none",
                "rotary_dim": int(D * prf) if uses_rope else 0,
                # NoPE layers keep the model's base as rope_theta (rotary_dim 0 and "none" say it is unused)
                "rope_theta": theta, "rope_type": rtype, "n_heads": H, "head_dim": D, "has_sinks": sinks is not None}

    def write(self, g, name, x, start):
        if not bool(torch.isfinite(x).all()):
            raise CaptureError(f"{g.name}/{name}: non-finite activations at tokens {start}..{start + x.shape[1] - 1}; "
                               "load the model in float32")
        y = x.to(STORAGE[self.storage])  # converted on the device
        if not bool(torch.isfinite(y).all()):
            raise CaptureError(f"{g.name}/{name}: activations overflow {self.storage} storage at tokens {start}..; "
                               "store float32")
        g[name][:, start:start + x.shape[1], :] = y.cpu().numpy()

    def _layer_group(self, idx, meta, query, key, sinks):
        """The layer's group: created with its datasets and attributes at the first chunk, then checked unchanged."""
        g = self.f.require_group(f"layer_{idx:03d}")
        if idx in self.meta:
            if meta != self.meta[idx]:
                raise CaptureError(f"layer {idx}: attention arguments changed between chunks ({self.meta[idx]} vs "
                                   f"{meta}); capture in one pass (chunk 0)")
            return g
        self.meta[idx] = meta
        H, Hkv, D = query.shape[1], key.shape[1], query.shape[3]
        names = (("q", H), ("k", Hkv), ("v", Hkv)) + ((("q_pre", H), ("k_pre", Hkv)) if self.pre_rope else ())
        for nm, n in names:
            g.create_dataset(nm, shape=(n, self.T, D), dtype=self.storage, chunks=(1, min(self.T, 1024), D))
        write_layer_attributes(g, meta, sinks)
        return g

    def _write_pre_rope(self, g, idx, meta, q, k, start):
        rdim = meta["rotary_dim"]
        qp, kp = q, k
        if rdim:
            qp, q_err, why = _unrotate(self.cos_sin.get(idx), q.float(), rdim)
            kp, k_err, why = _unrotate(self.cos_sin.get(idx), k.float(), rdim) if qp is not None else (None, None, why)
            if kp is None:
                raise CaptureError(f"layer {idx}: cannot recover pre-RoPE q/k ({why}); capture without pre-RoPE tensors")
            self.rope_worst = max(self.rope_worst, q_err, k_err)
            if meta["rope_type"] == "default":
                res = plain_rope_residual(kp, k.float(), start, float(g.attrs["rope_theta"]), int(g.attrs["rotary_dim"]))
                self.theta_worst = max(self.theta_worst or 0.0, res)
        self.write(g, "q_pre", qp, start)
        self.write(g, "k_pre", kp, start)

    def _keep_output(self, idx, out, start, C):
        sel = self.check_positions[(self.check_positions >= start) & (self.check_positions < start + C)]
        if len(sel):
            rows = out[0, (sel - start).to(out.device)].detach().float().cpu()  # [n, H, D]
            self.outputs.setdefault(idx, []).append((sel, rows.transpose(0, 1)))

    def __call__(self, module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        idx = getattr(module, "layer_idx", None)
        sinks = kwargs.get("s_aux", getattr(module, "sinks", None))
        softcap = kwargs.get("softcap", None)
        try:
            impl = model_attention(module, softcap, sinks)
        except RuntimeError as e:
            raise CaptureError(str(e)) from None
        out, weights = impl(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
        if idx not in self.layers or self.layers[idx] is not module:
            return out, weights
        if query.shape[0] != 1:
            raise CaptureError("batch size must be 1")
        C, start = query.shape[2], self.pos.get(idx, 0)
        meta = self.layer_meta(module, idx, query, scaling, kwargs.get("sliding_window"), softcap, sinks)
        g = self._layer_group(idx, meta, query, key, sinks)
        q, k, v = query[0].detach(), key[0, :, -C:].detach(), value[0, :, -C:].detach()
        for name, x in (("q", q), ("k", k), ("v", v)):
            self.write(g, name, x, start)
        if self.pre_rope:
            self._write_pre_rope(g, idx, meta, q, k, start)
        if idx in self.check_layers:
            self._keep_output(idx, out, start, C)
        self.pos[idx] = start + C
        return out, weights


@dataclass
class Dump:
    """What write_dump learned: the mean next-token loss, the forward's seconds, the chunk used, the model's compute
    dtype, the KV heads, the RoPE variants seen, and the Capture (per-layer meta, kept outputs, RoPE residuals)."""
    loss: float
    seconds: float
    chunk: int
    compute_dtype: object
    n_kv_heads: int
    rope_types: list
    capture: Capture


def _check_passage(name, cfg, T, chunk):
    maxpos = getattr(cfg, "max_position_embeddings", None)
    if maxpos and T > maxpos:
        raise CaptureError(f"{name}: {T} tokens exceed the model's context ({maxpos}); give fewer tokens")
    chunk = T if chunk <= 0 else min(chunk, T)
    _, rtype, _ = rope_params(cfg, (getattr(cfg, "layer_types", None) or [None])[0])
    if chunk < T and rtype in ("dynamic", "longrope"):
        raise CaptureError(f"{name}: '{rtype}' RoPE changes with the sequence length, so chunks would rotate keys "
                           f"differently from one pass; capture in one pass (chunk 0: {T} tokens at once)")
    return chunk


def _write_header(f, cfg, mt, name, sha, text_source, ids, texts, storage, producer):
    import h5py
    import numpy as np
    a = f.attrs
    a["format"], a["format_version"], a["model_name"], a["checkpoint_sha256"] = DUMP_FORMAT, DUMP_VERSION, name, sha
    a["architecture"], a["config_json"] = mt, cfg.to_json_string(use_diff=False)
    a["text_source"] = text_source
    a["token_count"], a["storage_dtype"], a["producer"] = len(ids), storage, producer
    f.create_dataset("token_ids", data=np.asarray(ids, dtype=np.int32))
    f.create_dataset("token_text", data=texts if texts is not None else [str(t) for t in ids],
                     dtype=h5py.string_dtype("utf-8"))


def _write_summary(f, cap, cfg, loss):
    """The root attributes known after the pass; returns the RoPE variants seen (sorted)."""
    m0 = cap.meta[0]
    a = f.attrs
    a["n_layers"], a["n_heads"], a["n_kv_heads"] = cfg.num_hidden_layers, m0["n_heads"], f["layer_000/k"].shape[0]
    a["head_dim"] = m0["head_dim"]
    a["rope_convention"] = "half-split"  # root: the model's default view (v1 readers); per-layer is authoritative
    roped = [m for m in cap.meta.values() if m["rope_convention"] != "none"]
    full = [m for m in roped if m["sliding_window"] == 0]
    a["rope_theta"] = (full or roped)[0]["rope_theta"] if roped else rope_params(cfg, None)[0]
    types = sorted({m["rope_type"] for m in roped})
    a["rope_scaling_type"] = ",".join(types) if types else "default"
    a["has_pre_rope"] = int(cap.pre_rope)
    a["mean_next_token_loss"] = loss
    if any(m["has_sinks"] for m in cap.meta.values()):
        a["note"] = "sinks: per-layer learned sink logits (dataset 'sinks') add exp(sinks[h]) to each softmax denominator"
    return types


def _forward(model, ids, chunk, device, progress):
    """Runs the passage in chunks with a DynamicCache; (mean next-token loss, seconds)."""
    T = len(ids)
    cache = DynamicCache(config=model.config)
    tgt = torch.tensor(ids[1:] + [0], device=device)
    loss_sum, t0 = 0.0, time.time()
    with torch.no_grad():
        for s in range(0, T, chunk):
            x = torch.tensor([ids[s:s + chunk]], device=device)
            logits = model(input_ids=x, use_cache=True, **cache_argument(model, cache)).logits[0]
            n = min(chunk, T - 1 - s)  # the last token has no target
            for b in range(0, n, 256):  # cross-entropy in slices: never chunk x vocab in float32 at once
                lg = logits[b:min(b + 256, n)].float()
                loss_sum += torch.nn.functional.cross_entropy(lg, tgt[s + b:s + b + lg.shape[0]], reduction="sum").item()
            del logits
            if progress is not None:
                progress(min(s + chunk, T), T, time.time() - t0)
    return loss_sum / max(T - 1, 1), time.time() - t0


def write_dump(model, ids, f, name, texts=None, sha="", text_source="", storage="float32", chunk=1024, pre_rope=False,
               check_layers=(), check_positions=None, producer="oscar_kv.hf", progress=None):
    """Runs `model` over the token ids `ids` and writes the dump into the open, empty h5py file `f` (a file, or
    h5py.File(io.BytesIO(), "w")). name/sha/text_source: root attributes; texts: the tokens' strings (default the ids);
    storage: "float32" or "float16"; chunk: tokens per forward pass (0: all at once); pre_rope: also q_pre, k_pre;
    check_layers/check_positions: where to keep the attention output (Dump.capture.outputs); progress(done, T, secs)
    is called after each chunk. The model runs in eval mode on its own device; its attention implementation and
    training mode are restored after. Returns a Dump."""
    try:
        arch, cfg = architectures.of_model(model)
    except ValueError as e:
        raise CaptureError(str(e)) from None
    T = len(ids)
    chunk = _check_passage(name, cfg, T, chunk)
    cap = Capture(model, arch, f, T, storage, pre_rope, check_layers, check_positions)
    if len(cap.layers) != cfg.num_hidden_layers:
        cap.remove()
        raise CaptureError(f"{name}: found {len(cap.layers)} attention modules for {cfg.num_hidden_layers} layers; "
                           "this model's layout is not supported")
    previous, training = model.config._attn_implementation, model.training
    register(cap)
    try:
        model.set_attn_implementation(CAPTURE_ATTN)
        model.eval()
        _write_header(f, cfg, getattr(cfg, "model_type", "?"), name, sha, text_source, ids, texts, storage, producer)
        loss, secs = _forward(model, ids, chunk, next(model.parameters()).device, progress)
    finally:
        cap.remove()
        register()
        model.train(training)
        if previous and previous != CAPTURE_ATTN:
            model.set_attn_implementation(previous)
    missing = [i for i in range(cfg.num_hidden_layers) if cap.pos.get(i) != T]
    if missing:
        raise CaptureError(f"{name}: layers {missing[:8]} were not captured for all {T} tokens; this model does not "
                           "route its attention through the attention interface")
    types = _write_summary(f, cap, cfg, loss)
    return Dump(loss, secs, chunk, next(model.parameters()).dtype, int(f["layer_000/k"].shape[0]), types, cap)

