"""attention.py: the "oscar_kv" attention function of transformers and the cache layer it decodes through
(OscarLayer, one decoder layer's oscar-kv cache inside an OscarCache; see oscar_kv.hf's docstring for the contract)."""
import torch
from transformers import AttentionInterface
from transformers.cache_utils import DynamicLayer
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from .capture import model_attention

ATTN_NAME = "oscar_kv"


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
    """SDPA, or the model's own eager attention where soft-capping or sink logits need it (capture.model_attention)."""
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
    """One decoder layer's oscar-kv cache (the contract: oscar_kv.hf's docstring). update() only records the new K/V
    and tags the returned key tensor; the "oscar_kv" attention function then writes and attends."""
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


