"""oscar_kv.vllm: oscar-cov INT2/INT4 paged KV caches as a vLLM 0.26 attention backend (kv_cache_dtype
"oscar_cov_int2" / "oscar_cov_int4"). vLLM loads it through the `vllm.general_plugins` entry point (register()); the
layout and the refusals are oscar_kv.paged's, the kernels oscar_cov_paged_write / oscar_cov_paged_decode.

Importing it needs vLLM 0.26.x (and torch); without vLLM it raises one ImportError line naming the fix.
"""
try:
    import vllm as _vllm
except ImportError:
    raise ImportError("oscar_kv.vllm: vLLM is not installed; the plugin needs vllm 0.26.x (pip install vllm==0.26.0)") from None

from .. import paged as _paged

_paged.check_vllm_version(getattr(_vllm, "__version__", "unknown"))

from .plugin import register  # noqa: E402

__all__ = ["register"]
