"""cache.py: OscarCache, the transformers Cache whose eligible layers decode through the oscar-kv kernels, its layer
plan (which layers the kernels take, and why the others stay on an ordinary cache) and the rotations it loads."""
import os

import torch
from transformers import DynamicCache

from .. import _capi, rotations
from ..cache import CovKvCache, KernelRotation, OmniKvCache
from ..checks import BITS, RECIPES
from . import architectures
from .attention import OscarLayer


def layer_plan(model, recipe, bits):
    """[(layer index, None | reason it stays on an ordinary cache)] for `model` under `recipe` at `bits`."""
    _, cfg = architectures.of_model(model)
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
    """A transformers Cache decoding through the oscar-kv kernels (the contract: oscar_kv.hf's docstring).

    recipe: "oscar-omni" (OScaR), "oscar-cov" or "oscar-cov-head" (OSCAR; `rotations`: the file oscar-rotate wrote
    for this model, per layer or per KV head, or the rotations calibrate() returned); bits 2 or 4; max_cache_len:
    tokens per sequence the quantized layers hold (prompt, left pads excluded, plus generated tokens)."""

    def __init__(self, model, recipe="oscar-omni", bits=2, max_cache_len=4096, rotations=None):
        if recipe not in RECIPES:
            raise ValueError(f"recipe {recipe!r}: the kernels implement {', '.join(RECIPES)}; the other presets run "
                             "in oscar-eval (the C++ reference)")
        if bits not in BITS:
            raise ValueError(f"bits {bits!r}: the kernels store 2 or 4 bits")
        plan = layer_plan(model, recipe, bits)
        rotations_loaded = None
        if recipe.startswith("oscar-cov"):
            if rotations is None:
                raise ValueError(f"{recipe}: needs rotation matrices fitted on a calibration passage; make them with "
                                 "oscar_kv.hf.calibrate(model, token_ids) or oscar-rotate, and pass rotations=(them or "
                                 "the FILE)")
            per_head = recipe == "oscar-cov-head"
            rotations_loaded = (load_rotations(rotations, model, per_head) if isinstance(rotations, (str, os.PathLike))
                                else checked_rotations(rotations, model, per_head))
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


def _shape(model):
    """(layers, KV heads, head_dim) of the model's text configuration."""
    _, cfg = architectures.of_model(model)
    return cfg.num_hidden_layers, cfg.num_key_value_heads, getattr(cfg, "head_dim", None) or \
        cfg.hidden_size // cfg.num_attention_heads


def load_rotations(path, model, per_head=False, name=None):
    """Per layer (R_K, R_V) float32 tensors [n][d][d] from an oscar-rotate file (a path, or an open binary file object
    holding one; `name` in messages), checked against `model`."""
    n_layers, _, D = _shape(model)
    with rotations.open_checked(path, n_layers, D, per_head=per_head, name=name) as f:
        return [tuple(torch.from_numpy(m) for m in rotations.layer(f, i)) for i in range(n_layers)]


def checked_rotations(rot, model, per_head):
    """`rot` (per layer (R_K, R_V), as load_rotations returns them) after checking it against `model`: one pair per
    layer, [1][d][d] matrices (per layer) or [KV heads][d][d] (per_head)."""
    n_layers, n_kv, D = _shape(model)
    want = (n_kv if per_head else 1, D, D)
    if len(rot) != n_layers or any(tuple(m.shape) != want for pair in rot for m in pair):
        shapes = sorted({tuple(m.shape) for pair in rot for m in pair})
        raise ValueError(f"rotations: {len(rot)} layers of {shapes} matrices, the model needs {n_layers} layers of "
                         f"{list(want)} ({'per KV head' if per_head else 'per layer'}); calibrate on this model")
    return rot
