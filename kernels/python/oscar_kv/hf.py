"""hf.py: Hugging Face transformers integration: generate() and forward passes that decode through the oscar-kv kernels.

    import oscar_kv.hf as okv
    okv.enable(model)                                     # registers the "oscar_kv" attention, selects it
    cache = okv.OscarCache(model, "oscar-omni", bits=2, max_cache_len=8192)
    out = model.generate(**inputs, past_key_values=cache, max_new_tokens=64)
    print(cache.summary())                                # which layers ran on the kernels, which did not and why

Contract. OscarCache is a transformers Cache whose eligible layers (full attention, a head_dim and query grouping
the kernels are compiled for; Gemma 2's logit soft-capping and gpt-oss's sink logits run in the kernels) hold an
oscar_kv quantized cache (OmniKvCache or CovKvCache) created at the first forward pass with that pass's batch size;
the other layers keep transformers' own DynamicLayer / DynamicSlidingWindowLayer. A prompt (the first pass) is
attended by PyTorch's SDPA in the model's dtype (the model's eager attention where it soft-caps or adds sinks) and
then written into the quantized cache (the kernels quantize on write); each later token is appended and attended
by the decode kernel (queries, keys and values in bf16, the output in float32 then the model's dtype). Left padding
is honoured: each sequence's real tokens are stored, pads never attended. oscar-cov takes rotation matrices from a
file that oscar-rotate wrote (see calibrate()); oscar-omni needs none. Beam search works (the caches are reordered
on the device); crop() (assisted decoding) raises NotImplementedError.
"""
import os
import shutil
import subprocess
import tempfile

import torch
from transformers import AttentionInterface, DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from . import _capi, rotations
from .cache import CovKvCache, KernelRotation, OmniKvCache
from .hf_dump import model_attention

ATTN_NAME = "oscar_kv"
RECIPES = ("oscar-omni", "oscar-cov", "oscar-cov-head")
# The architectures oscar-kv reads (the same list as hf_dump.py); others are refused.
MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3", "gemma3_text", "phi3", "olmo2", "granite",
               "smollm3", "gpt_oss")


def register():
    """Registers the "oscar_kv" attention function and its mask (additive, as eager attention needs; SDPA takes it too)."""
    AttentionInterface.register(ATTN_NAME, oscar_attention)
    AttentionMaskInterface.register(ATTN_NAME, eager_mask)


def enable(model):
    """register(), then makes `model` use the "oscar_kv" attention (layers without an oscar-kv cache run SDPA)."""
    register()
    model.set_attn_implementation(ATTN_NAME)
    return model


def oscar_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers attention function: layers whose cache layer is an OscarLayer attend through the kernels;
    every other call is transformers' own SDPA function, or the model's eager attention where the layer soft-caps
    its logits or adds sink logits (so fallback layers compute what the model computes without oscar-kv)."""
    layer = getattr(key, "_oscar_layer", None)
    if layer is None:
        return _ordinary_attention(module, kwargs)(module, query, key, value, attention_mask, dropout=dropout,
                                                   scaling=scaling, **kwargs)
    if kwargs.get("sliding_window") is not None:
        raise RuntimeError(f"layer {layer.layer_idx}: the model passes sliding_window={kwargs['sliding_window']!r} to "
                           "attention, which the oscar-kv kernels do not implement; this layer should have been left "
                           "on an ordinary cache: report the architecture")
    if scaling is None:
        scaling = getattr(module, "scaling", query.shape[-1] ** -0.5)
    return layer.attend(module, query, key, value, attention_mask, dropout, scaling, kwargs)


def _sinks(kwargs):
    """The per-query-head sink logits a model passes to attention (gpt-oss: s_aux), or None."""
    return kwargs.get("s_aux") if kwargs.get("s_aux") is not None else kwargs.get("sinks")


def _ordinary_attention(module, kwargs):
    """SDPA, or the model's own eager attention where soft-capping or sink logits need it (hf_dump.model_attention)."""
    return model_attention(module, kwargs.get("softcap"), _sinks(kwargs))


def _valid_keys(mask, B, L):
    """[B, L] bool of the keys a prefill's last query may see (None when all), from an SDPA-style mask."""
    if mask is None:
        return None
    m = mask[:, 0, -1, :L] if mask.dim() == 4 else mask[:, :L]
    m = m if m.dtype == torch.bool else (m == 0)
    if m.shape[0] != B:
        m = m.expand(B, L)
    return None if bool(m.all()) else m


class OscarLayer(DynamicLayer):
    """One decoder layer's oscar-kv cache (see the module docstring). update() only records the new K/V and tags
    the returned key tensor; the "oscar_kv" attention function then writes and attends."""
    is_croppable = False

    def __init__(self, owner, layer_idx):
        super().__init__()
        self.owner, self.layer_idx = owner, layer_idx
        self.kv = None          # the oscar_kv cache, created at the first pass
        self.seen = 0           # positions fed (left pads included), what transformers counts
        self.pending = None

    def lazy_initialization(self, key_states, value_states):
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.pending is not None:
            raise RuntimeError(f"layer {self.layer_idx}: the previous pass's keys were not attended by the oscar_kv "
                               "attention; call oscar_kv.hf.enable(model) before using an OscarCache")
        self.pending = (key_states, value_states, self.seen)
        self.seen += key_states.shape[-2]
        tagged = key_states.view(key_states.shape)
        tagged._oscar_layer = self
        return tagged, value_states

    def get_seq_length(self):
        return self.seen

    def get_mask_sizes(self, query_length):
        return self.seen + query_length, 0

    def get_max_length(self):
        return self.owner.capacity_tokens

    def attend(self, module, query, key, value, attention_mask, dropout, scaling, kwargs):
        k, v, before = self.pending
        self.pending = None
        B, Hq, Lq, D = query.shape
        if self.kv is None:
            self.kv = self.owner._make_kv(self.layer_idx, B, k.shape[1], D, Hq, k.device)
            # the layer's logit modifiers, fixed for the cache's life (a float32 copy of the sinks)
            self.kv.set_logits(float(kwargs.get("softcap") or 0.0), _sinks(kwargs))
        if before == 0 and Lq == k.shape[2]:  # the prompt: SDPA (or the model's eager attention) now, then quantized on write
            out, _ = _ordinary_attention(module, kwargs)(module, query, k, v, attention_mask, dropout=dropout,
                                                         scaling=scaling, **kwargs)
            kb, vb = k.to(torch.bfloat16), v.to(torch.bfloat16)
            valid = _valid_keys(attention_mask, B, Lq)
            if valid is None:
                self.kv.prefill(kb.contiguous(), vb.contiguous())
            else:  # left (or any) padding: each sequence's real tokens moved to the front, in order
                order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)
                idx = order[:, None, :, None].expand(B, k.shape[1], Lq, D)
                self.kv.prefill(kb.gather(2, idx).contiguous(), vb.gather(2, idx).contiguous(),
                                valid.sum(1).to(torch.int32))
            return out, None
        outs = []
        for i in range(Lq):  # one token at a time: appended, then its query attends (causal within the chunk)
            self.kv.append(k[:, :, i].to(torch.bfloat16).contiguous(), v[:, :, i].to(torch.bfloat16).contiguous())
            outs.append(self.kv.decode(query[:, :, i].to(torch.bfloat16).contiguous(), scaling))
        out = torch.stack(outs, dim=1) if Lq > 1 else outs[0].unsqueeze(1)
        return out.to(query.dtype), None

    def reset(self):
        self.seen, self.pending = 0, None
        if self.kv is not None:
            self.kv.seq_lens.zero_()
            self.kv.set_lengths(0)

    def reorder_cache(self, beam_idx):
        if self.kv is not None and self.seen > 0:
            self.kv.reorder(beam_idx.to(self.kv.device))

    def crop(self, tokens_to_remove):
        raise NotImplementedError("OscarCache: quantized tokens cannot be removed again (crop, used by assisted and "
                                  "speculative decoding); use an ordinary cache for assisted generation")

    def batch_repeat_interleave(self, repeats):
        if self.seen > 0:
            raise NotImplementedError("OscarCache: cannot repeat a filled cache; pass a fresh OscarCache to generate()")

    def batch_select_indices(self, indices):
        if self.seen > 0:
            raise NotImplementedError("OscarCache: cannot select sequences of a filled cache (contrastive search); "
                                      "use greedy, sampling or beam search")


def layer_plan(model, recipe, bits):
    """[(layer index, None | reason it stays on an ordinary cache)] for `model` under `recipe` at `bits`."""
    cfg = model.config.get_text_config(decoder=True)
    mt = getattr(cfg, "model_type", "?")
    if mt not in MODEL_TYPES:
        raise ValueError(f"{getattr(cfg, '_name_or_path', '') or mt}: architecture '{mt}' is not supported; supported: "
                         f"{', '.join(MODEL_TYPES)}")
    lib = _capi.load()
    n = cfg.num_hidden_layers
    types = getattr(cfg, "layer_types", None)
    if types is None:
        types = ["sliding_attention" if getattr(cfg, "sliding_window", None) is not None and
                 getattr(cfg, "use_sliding_window", True) is not False else "full_attention"] * n
    Hq, Hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    D = getattr(cfg, "head_dim", None) or cfg.hidden_size // Hq
    fmt_ok = lib.dll.oscar_omni_shape_supported if recipe == "oscar-omni" else lib.dll.oscar_cov_shape_supported
    plan = []
    for i in range(n):
        why = None
        if types[i] != "full_attention":
            w = getattr(cfg, "sliding_window", None)
            why = f"{types[i].replace('_', ' ')}" + (f" (window {w})" if w else "")
        elif not fmt_ok(D, bits):
            why = f"head_dim {D} at {bits} bits not compiled"
        elif Hq % Hkv or Hq // Hkv > lib.dll.oscar_max_query_group():
            why = f"{Hq} query heads over {Hkv} KV heads"
        plan.append((i, why))
    return plan


def require_cuda(model):
    """Raises one RuntimeError, before anything is allocated or printed, unless a CUDA device is visible and the
    model's weights are on it: the kernels run on an NVIDIA GPU (sm_90a: H100, H200)."""
    if not torch.cuda.is_available():
        raise RuntimeError("oscar_kv: no CUDA device is visible (torch.cuda.is_available() is False); the oscar-kv kernels "
                           "run on an NVIDIA GPU (built for sm_90a: H100, H200); on a CPU, evaluate recipes with oscar-eval")
    dev = next((p.device for p in model.parameters()), None)
    if dev is not None and dev.type != "cuda":
        raise RuntimeError(f"oscar_kv: the model's weights are on {dev}; move the model to the GPU first (model.cuda())")


class OscarCache(DynamicCache):
    """A transformers Cache decoding through the oscar-kv kernels (see the module docstring).

    recipe: "oscar-omni" (OScaR), "oscar-cov" or "oscar-cov-head" (OSCAR; `rotations`: the file oscar-rotate wrote
    for this model, per layer or per KV head); bits 2 or 4; max_cache_len: tokens per sequence the quantized layers
    hold (prompt, left pads excluded, plus generated tokens)."""

    def __init__(self, model, recipe="oscar-omni", bits=2, max_cache_len=4096, rotations=None):
        if recipe not in RECIPES:
            raise ValueError(f"recipe {recipe!r}: the kernels implement {', '.join(RECIPES)}; the other presets run "
                             "in oscar-eval (the C++ reference)")
        if bits not in (2, 4):
            raise ValueError(f"bits {bits!r}: the kernels store 2 or 4 bits")
        plan = layer_plan(model, recipe, bits)
        rotations_loaded = None
        if recipe.startswith("oscar-cov"):
            if rotations is None:
                raise ValueError(f"{recipe}: needs rotation matrices fitted on a calibration passage; make them with "
                                 "oscar_kv.hf.calibrate(model, token_ids, out) or oscar-rotate, and pass rotations=FILE")
            rotations_loaded = load_rotations(rotations, model, per_head=(recipe == "oscar-cov-head"))
        if any(why is None for _, why in plan):  # the arguments first; a model whose every layer falls back runs anywhere
            require_cuda(model)
        super().__init__(config=model.config)
        # not self.max_cache_len: transformers 5.17's Cache has a read-only (deprecated) property of that name
        self.recipe, self.bits, self.capacity_tokens = recipe, bits, int(max_cache_len)
        self.plan, self.rotations = plan, rotations_loaded
        for i, why in self.plan:
            if why is None:
                self.layers[i] = OscarLayer(self, i)

    def _make_kv(self, i, batch, kv_heads, head_dim, q_heads, device):
        with torch.cuda.device(device):
            if self.recipe == "oscar-omni":
                return OmniKvCache(batch, kv_heads, head_dim, self.bits, self.capacity_tokens, q_heads, device=device)
            rk, rv = self.rotations[i]
            return CovKvCache(batch, kv_heads, head_dim, self.bits, self.capacity_tokens, q_heads, device=device,
                              rotation=KernelRotation.matrices(rk, rv))

    def kernel_layers(self):
        return [i for i, why in self.plan if why is None]

    def summary(self):
        on = self.kernel_layers()
        off = [(i, why) for i, why in self.plan if why is not None]
        text = f"{self.recipe}@{self.bits}: {len(on)} of {len(self.plan)} layers on the oscar-kv kernels"
        if off:
            groups = {}
            for i, why in off:
                groups.setdefault(why, []).append(i)
            text += "; on an ordinary cache: " + "; ".join(f"layers {_ranges(ls)} ({why})" for why, ls in groups.items())
        return text

    def kv_bytes(self):
        """Device bytes of the quantized layers' caches (allocated ones) plus the ordinary layers' K/V tensors."""
        total = 0
        for layer in self.layers:
            if isinstance(layer, OscarLayer):
                total += layer.kv.nbytes if layer.kv is not None else 0
            elif getattr(layer, "keys", None) is not None:
                total += layer.keys.numel() * layer.keys.element_size() * 2
        return total


def _ranges(ls):
    out, s = [], None
    for j, x in enumerate(ls):
        if s is None:
            s = x
        if j + 1 == len(ls) or ls[j + 1] != x + 1:
            out.append(str(s) if s == x else f"{s}-{x}")
            s = None
    return ",".join(out)


def load_rotations(path, model, per_head=False):
    """Per layer (R_K, R_V) float32 tensors [n][d][d] from an oscar-rotate file, checked against `model`."""
    cfg = model.config.get_text_config(decoder=True)
    D = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    with rotations.open_checked(path, cfg.num_hidden_layers, D, per_head=per_head) as f:
        return [tuple(torch.from_numpy(m) for m in rotations.layer(f, i)) for i in range(cfg.num_hidden_layers)]


def tool_path(name):
    """An oscar-kv command-line tool, found without environment variables: installed with this package (oscar_kv/bin/,
    pip install copies it there from the build), beside the kernels library this package loads (its build folder's
    apps/, or an installation's bin/ next to lib/), OSCAR_BUILD/apps/, or PATH. Else one FileNotFoundError saying how
    to get it."""
    lib = _capi.default_library_path()
    cands = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", name),
             str(lib.parent.parent / "apps" / name), str(lib.parent.parent / "bin" / name)]
    if os.environ.get("OSCAR_BUILD"):
        cands.append(os.path.join(os.environ["OSCAR_BUILD"], "apps", name))
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(f"{name}: not installed with oscar_kv, not beside {lib} and not on PATH; build it "
                            f"(cmake --build build --target {name}) and reinstall the package (pip install kernels/python), "
                            "or put the build's apps/ folder on PATH")


def calibrate(model, token_ids, out, recipe="oscar-cov", name=None, quiet=True):
    """Fits oscar-cov's rotations on a calibration passage run through `model`: the passage's q/k/v are dumped
    (oscar_kv.hf_dump's capture, a temporary dump file) and the C++ reference (oscar-rotate) fits and writes the
    matrices to `out`. token_ids: the passage (ints). Returns `out`."""
    from argparse import Namespace
    from . import hf_dump
    if recipe not in ("oscar-cov", "oscar-cov-head"):
        raise ValueError(f"recipe {recipe!r}: only oscar-cov and oscar-cov-head are calibrated")
    out_dir = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK):
        raise ValueError(f"{out}: the folder {out_dir} does not exist or is not writable; create it first")
    tool = tool_path("oscar-rotate")
    device = next(model.parameters()).device
    args = Namespace(device=str(device), dtype="float32", chunk=1024, check="off", check_layers=0, check_queries=0,
                     no_pre_rope=True, fault=None)
    with tempfile.TemporaryDirectory(prefix="oscar-calib-", dir=out_dir) as tmp:
        dump = os.path.join(tmp, "calibration.h5")
        name = name or os.path.basename(os.path.normpath(getattr(model.config, "_name_or_path", "") or "model"))
        ids = [int(t) for t in token_ids]
        texts = [str(t) for t in ids]
        run = (lambda: hf_dump.dump_model(args, model, name, "", ids, texts, "calibration passage (token ids)", dump))
        if quiet:
            import contextlib
            import io
            with contextlib.redirect_stdout(io.StringIO()):
                run()
        else:
            run()
        cmd = [tool, "--calib", dump, "--recipe", recipe, "--out", out] + (["--quiet"] if quiet else [])
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"oscar-rotate failed: {(r.stderr or r.stdout).strip()}")
        # oscar-rotate records its --calib path, a temporary dump deleted here: name the passage instead (the token
        # ids themselves are in /calibration_token_ids)
        import h5py
        with h5py.File(out, "r+") as f:
            f.attrs["calibration"] = f"{name}: {len(ids)}-token passage through oscar_kv.hf.calibrate (dump not kept)"
    return out
