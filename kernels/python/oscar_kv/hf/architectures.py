"""architectures.py: the transformers architectures oscar-kv reads, in one table (ARCHITECTURES), and what each needs:
the model_type values of the family, the configuration list that says which layers skip RoPE (NoPE layers), whether
its layers add learned sink logits, and the settings of its tiny random model (what experiments/hf_dump.py --random
and the tests run). The transformers integration (layer_plan, the capture), experiments/hf_dump.py,
experiments/hf_eval.py and the tests take the list from here; anything else is refused before a weight is read.

The tiny models are chosen so that every feature the dump records bites: sliding windows shorter than the tests'
passages, strong soft-capping, sinks, partial RoPE, NoPE layers, granite's attention_multiplier, gemma3's two RoPE
bases, gpt_oss's yarn RoPE (attention factor != 1).
"""
from dataclasses import dataclass
from typing import Callable, Optional

WINDOW = 24  # the tiny models' sliding window (shorter than the tests' passages)


@dataclass(frozen=True)
class Architecture:
    name: str                          # the family (experiments/hf_dump.py --random NAME)
    config: str                        # the transformers configuration class of its tiny model
    tiny: Callable                     # (head_dim, sliding_window) -> the tiny model's own settings
    model_types: tuple = ()            # transformers model_type values of the family (default: name)
    nope_layers: Optional[str] = None  # configuration list: per layer, whether it applies RoPE (else module.use_rope)
    learned_sinks: bool = False        # per-head sink logits join each softmax (random models draw them of order 1)

    @property
    def types(self):
        return self.model_types or (self.name,)


def _rope(theta, **kw):
    return dict(rope_theta=theta, **kw)


ARCHITECTURES = (
    Architecture("llama", "LlamaConfig", lambda hd, sw: _rope(10000.0, head_dim=hd)),
    Architecture("qwen2", "Qwen2Config", lambda hd, sw: _rope(1000000.0, use_sliding_window=False)),
    Architecture("qwen3", "Qwen3Config", lambda hd, sw: _rope(1000000.0, head_dim=hd)),
    Architecture("mistral", "MistralConfig", lambda hd, sw: _rope(10000.0, head_dim=hd, sliding_window=sw)),
    Architecture("gemma2", "Gemma2Config", lambda hd, sw: dict(
        head_dim=hd, query_pre_attn_scalar=24, sliding_window=WINDOW, attn_logit_softcapping=3.0,
        final_logit_softcapping=30.0, layer_types=["sliding_attention", "full_attention"] * 2)),
    Architecture("gemma3", "Gemma3TextConfig", lambda hd, sw: dict(
        head_dim=hd, query_pre_attn_scalar=24, sliding_window=WINDOW,
        layer_types=["sliding_attention"] * 3 + ["full_attention"],
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
        model_types=("gemma3", "gemma3_text")),
    Architecture("phi3", "Phi3Config", lambda hd, sw: dict(
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        sliding_window=None)),
    Architecture("olmo2", "Olmo2Config", lambda hd, sw: _rope(500000.0)),
    Architecture("granite", "GraniteConfig", lambda hd, sw: _rope(
        10000.0, attention_multiplier=0.09, embedding_multiplier=4.0, residual_multiplier=0.5, logits_scaling=2.0)),
    Architecture("smollm3", "SmolLM3Config", lambda hd, sw: _rope(10000.0, no_rope_layer_interval=2,
                                                                   use_sliding_window=False),
                 nope_layers="no_rope_layers"),
    Architecture("gpt_oss", "GptOssConfig", lambda hd, sw: dict(
        head_dim=hd, num_local_experts=4, num_experts_per_tok=2, sliding_window=WINDOW, intermediate_size=128,
        layer_types=["sliding_attention", "full_attention"] * 2), learned_sinks=True),
)
NAMES = tuple(a.name for a in ARCHITECTURES)
MODEL_TYPES = tuple(t for a in ARCHITECTURES for t in a.types)


def unsupported(where, model_type):
    """The one-line refusal of an architecture outside the table."""
    return f"{where}: architecture '{model_type}' is not supported; supported: {', '.join(NAMES)}"


def by_model_type(model_type):
    """The Architecture of a transformers model_type, or None."""
    return next((a for a in ARCHITECTURES if model_type in a.types), None)


def by_name(name):
    """The Architecture called `name`; ValueError naming the supported ones otherwise."""
    for a in ARCHITECTURES:
        if a.name == name:
            return a
    raise ValueError(f"{name}: unknown architecture; give one of {', '.join(NAMES)}")


def of_model(model):
    """(Architecture, text configuration) of a loaded model (or a configuration); ValueError outside the table."""
    cfg = getattr(model, "config", model).get_text_config(decoder=True)
    mt = getattr(cfg, "model_type", "?")
    arch = by_model_type(mt)
    if arch is None:
        raise ValueError(unsupported(getattr(cfg, "_name_or_path", "") or mt, mt))
    return arch, cfg


def tiny_config(name, head_dim=32, sliding_window=WINDOW):
    """The tiny configuration of architecture `name`: 4 layers, 4 query and 2 KV heads, hidden 4 * head_dim.
    head_dim: 32 for the dumps; 64 gives shapes the kernels take. sliding_window: mistral's (None: full attention on
    every layer, as recent Mistral checkpoints)."""
    import transformers
    arch = by_name(name)
    common = dict(vocab_size=512, hidden_size=4 * head_dim, intermediate_size=256, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32768,
                  initializer_range=0.1, bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
    common.update(arch.tiny(head_dim, sliding_window))
    return getattr(transformers, arch.config)(**common)


def random_model(name, device="cpu", dtype=None, config=None):
    """A seeded random model of architecture `name` (tiny_config's, or `config`), in float32 unless `dtype`."""
    import torch
    from transformers import AutoModelForCausalLM
    arch = by_name(name)
    cfg = config if config is not None else tiny_config(name)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype if dtype is not None else torch.float32)
    if arch.learned_sinks:  # sinks of order 1, so that the extra softmax term matters
        with torch.no_grad():
            g = torch.Generator(device="cpu").manual_seed(1)
            for layer in model.model.layers:
                layer.self_attn.sinks.copy_(torch.randn(layer.self_attn.sinks.shape, generator=g))
    return model
