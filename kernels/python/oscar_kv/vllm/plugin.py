"""plugin.py: register(), vLLM's `vllm.general_plugins` entry point: what vLLM 0.26 needs to serve kv_cache_dtype
"oscar_cov_int2" / "oscar_cov_int4", every patch of vLLM in this one function (the version is checked on import):
  1. the dtype names join vLLM's closed CacheDType literal (config validation, attention selector, CLI choices) and map
     to torch.uint8 (0.26 has no register_kv_cache_dtype);
  2. the backend is registered as vLLM's CUSTOM attention backend, and the CUDA platform routes each of these dtypes
     to its backend class (backend.BACKENDS) after oscar_kv.paged's refusals (MLA, sliding windows, head_dim, dtype),
     so no attention_backend argument is needed;
  3. Attention.get_kv_cache_spec gives these layers the page size of oscar_kv.paged (OscarCovSpec), refuses prefix
     caching and speculative decoding, and loads the layer's rotations;
  4. the V2 model runner's prepare_attn hands each step's request-state indices (the sequences' window slots) to the
     oscar_cov metadata builders, which put them into the step's metadata.
Idempotent: vLLM calls it once in every process it starts; a call that finds the dtype names in vLLM's literal (the
first patch) does nothing."""
import dataclasses
import typing

from .. import paged


def _extend_cache_dtypes():
    import torch
    import vllm.config.cache as cache_mod
    from vllm.utils import torch_utils

    names = tuple(paged.CACHE_DTYPES)
    old = typing.get_args(cache_mod.CacheDType)
    if names[0] not in old:
        new = typing.Literal[old + names]
        cache_mod.CacheDType = new
        for f in dataclasses.fields(cache_mod.CacheConfig):
            if f.name == "cache_dtype":
                f.type = new
        fields = getattr(cache_mod.CacheConfig, "__pydantic_fields__", {})
        if "cache_dtype" in fields:
            fields["cache_dtype"].annotation = new
        from pydantic.dataclasses import rebuild_dataclass
        rebuild_dataclass(cache_mod.CacheConfig, force=True)
        import vllm.v1.attention.selector as selector
        selector.CacheDType = new
        import vllm.engine.arg_utils as arg_utils
        if hasattr(arg_utils, "_compute_kwargs"):
            arg_utils._compute_kwargs.cache_clear()
    for n in names:
        torch_utils.STR_DTYPE_TO_TORCH_DTYPE[n] = torch.uint8


def _route_backend():
    from vllm.platforms.cuda import CudaPlatformBase
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    from .backend import BACKENDS
    register_backend(AttentionBackendEnum.CUSTOM, BACKENDS["oscar_cov_int2"])
    original = CudaPlatformBase.get_attn_backend_cls.__func__

    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None):
        c = attn_selector_config
        if c.kv_cache_dtype in paged.CACHE_DTYPES:
            paged.check_layer(c.head_size, str(c.dtype).replace("torch.", ""), use_mla=c.use_mla,
                              sliding_window=c.has_sliding_window)
            if c.has_sink or c.use_sparse or c.attn_type != "decoder":
                raise paged.Unsupported(f"{c.kv_cache_dtype}: attention sinks, sparse and non-decoder attention are not "
                                        "supported by the oscar_cov vLLM backend; use another kv_cache_dtype")
            return BACKENDS[c.kv_cache_dtype]
        return original(cls, selected_backend, attn_selector_config, num_heads)

    CudaPlatformBase.get_attn_backend_cls = classmethod(get_attn_backend_cls)


def _wrap_spec():
    from vllm.model_executor.layers.attention.attention import Attention

    from . import backend
    original = Attention.get_kv_cache_spec

    def get_kv_cache_spec(self, vllm_config):
        if self.kv_cache_dtype not in paged.CACHE_DTYPES:
            return original(self, vllm_config)
        cc, sc = vllm_config.cache_config, vllm_config.scheduler_config
        paged.check_engine(cc.enable_prefix_caching, vllm_config.speculative_config is not None, sc.max_num_seqs)
        return backend.spec_for_layer(self, vllm_config)

    Attention.get_kv_cache_spec = get_kv_cache_spec


def _hand_over_request_slots():
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    from .backend import OscarCovMetadataBuilder
    original = GPUModelRunner.prepare_attn

    def prepare_attn(self, input_batch):
        for groups in self.attn_groups:  # per KV-cache group, its attention groups
            for group in groups:
                for builder in group.metadata_builders:
                    if isinstance(builder, OscarCovMetadataBuilder):
                        builder.set_request_slots(input_batch.idx_mapping, input_batch.idx_mapping_np)
        return original(self, input_batch)

    GPUModelRunner.prepare_attn = prepare_attn


def register():
    """Installs the patches above (once per process)."""
    import vllm.config.cache as cache_mod
    if set(paged.CACHE_DTYPES) <= set(typing.get_args(cache_mod.CacheDType)):
        return
    paged.decode_split_tokens(0)  # a bad OSCAR_KV_DECODE_SPLIT_TOKENS is refused before the engine starts
    _extend_cache_dtypes()
    _route_backend()
    _wrap_spec()
    _hand_over_request_slots()
