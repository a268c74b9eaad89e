// architecture.h: the table of architecture facts. For each decoder architecture the forward pass runs: what it
// does that the others do not, what a GGUF file of it does not store, and which block unit runs it (llama.cpp's
// per-architecture builders). The file's metadata gives the shapes; this table gives the rest. Adding an
// architecture is one row here and, where its block differs from every unit, one unit
// (lib/src/02_model/forward/block_*.cpp).
#pragma once
#include <string>
#include <string_view>

namespace oscar {

enum class BlockUnit { llama, gemma3 };         // block_llama.cpp, block_gemma3.cpp
enum class FeedForward { swiglu, geglu_tanh };  // silu(gate) * up, gelu_tanh(gate) * up

struct ArchitectureFacts {
  std::string_view name;             // general.architecture
  std::string_view rope_convention;  // "adjacent-pairs" (llama.cpp's normal RoPE) or "half-split" (neox)
  BlockUnit unit = BlockUnit::llama;
  FeedForward ffn = FeedForward::swiglu;
  bool qkv_bias = false;          // q/k/v projections may carry biases (blk.N.attn_q.bias ...)
  bool qk_norm = false;           // per-head RMSNorm of q and k before RoPE: required (attn_q_norm, attn_k_norm)
  bool post_norms = false;        // RMSNorm of the attention and feed-forward outputs before each residual add
  bool scale_embeddings = false;  // token embeddings times sqrt(embedding length)
  int local_period = 0;           // > 0: layer l uses the file's sliding window unless l % period == period - 1
  double local_rope_theta = 0;    // RoPE base of the local layers (0: the file's)
  // The attention logit factor, when not 1/sqrt(head_dim) (null): from the shapes.
  double (*attention_scale)(int dim, int n_heads, int head_dim, int n_layers) = nullptr;
};

// The row of `architecture`; throws Error naming it and the supported architectures.
const ArchitectureFacts& architecture_facts(std::string_view architecture);
// "llama, qwen2, qwen3, gemma3"
std::string supported_architectures();

}  // namespace oscar
