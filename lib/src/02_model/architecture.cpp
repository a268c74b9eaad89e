// architecture.cpp: the rows of the architecture table, as llama.cpp and Hugging Face transformers run each
// architecture.
#include "oscar/02_model/architecture.h"

#include <array>
#include <cmath>

#include "oscar/01_core/error.h"

namespace oscar {

namespace {

// Gemma 3: query_pre_attn_scalar is 256 = head_dim for 270M to 12B; the 27B model (62 layers) scales by its
// embedding per head (5376 / 32 = 168). Neither is in the GGUF; llama.cpp decides the same way.
double gemma3_scale(int dim, int n_heads, int head_dim, int n_layers) {
  const double s = n_layers == 62 ? static_cast<double>(dim / n_heads) : static_cast<double>(head_dim);
  return 1.0 / std::sqrt(s);
}

constexpr std::array kArchitectures{
    // llama (Llama 2/3, SmolLM2, Mistral; llama2.c checkpoints): GGUF stores Q/K permuted for adjacent pairs.
    ArchitectureFacts{.name = "llama", .rope_convention = "adjacent-pairs"},
    ArchitectureFacts{.name = "qwen2", .rope_convention = "half-split", .qkv_bias = true},
    ArchitectureFacts{.name = "qwen3", .rope_convention = "half-split", .qk_norm = true},
    // Gemma 3: sandwich norms, GeGLU, sqrt(d)-scaled embeddings, 5 local layers (sliding window, RoPE base 10000)
    // to every global one (the file's RoPE base). The stored norm weights already include Gemma's +1.
    ArchitectureFacts{.name = "gemma3", .rope_convention = "half-split", .unit = BlockUnit::gemma3,
                      .ffn = FeedForward::geglu_tanh, .qk_norm = true, .scale_embeddings = true,
                      .local_period = 6, .local_rope_theta = 10000.0, .attention_scale = gemma3_scale},
};

// The block units: pre-norm (llama) and sandwich norms (Gemma 3: post_attention_norm, post_ffw_norm in llama.cpp).
constexpr std::array kBlockUnits{
    BlockUnitFacts{BlockUnit::llama, "llama", {}},
    BlockUnitFacts{BlockUnit::gemma3, "gemma3", {.post_attn_norm = "post_attention_norm.weight", .post_ffn_norm = "post_ffw_norm.weight"}},
};

}  // namespace

const BlockUnitFacts& block_unit_facts(BlockUnit unit) {
  for (const BlockUnitFacts& u : kBlockUnits)
    if (u.unit == unit) return u;
  fail("internal: block unit {} is not in the unit table (architecture.cpp)", static_cast<int>(unit));
}

std::string block_tensor(int layer, std::string_view name) { return fmt::format("blk.{}.{}", layer, name); }

std::string supported_architectures() {
  std::string s;
  for (const ArchitectureFacts& a : kArchitectures) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

const ArchitectureFacts& architecture_facts(std::string_view architecture) {
  for (const ArchitectureFacts& a : kArchitectures)
    if (a.name == architecture) return a;
  fail("architecture '{}' is not supported (supported: {})", architecture, supported_architectures());
}

}  // namespace oscar
