"""backend.py: the oscar-cov paged attention backend for vLLM 0.26 (registered as its CUSTOM backend by plugin.py).

One layer's cache is vLLM's page pool viewed as uint8 [pages][page bytes] (oscar_kv.paged's layout, a page = one vLLM
kernel block of 256 tokens) plus this layer's BF16 window slots, allocated with the model (so vLLM's memory profile
counts them): one slot per request state of the V2 model runner (max_num_seqs) and one scratch slot for padded rows.
A step: every new token is quantized into its page and, if it is a sink or recent token, copied into its request's
window slot (oscar_cov_paged_write); then decodes attend through oscar_cov_paged_decode (graph-capturable: a uniform
decode batch replays as one CUDA graph; fixed splits of paged.decode_split_tokens(max_model_len), so a request's
attention output does not depend on the batch it shares), and prefills attend to their own tokens in BF16 (vLLM's
FlashAttention) and to what the cache holds before them (sink and recent window in BF16, the rest dequantized from the
pages).
Rotations (oscar-cov's R_K, R_V per layer or per KV head) come from OSCAR_KV_ROTATIONS: an oscar-rotate file, or
"random[:SEED]" (random orthogonal matrices, for dummy weights).
State: a step's request-state indices reach the metadata builder (set_request_slots, from plugin.py's hook of the
model runner) and flow into the step's metadata; the decode's scratch (split partials, float32 output) is vLLM's
workspace (current_workspace_manager), shared by the layers, reserved when a layer is made; the bit width is the
backend class's (one class per cache dtype, BACKENDS). Nothing here changes at module level."""
import ctypes as C
import os
from dataclasses import dataclass, replace
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right
from vllm.config import get_current_vllm_config
from vllm.v1.attention.backend import (AttentionBackend, AttentionCGSupport, AttentionImpl, AttentionMetadata,
                                       AttentionMetadataBuilder, AttentionType, CommonAttentionMetadata)
from vllm.v1.attention.backends.fa_utils import (flash_attn_varlen_func, get_flash_attn_version,
                                                 is_flash_attn_varlen_func_available)
from vllm.v1.attention.backends.utils import split_decodes_and_prefills
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.worker.workspace import current_workspace_manager

from .. import _capi, paged, rotations


@dataclass(frozen=True, kw_only=True)
class OscarCovSpec(FullAttentionSpec):
    """A full-attention layer whose page holds oscar-cov codes: block_size * num_kv_heads * token_bytes."""
    oscar_bits: int = 2

    @property
    def real_page_size_bytes(self) -> int:
        return self.block_size * paged.PagedLayout(self.num_kv_heads, self.head_size, self.oscar_bits).bytes_per_token()

    @classmethod
    def merge(cls, specs):
        return replace(super().merge(specs), oscar_bits=specs[0].oscar_bits)


def _load_rotations(layer_index, num_layers, num_kv_heads, head_dim):
    """(R_K, R_V) float32 [n][D][D] of one layer from OSCAR_KV_ROTATIONS."""
    src = os.environ.get("OSCAR_KV_ROTATIONS", "")
    if not src:
        raise paged.Unsupported("OSCAR_KV_ROTATIONS is not set: give the oscar-rotate file of this model (oscar-cov's "
                                "rotations), or 'random' for a model of dummy weights")
    if src.startswith("random"):
        seed = int(src.split(":", 1)[1]) if ":" in src else 0
        g = torch.Generator().manual_seed(seed * 100003 + layer_index)
        mats = []
        for _ in range(2):
            q, r = torch.linalg.qr(torch.randn(num_kv_heads, head_dim, head_dim, generator=g, dtype=torch.float64))
            mats.append((q * torch.sign(torch.diagonal(r, dim1=1, dim2=2)).unsqueeze(1)).float())
        return mats[0], mats[1]
    with rotations.open_checked(src, num_layers, head_dim, error=paged.Unsupported) as f:
        rk, rv = (torch.from_numpy(m).float() for m in rotations.layer(f, layer_index))
    if rk.dim() == 2:
        rk, rv = rk.unsqueeze(0), rv.unsqueeze(0)
    if rk.shape[0] not in (1, num_kv_heads):
        raise paged.Unsupported(f"{src}: {rk.shape[0]} key rotations in layer {layer_index}, the model has {num_kv_heads} KV heads")
    return rk, rv


def spec_for_layer(layer, vllm_config):
    """The layer's OscarCovSpec; loads its rotations into the impl (before any CUDA graph is captured)."""
    bits = paged.CACHE_DTYPES[layer.kv_cache_dtype]
    from vllm.model_executor.models.utils import extract_layer_index
    layer.impl.bind_layer(extract_layer_index(layer.layer_name), vllm_config.model_config.get_num_layers(vllm_config.parallel_config))
    return OscarCovSpec(block_size=vllm_config.cache_config.block_size, num_kv_heads=layer.num_kv_heads,
                        head_size=layer.head_size, head_size_v=layer.head_size_v, dtype=torch.uint8, oscar_bits=bits)


class OscarCovBackend(AttentionBackend):
    """The backend of kv_cache_dtype oscar_cov_int2 (OscarCovInt4Backend: oscar_cov_int4); `bits` is the class's, as
    vLLM asks for the cache shape with cache_dtype_str "auto" (its specs without a quantization mode)."""
    bits: ClassVar[int] = 2
    forward_includes_kv_cache_update: bool = True  # forward() writes the step's tokens (it needs the batch's metadata)
    supported_dtypes: ClassVar[list] = [torch.bfloat16]
    supported_kv_cache_dtypes: ClassVar[list] = list(paged.CACHE_DTYPES)

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"

    @staticmethod
    def get_impl_cls():
        return OscarCovImpl

    @staticmethod
    def get_builder_cls():
        return OscarCovMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes():
        return [paged.DEFAULT_PAGE_TOKENS]

    @classmethod
    def get_preferred_block_size(cls, default_block_size: int) -> int:
        return paged.DEFAULT_PAGE_TOKENS

    @classmethod
    def get_kv_cache_shape(cls, num_blocks, block_size, num_kv_heads, head_size, cache_dtype_str="auto"):
        bits = paged.CACHE_DTYPES.get(cache_dtype_str, cls.bits)
        return (num_blocks, paged.PagedLayout(num_kv_heads, head_size, bits, block_size).page_bytes)

    @classmethod
    def get_supported_head_sizes(cls):
        return list(paged.HEAD_DIMS)

    @classmethod
    def supports_kv_cache_dtype(cls, kv_cache_dtype):
        return kv_cache_dtype in paged.CACHE_DTYPES

    @classmethod
    def supports_attn_type(cls, attn_type):
        return attn_type == AttentionType.DECODER


class OscarCovInt4Backend(OscarCovBackend):
    bits: ClassVar[int] = 4


# kv_cache_dtype -> the backend class (its qualified name) plugin.py routes the dtype's layers to
BACKENDS = {name: next(f"{__name__}.{c.__name__}" for c in (OscarCovBackend, OscarCovInt4Backend) if c.bits == bits)
            for name, bits in paged.CACHE_DTYPES.items()}


@dataclass
class OscarCovMetadata(AttentionMetadata):
    num_actual_tokens: int
    num_reqs: int
    num_decodes: int
    num_decode_tokens: int
    query_start_loc: torch.Tensor
    query_start_loc_cpu: torch.Tensor
    seq_lens: torch.Tensor
    seq_lens_cpu: torch.Tensor | None
    block_table: torch.Tensor
    slot_mapping: torch.Tensor
    window_slot: torch.Tensor      # device int32 [num_reqs]
    window_slot_cpu: list


class OscarCovMetadataBuilder(AttentionMetadataBuilder[OscarCovMetadata]):
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self._init_reorder_batch_threshold(1, supports_spec_as_decode=False)
        self.max_num_seqs = vllm_config.scheduler_config.max_num_seqs
        # persistent (CUDA graphs read it): the window slot of each batch row; padded rows get the scratch slot
        self.window_slot = torch.full((self.max_num_seqs + 8,), self.max_num_seqs, dtype=torch.int32, device=device)
        self.request_slots = None  # (device int32 [num_reqs], host copy): the step's request-state indices

    def set_request_slots(self, idx_mapping, idx_mapping_np):
        """The request-state index of every request of the step being prepared (the V2 model runner's idx_mapping,
        handed over by plugin.py before the step's metadata is built): the requests' window slots."""
        self.request_slots = (idx_mapping, idx_mapping_np)

    def build_for_cudagraph_capture(self, common_attn_metadata):
        md = self.build(0, common_attn_metadata, capture=True)
        md.seq_lens.fill_(1)
        return md

    def build(self, common_prefix_len, common_attn_metadata: CommonAttentionMetadata, fast_build=False, capture=False):
        cam = common_attn_metadata
        n = cam.num_reqs
        nd, _, ndt, _ = split_decodes_and_prefills(cam, decode_threshold=self.reorder_batch_threshold)
        self.window_slot[:n].fill_(self.max_num_seqs)
        wcpu = [self.max_num_seqs] * n
        if not capture:
            if self.request_slots is None:
                raise paged.Unsupported("oscar_cov needs vLLM's V2 model runner (it gives each request a stable window "
                                        "slot): unset VLLM_USE_V2_MODEL_RUNNER or set it to 1")
            idx, idx_np = self.request_slots
            k = min(n, idx.shape[0])
            self.window_slot[:k].copy_(idx[:k], non_blocking=True)
            wcpu[:k] = [int(x) for x in idx_np[:k]]
        return OscarCovMetadata(num_actual_tokens=cam.num_actual_tokens, num_reqs=n, num_decodes=nd, num_decode_tokens=ndt,
                                query_start_loc=cam.query_start_loc, query_start_loc_cpu=cam.query_start_loc_cpu,
                                seq_lens=cam.seq_lens, seq_lens_cpu=cam.seq_lens_cpu_upper_bound,
                                block_table=cam.block_table_tensor, slot_mapping=cam.slot_mapping,
                                window_slot=self.window_slot[:n], window_slot_cpu=wcpu)


def _ptr(t):
    return C.c_void_p(t.data_ptr()) if t is not None else None


class OscarCovImpl(AttentionImpl[OscarCovMetadata]):
    def __init__(self, num_heads, head_size, scale, num_kv_heads=None, alibi_slopes=None, sliding_window=None,
                 kv_cache_dtype="auto", logits_soft_cap=None, attn_type=AttentionType.DECODER,
                 kv_sharing_target_layer_name=None, **kwargs):
        cfg = get_current_vllm_config()
        paged.check_layer(head_size, str(cfg.model_config.dtype).replace("torch.", ""), sliding_window=sliding_window is not None,
                          alibi=alibi_slopes is not None, softcap=logits_soft_cap, kv_sharing=kv_sharing_target_layer_name is not None)
        self.num_heads, self.head_size, self.scale = num_heads, head_size, float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.bits = paged.CACHE_DTYPES[kv_cache_dtype]
        self.max_model_len = cfg.model_config.max_model_len
        self.max_num_seqs = cfg.scheduler_config.max_num_seqs
        self.split_tokens = paged.decode_split_tokens(self.max_model_len)
        dev = torch.device("cuda", torch.cuda.current_device())
        H, D, S, W = self.num_kv_heads, head_size, paged.SINK, paged.RECENT
        slots = self.max_num_seqs + 1  # + the scratch slot of padded rows
        self.k_sink = torch.zeros(slots, H, S, D, dtype=torch.bfloat16, device=dev)
        self.v_sink = torch.zeros_like(self.k_sink)
        self.k_recent = torch.zeros(slots, H, W, D, dtype=torch.bfloat16, device=dev)
        self.v_recent = torch.zeros_like(self.k_recent)
        self.lib = _capi.load()
        ws = self.lib.oscar_cov_paged_workspace_bytes(self.max_num_seqs, num_heads, H, D, self.max_model_len, self.split_tokens)
        # the decode's scratch: vLLM's workspace, shared by the layers (about 100 MB at 128 sequences of 100K tokens);
        # reserved now, with the model, so that vLLM's memory profile counts it
        self.scratch_shapes = (((ws,), torch.uint8), ((self.max_num_seqs, num_heads, D), torch.float32))
        self._scratch()
        self.rot = None
        self._view = None  # (pool address, oscar_cov_paged)
        self.fa_version = get_flash_attn_version(head_size=head_size) if is_flash_attn_varlen_func_available() else None

    def _scratch(self):
        """(workspace bytes, float32 output [max_num_seqs][num_heads][D]): views of vLLM's shared workspace."""
        return current_workspace_manager().get_simultaneous(*self.scratch_shapes)

    def bind_layer(self, layer_index, num_layers):
        """Loads this layer's rotations (from plugin.py's spec hook, before KV allocation and graph capture)."""
        if self.rot is not None:
            return
        rk, rv = _load_rotations(layer_index, num_layers, self.num_kv_heads, self.head_size)
        dev = self.k_sink.device
        self.rk, self.rv = rk.to(dev).contiguous(), rv.to(dev).contiguous()
        G = self.num_heads // self.num_kv_heads  # the prefill's per-head matrices: KV heads, and query heads (GQA)
        self.rk_kv = self.rk.expand(self.num_kv_heads, -1, -1).contiguous()
        self.rv_kv = self.rv.expand(self.num_kv_heads, -1, -1).contiguous()
        self.rk_q, self.rv_q = self.rk_kv.repeat_interleave(G, 0), self.rv_kv.repeat_interleave(G, 0)
        self.rot = _capi.Rotation(_capi.ROTATION_MATRIX, int(self.rk.shape[0] > 1), self.rk.data_ptr(), self.rv.data_ptr())
        self.write_opts, self.decode_opts = _capi.WriteOptions(self.rot), _capi.DecodeOptions(self.rot)

    def _cache(self, kv_cache):
        """The oscar_cov_paged view of this layer's page pool (built once: vLLM keeps the pool for the engine's life)."""
        if self._view is not None and self._view[0] == kv_cache.data_ptr():
            return self._view[1]
        c = _capi.CovPaged()
        c.num_kv_heads, c.head_dim, c.bits = self.num_kv_heads, self.head_size, self.bits
        c.sink, c.recent, c.page_tokens = paged.SINK, paged.RECENT, self.layout(kv_cache).page_tokens
        c.num_pages, c.page_stride = kv_cache.shape[0], kv_cache.stride(0)
        c.num_window_slots = self.k_sink.shape[0]
        self.lib.oscar_cov_paged_default_rule(C.byref(c))
        c.pages, c.k_sink, c.v_sink = kv_cache.data_ptr(), self.k_sink.data_ptr(), self.v_sink.data_ptr()
        c.k_recent, c.v_recent = self.k_recent.data_ptr(), self.v_recent.data_ptr()
        self._view = (kv_cache.data_ptr(), c)
        return c

    def layout(self, kv_cache):
        """The paged layout of this layer's pool (its page size from the pool's page bytes)."""
        per_token = paged.PagedLayout(self.num_kv_heads, self.head_size, self.bits).bytes_per_token()
        return paged.PagedLayout(self.num_kv_heads, self.head_size, self.bits, kv_cache.shape[1] // per_token)

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output=None, output_scale=None, output_block_scale=None):
        if attn_metadata is None:  # profiling and dummy runs
            return output.fill_(0)
        if self.rot is None:
            raise paged.Unsupported("oscar_cov: the layer's rotations were not loaded (plugin.py's spec hook did not run)")
        md = attn_metadata
        stream = C.c_void_p(torch.cuda.current_stream().cuda_stream)
        cache = self._cache(kv_cache)
        n = md.num_reqs
        batch = _capi.PagedBatch(n, md.seq_lens.data_ptr(), md.query_start_loc.data_ptr(), md.block_table.data_ptr(),
                                 md.block_table.stride(0), md.window_slot.data_ptr())
        T = key.shape[0]
        slots = md.slot_mapping[:T]
        self.lib.call("oscar_cov_paged_write", C.byref(cache), C.byref(self.write_opts), C.byref(batch), key.data_ptr(),
                      value.data_ptr(), key.stride(0), value.stride(0), T, slots.data_ptr(), stream)
        out = output.view(-1, self.num_heads, self.head_size)
        nd = md.num_decodes
        if nd:
            q = query[:nd].contiguous()
            dec = _capi.PagedBatch(nd, md.seq_lens.data_ptr(), md.query_start_loc.data_ptr(), md.block_table.data_ptr(),
                                   md.block_table.stride(0), md.window_slot.data_ptr(), self.split_tokens)
            workspace, out32 = self._scratch()
            self.lib.call("oscar_cov_paged_decode", C.byref(cache), C.byref(self.decode_opts), C.byref(dec), q.data_ptr(),
                          self.num_heads, self.max_model_len, C.c_float(self.scale), out32.data_ptr(),
                          workspace.data_ptr(), workspace.numel(), stream)
            out[:nd].copy_(out32[:nd])
        if n > nd:
            self._prefill(query, key, value, kv_cache, md, out)
        return output

    # ---- prefill: own tokens in BF16, the cached prefix as the cache holds it, all in the rotated frame (R_K for
    # queries and keys, R_V for values, rotated back after attention): one variable-length FlashAttention call (vLLM's
    # own, FA3 on Hopper) over every prefill of the step; torch SDPA per request where vLLM has no flash-attn build
    def _prefill(self, query, key, value, kv_cache, md, out):
        qsl = md.query_start_loc_cpu.tolist()
        lens = md.seq_lens_cpu.tolist()
        s0, e0 = qsl[md.num_decodes], qsl[md.num_reqs]
        qr = torch.einsum("thd,hde->the", query[s0:e0].float(), self.rk_q).to(torch.bfloat16)
        kr = torch.einsum("thd,hde->the", key[s0:e0].float(), self.rk_kv).to(torch.bfloat16)
        vr = torch.einsum("thd,hde->the", value[s0:e0].float(), self.rv_kv).to(torch.bfloat16)
        ks, vs, cu_q, cu_k = [], [], [0], [0]
        for r in range(md.num_decodes, md.num_reqs):
            s, e = qsl[r] - s0, qsl[r + 1] - s0
            if e <= s:
                continue
            L = int(lens[r])
            ctx = L - (e - s)
            if ctx > 0:
                kc, vc = self._context(kv_cache, md.block_table[r], md.window_slot_cpu[r], ctx, L)
                ks.append(kc)
                vs.append(vc)
            ks.append(kr[s:e])
            vs.append(vr[s:e])
            cu_q.append(e)
            cu_k.append(cu_k[-1] + L)
        if not ks:
            return
        K = torch.cat(ks) if len(ks) > 1 else ks[0]
        V = torch.cat(vs) if len(vs) > 1 else vs[0]
        o = self._attend(qr, K, V, cu_q, cu_k)  # [T, Hq, D] in the R_V frame
        out[s0:e0] = torch.einsum("the,hde->thd", o.float(), self.rv_q).to(out.dtype)

    def _attend(self, q, K, V, cu_q, cu_k):
        """Causal attention of each request's queries (the last of its keys' positions) over its keys."""
        if self.fa_version is not None:
            dev = q.device
            return flash_attn_varlen_func(q=q, k=K, v=V, max_seqlen_q=max(b - a for a, b in zip(cu_q, cu_q[1:])),
                                          cu_seqlens_q=torch.tensor(cu_q, dtype=torch.int32, device=dev),
                                          max_seqlen_k=max(b - a for a, b in zip(cu_k, cu_k[1:])),
                                          cu_seqlens_k=torch.tensor(cu_k, dtype=torch.int32, device=dev),
                                          softmax_scale=self.scale, causal=True, fa_version=self.fa_version,
                                          num_splits=1)  # no split-KV: a request's output does not depend on its batch
        G = self.num_heads // self.num_kv_heads
        o = torch.empty_like(q)
        for (qa, qb), (ka, kb) in zip(zip(cu_q, cu_q[1:]), zip(cu_k, cu_k[1:])):
            k, v = K[ka:kb], V[ka:kb]
            if G > 1:  # query heads of one KV head side by side (the causal-bias path takes no enable_gqa)
                k, v = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
            # query i (position kb - ka - (qb - qa) + i) sees keys up to its own: causal aligned to the lower right
            o[qa:qb] = F.scaled_dot_product_attention(q[qa:qb].transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
                                                      v.transpose(0, 1).unsqueeze(0), attn_mask=causal_lower_right(qb - qa, kb - ka),
                                                      scale=self.scale)[0].transpose(0, 1)
        return o

    def _body(self, kv_cache, pages, offs):
        """Body rows dequantized from the pool: (K, V) float32 [n][H][D] of the tokens at offsets offs[i] of pages[i]
        (the regions and rows as oscar_kv.paged lays them out; codes unpacked as cov_format.h packs them)."""
        lay = self.layout(kv_cache)
        regions = kv_cache.unflatten(1, (lay.num_kv_heads, lay.region_bytes))  # [pages][H][region bytes]
        starts = lay.offsets()  # K codes, V codes, K params, V params: each [page_tokens][row bytes]
        parts = [regions[..., a:b].unflatten(-1, (lay.page_tokens, -1))
                 for a, b in zip(starts, starts[1:] + (lay.region_bytes,))]
        sh = torch.arange(8 // lay.bits, device=kv_cache.device, dtype=torch.int32) * lay.bits
        rows = []
        for codes, params in ((parts[0], parts[2]), (parts[1], parts[3])):
            c = codes[pages, :, offs].to(torch.int32)  # [n, H, code bytes]
            vals = ((c[..., None] >> sh) & ((1 << lay.bits) - 1)).reshape(c.shape[0], lay.num_kv_heads, lay.head_dim)
            par = params[pages, :, offs].contiguous().view(torch.float16).float()  # [n, H, 2]: scale, zero
            rows.append(vals.float() * par[..., :1] + par[..., 1:])
        return rows

    def _context(self, kv_cache, bt_row, wslot, ctx, L):
        """Positions [0, ctx) of one sequence as a decode at length L reads them: rotated bf16 [ctx][H][D] K and V."""
        H, D, S, W = self.num_kv_heads, self.head_size, paged.SINK, paged.RECENT
        dev = kv_cache.device
        K = torch.empty(ctx, H, D, dtype=torch.bfloat16, device=dev)
        V = torch.empty_like(K)
        ns = min(ctx, S)
        K[:ns] = self.k_sink[wslot, :, :ns].transpose(0, 1)
        V[:ns] = self.v_sink[wslot, :, :ns].transpose(0, 1)
        body_end = min(ctx, max(S, L - W))
        if body_end > S:
            P = self.layout(kv_cache).page_tokens
            pos = torch.arange(S, body_end, device=dev)
            kb, vb = self._body(kv_cache, bt_row[pos // P].long(), pos % P)
            K[S:body_end], V[S:body_end] = kb.to(torch.bfloat16), vb.to(torch.bfloat16)
        start = max(S, body_end)
        if ctx > start:
            ring = (torch.arange(start, ctx, device=dev) - S) % W
            K[start:ctx] = self.k_recent[wslot][:, ring].transpose(0, 1)
            V[start:ctx] = self.v_recent[wslot][:, ring].transpose(0, 1)
        return K, V
