"""oscar_kv.hf: Hugging Face transformers integration: generate() and forward passes that decode through the oscar-kv
kernels.

    import oscar_kv.hf as okv
    okv.enable(model)                                     # registers the "oscar_kv" attention, selects it
    cache = okv.OscarCache(model, "oscar-omni", bits=2, max_cache_len=8192)
    out = model.generate(**inputs, **okv.cache_argument(model, cache), max_new_tokens=64)
    print(cache.summary())                                # which layers ran on the kernels, which did not and why

    rot = okv.calibrate(model, calibration_ids)           # oscar-cov's rotations (optionally also out="rot.h5")
    cache = okv.OscarCache(model, "oscar-cov", bits=2, max_cache_len=8192, rotations=rot)

Contract. OscarCache is a transformers Cache whose eligible layers (full attention, a head_dim and query grouping
the kernels are compiled for; Gemma 2's logit soft-capping and gpt-oss's sink logits run in the kernels) hold an
oscar_kv quantized cache (OmniKvCache or CovKvCache) created at the first forward pass with that pass's batch size;
the other layers keep transformers' own DynamicLayer / DynamicSlidingWindowLayer. A prompt (the first pass) is
attended by PyTorch's SDPA in the model's dtype (the model's eager attention where it soft-caps or adds sinks) and
then written into the quantized cache (the kernels quantize on write); each later token is appended and attended
by the decode kernel (queries, keys and values in bf16, the output in float32 then the model's dtype). Left padding
is honoured: each sequence's real tokens are stored, pads never attended. oscar-cov takes rotation matrices that
oscar-rotate fitted (calibrate(), or a file it wrote); oscar-omni needs none. Beam search works (the caches are
reordered on the device); crop() (assisted decoding) raises NotImplementedError.

Modules: architectures (the one table of supported architectures), attention (the "oscar_kv" attention function and
OscarLayer), cache (OscarCache, layer_plan, load_rotations), capture (a model's q/k/v as an oscar-kv dump, the writer
of experiments/hf_dump.py and calibrate), calibration (calibrate, tool_path). Needs torch and transformers.
"""
from .architectures import ARCHITECTURES, MODEL_TYPES  # noqa: F401
from .attention import ATTN_NAME, OscarLayer, enable, oscar_attention, register  # noqa: F401
from .cache import RECIPES, OscarCache, checked_rotations, layer_plan, load_rotations, require_cuda  # noqa: F401
from .calibration import calibrate, tool_path  # noqa: F401
from .capture import cache_argument, model_attention  # noqa: F401
