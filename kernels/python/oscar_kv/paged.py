"""paged.py: oscar-cov's paged serving layout in numbers, without vLLM or a GPU: the cache-dtype names a serving
engine takes, what one page and one window slot cost, where a token's codes sit, and the checks that refuse what the
kernels cannot serve. The sizes and offsets come from the C library (oscar_cov_paged_layout_of, the one description
in kernels/include/oscar/cov_paged_format.h), loaded by _capi.load() (OSCAR_KERNELS_LIB or the build's library).

A page holds `page_tokens` positions of one sequence for every KV head of a layer; head h's region is, in order,
K codes [P][D*bits/8], V codes [P][D*bits/8], K (scale, zero) fp16x2 [P], V (scale, zero) fp16x2 [P]. The BF16 sink
(64 tokens) and recent window (256) live outside the pages in per-sequence window slots.
"""
import os
from dataclasses import dataclass
from functools import cached_property

from . import _capi

# kv_cache_dtype name -> body bits
CACHE_DTYPES = {"oscar_cov_int2": 2, "oscar_cov_int4": 4}
SINK, RECENT = 64, 256
PAGE_MULTIPLE = 64           # page_tokens must be a multiple of it (the INT2 decode chunk)
DEFAULT_PAGE_TOKENS = 256    # the page (vLLM kernel block) the plugin asks for
HEAD_DIMS = (64, 128, 256)   # compiled decode shapes (oscar_cov_shape_supported)
SUPPORTED_VLLM = "0.26"      # the one vLLM minor the plugin patches
# The decode's fixed split (oscar_paged_batch.split_tokens): tokens per block of a sequence's body, whatever batch the
# sequence shares, so that its attention output does not depend on the batch. It is an engine constant chosen from
# max_model_len (decode_split_tokens): longer splits mean fewer partials and block starts at long context and fewer
# blocks to fill the GPU at small batch (experiments/device/paged_split_bench.py measures both sides).
DECODE_SPLIT_TOKENS = 2048        # max_model_len below LONG_CONTEXT
DECODE_SPLIT_TOKENS_LONG = 4096   # max_model_len >= LONG_CONTEXT
LONG_CONTEXT = 65536
SPLIT_GRANULE = 256               # the kernels' body split granule (plan::kQuantGranule: 4 warps x 64 tokens)
SPLIT_ENV = "OSCAR_KV_DECODE_SPLIT_TOKENS"


class Unsupported(ValueError):
    """A model, setting or engine the paged oscar-cov cache cannot serve; the message is one line naming the fix."""


def _library_field(name, doc):
    """A PagedLayout property read from the library's oscar_cov_paged_layout."""
    return property(lambda self: getattr(self._c, name), doc=doc)


@dataclass(frozen=True)
class PagedLayout:
    """One layer's paged oscar-cov geometry."""
    num_kv_heads: int
    head_dim: int
    bits: int
    page_tokens: int = DEFAULT_PAGE_TOKENS
    sink: int = SINK
    recent: int = RECENT

    def __post_init__(self):
        if self.bits not in (2, 4):
            raise Unsupported(f"bits={self.bits}: oscar-cov pages hold 2- or 4-bit codes")
        if self.head_dim not in HEAD_DIMS:
            raise Unsupported(f"head_dim={self.head_dim}: the oscar-cov kernels take head_dim {', '.join(map(str, HEAD_DIMS))}")
        if self.num_kv_heads <= 0:
            raise Unsupported(f"num_kv_heads={self.num_kv_heads} must be positive")
        if self.page_tokens <= 0 or self.page_tokens % PAGE_MULTIPLE:
            raise Unsupported(f"page_tokens={self.page_tokens}: pages hold a positive multiple of {PAGE_MULTIPLE} tokens "
                              f"(set the engine's block size to {DEFAULT_PAGE_TOKENS})")

    @cached_property
    def _c(self):
        """The library's oscar_cov_paged_layout of this shape (a shape it refuses raises Unsupported with its message)."""
        try:
            return _capi.load().cov_paged_layout(self.page_tokens, self.num_kv_heads, self.head_dim, self.bits, self.sink,
                                                 self.recent)
        except _capi.OscarError as e:
            raise Unsupported(e.message) from None

    code_bytes = _library_field("code_bytes", "Packed code bytes of one token row (K or V) of one head.")
    param_bytes = _library_field("param_bytes", "Bytes of one token row's fp16 (scale, zero) pair (K or V) of one head.")
    token_bytes = _library_field("token_bytes", "Bytes of one token of one KV head in a page: K and V codes and their pairs.")
    region_bytes = _library_field("region_bytes", "Bytes of one KV head's region of a page.")
    page_bytes = _library_field("page_bytes", "Bytes of one page (all KV heads).")
    window_slot_bytes = _library_field("window_slot_bytes", "One sequence's BF16 sink and recent windows, K and V, all KV heads.")

    def offsets(self):
        """Byte offsets inside a head's region: K codes, V codes, K params, V params."""
        c = self._c
        return c.k_codes_offset, c.v_codes_offset, c.k_params_offset, c.v_params_offset

    def slot(self, page, offset):
        """The engine's slot number of position `offset` of page `page` (slot_mapping's value)."""
        if not 0 <= offset < self.page_tokens:
            raise ValueError(f"offset {offset} outside a page of {self.page_tokens} tokens")
        return page * self.page_tokens + offset

    def page_of(self, slot):
        """(page, offset) of a slot."""
        return divmod(slot, self.page_tokens)

    def code_address(self, slot, head, value=False):
        """Byte offset in the page pool of the code row of token `slot`, KV head `head` (keys, or values)."""
        page, off = self.page_of(slot)
        base = page * self.page_bytes + head * self.region_bytes
        return base + self.offsets()[1 if value else 0] + off * self.code_bytes

    def bytes_per_token(self):
        """Pool bytes per cached token (all KV heads of one layer), windows not counted."""
        return self.num_kv_heads * self.token_bytes

    def bf16_ratio(self):
        """How many times fewer pool bytes a token takes than in a BF16 page."""
        return self._c.bf16_token_bytes / self.token_bytes


def decode_split_tokens(max_model_len, env=None):
    """The engine's fixed decode split: $OSCAR_KV_DECODE_SPLIT_TOKENS when set (a positive multiple of SPLIT_GRANULE),
    else DECODE_SPLIT_TOKENS_LONG for max_model_len >= LONG_CONTEXT and DECODE_SPLIT_TOKENS below."""
    env = os.environ if env is None else env
    raw = env.get(SPLIT_ENV, "").strip()
    if raw:
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if n <= 0 or n % SPLIT_GRANULE:
            raise Unsupported(f"{SPLIT_ENV}={raw}: the decode split must be a positive multiple of {SPLIT_GRANULE} tokens "
                              f"(e.g. {DECODE_SPLIT_TOKENS_LONG}), or unset for the default")
        return n
    return DECODE_SPLIT_TOKENS_LONG if max_model_len >= LONG_CONTEXT else DECODE_SPLIT_TOKENS


def check_vllm_version(version):
    """Refuses a vLLM other than 0.26.x: the plugin patches that version's cache-dtype literal and attention layer."""
    parts = str(version).split(".")
    if ".".join(parts[:2]) != SUPPORTED_VLLM:
        raise Unsupported(f"vLLM {version}: the oscar_kv plugin supports vLLM {SUPPORTED_VLLM}.x only "
                          f"(pip install vllm=={SUPPORTED_VLLM}.0)")


def check_layer(head_dim, dtype_name, use_mla=False, sliding_window=False, alibi=False, softcap=None, kv_sharing=False):
    """Refuses an attention layer the paged kernels cannot take; dtype_name: the model dtype's name ('bfloat16', ...)."""
    if use_mla:
        raise Unsupported("MLA attention: oscar_cov caches store per-head K and V; serve this model with another kv_cache_dtype")
    if sliding_window:
        raise Unsupported("sliding-window attention layers: the oscar_cov pages keep every token; serve this model with "
                          "another kv_cache_dtype")
    if alibi or softcap or kv_sharing:
        what = "ALiBi" if alibi else "logit soft-capping" if softcap else "KV sharing across layers"
        raise Unsupported(f"{what}: not supported by the oscar_cov vLLM backend; use another kv_cache_dtype")
    if head_dim not in HEAD_DIMS:
        raise Unsupported(f"head_dim {head_dim}: the oscar_cov kernels take head_dim {', '.join(map(str, HEAD_DIMS))}")
    if dtype_name != "bfloat16":
        raise Unsupported(f"model dtype {dtype_name}: the oscar_cov kernels take bfloat16 activations (pass dtype='bfloat16')")


def check_engine(enable_prefix_caching, speculative, max_num_seqs):
    """Refuses engine features the plugin does not serve yet."""
    if enable_prefix_caching:
        raise Unsupported("prefix caching: the oscar_cov BF16 sink cannot be rebuilt from shared pages; pass "
                          "enable_prefix_caching=False (--no-enable-prefix-caching)")
    if speculative:
        raise Unsupported("speculative decoding: not supported by the oscar_cov vLLM backend; drop speculative_config")
    if max_num_seqs <= 0:
        raise Unsupported(f"max_num_seqs={max_num_seqs} must be positive")
