// architecture.h: the table of architecture facts. For each decoder architecture the forward pass runs: what it
// does that the others do not, what a GGUF file of it does not store, and which block unit runs it (llama.cpp's
// per-architecture builders). The file's metadata gives the shapes; this table gives the rest, and the block-unit table
// gives each unit's GGUF tensor names. Adding an architecture is one row here and, where its block differs from every
// unit, one unit (a row of the unit table and lib/src/02_model/forward/block_*.cpp, chosen in blocks.cpp).
#pragma once
#include <string>
#include <string_view>

namespace oscar {

enum class BlockUnit { llama, gemma3 };         // block_llama.cpp, block_gemma3.cpp
enum class FeedForward { swiglu, geglu_tanh };  // silu(gate) * up, gelu_tanh(gate) * up

// The GGUF tensor names of one block (after "blk.N."), as llama.cpp writes them; an empty name: the unit has no such
// tensor. The biases and q/k norms are read where the architecture has them (qkv_bias, qk_norm).
struct BlockTensorNames {
  std::string_view attn_norm = "attn_norm.weight", q = "attn_q.weight", k = "attn_k.weight", v = "attn_v.weight",
                   o = "attn_output.weight";
  std::string_view q_bias = "attn_q.bias", k_bias = "attn_k.bias", v_bias = "attn_v.bias";
  std::string_view q_norm = "attn_q_norm.weight", k_norm = "attn_k_norm.weight";
  std::string_view ffn_norm = "ffn_norm.weight", gate = "ffn_gate.weight", down = "ffn_down.weight", up = "ffn_up.weight";
  std::string_view post_attn_norm, post_ffn_norm;  // sandwich norms around attention and the feed-forward
};
// The tensors outside the blocks.
struct ModelTensorNames {
  std::string_view token_embd = "token_embd.weight", output = "output.weight", output_norm = "output_norm.weight",
                   rope_freqs = "rope_freqs.weight";
};
inline constexpr ModelTensorNames kModelTensors{};

// One block unit: its name (messages), its tensors, and whether it has the sandwich norms.
struct BlockUnitFacts {
  BlockUnit unit;
  std::string_view name;
  BlockTensorNames tensors;
  bool post_norms() const { return !tensors.post_attn_norm.empty(); }
};
// The unit's row; throws Error for a unit the table does not hold.
const BlockUnitFacts& block_unit_facts(BlockUnit unit);
// "blk.L.NAME".
std::string block_tensor(int layer, std::string_view name);

struct ArchitectureFacts {
  std::string_view name;             // general.architecture
  std::string_view rope_convention;  // "adjacent-pairs" (llama.cpp's normal RoPE) or "half-split" (neox)
  BlockUnit unit = BlockUnit::llama;
  FeedForward ffn = FeedForward::swiglu;
  bool qkv_bias = false;          // q/k/v projections may carry biases (blk.N.attn_q.bias ...)
  bool qk_norm = false;           // per-head RMSNorm of q and k before RoPE: required (attn_q_norm, attn_k_norm)
  bool scale_embeddings = false;  // token embeddings times sqrt(embedding length)
  int local_period = 0;           // > 0: layer l uses the file's sliding window unless l % period == period - 1
  double local_rope_theta = 0;    // RoPE base of the local layers (0: the file's)
  // The attention logit factor, when not 1/sqrt(head_dim) (null): from the shapes.
  double (*attention_scale)(int dim, int n_heads, int head_dim, int n_layers) = nullptr;
  const BlockUnitFacts& block() const { return block_unit_facts(unit); }
};

// The row of `architecture`; throws Error naming it and the supported architectures.
const ArchitectureFacts& architecture_facts(std::string_view architecture);
// "llama, qwen2, qwen3, gemma3"
std::string supported_architectures();

}  // namespace oscar
