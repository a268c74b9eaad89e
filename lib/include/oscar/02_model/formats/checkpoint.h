// checkpoint.h: llama2.c legacy checkpoints (float32), and oscar-kv's lossless float16 form of them.
// Legacy layout: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a
// negative vocab_size means a separate classifier follows), then float32 weights in run.c's order.
// Float16 form ("OSCKF16"): magic, version, the same header, the sha256 of the original float32 file,
// then the same values as float16; it loads only when the float32 bytes it rebuilds hash to that sha256.
#pragma once
#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace oscar {

// The shape and the architectural choices of a decoder-only transformer. llama2.c checkpoints set only
// the first line; the defaults of the rest are llama2.c's fixed choices (the forward pass then runs the
// same float arithmetic as before these fields existed). GGUF models (gguf_model.h) set them all.
struct ModelConfig {
  int dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0, seq_len = 0;
  bool shared_classifier = true;       // tied output: the classifier is the token embedding
  std::string architecture = "llama";  // "llama" (llama2.c and GGUF llama), "qwen2", "qwen3", "gemma3" (architecture.h)
  int head_dim_explicit = 0;           // per-head width when set (qwen3: not dim / n_heads); 0: dim / n_heads
  double rope_theta = 10000.0;         // RoPE base
  // "adjacent-pairs": rotates channels (2i, 2i+1) of a head (llama2.c, llama.cpp's normal RoPE);
  // "half-split": rotates (i, i + rope_dims/2) (llama.cpp's neox RoPE, Hugging Face rotate_half).
  std::string rope_convention = "adjacent-pairs";
  int rope_dims = 0;                   // leading channels of a head that RoPE rotates; 0: all
  double rms_eps = 1e-5;               // RMSNorm epsilon (added to the mean square, in float)
  bool qk_norm = false;                // per-head RMSNorm of q and k before RoPE (qwen3, gemma3)
  bool qkv_bias = false;               // q/k/v projections carry biases (qwen2)
  // Per layer, the sliding window of local layers (the query at position i sees keys j with i - j < window) and 0
  // for global layers; empty: every layer is global (gemma3: 5 of every 6 layers are local).
  std::vector<int> layer_windows;
  double rope_theta_local = 0;         // RoPE base of local layers (0: rope_theta)
  double attention_scale = 0;          // logit factor (0: 1/sqrt(head_dim))

  int head_dim() const { return head_dim_explicit > 0 ? head_dim_explicit : dim / n_heads; }
  // Layer l's sliding window, 0 when it attends to every earlier position.
  int window(int l) const { return layer_windows.empty() ? 0 : layer_windows[static_cast<size_t>(l)]; }
  double rope_theta_of(int l) const { return window(l) > 0 && rope_theta_local > 0 ? rope_theta_local : rope_theta; }
  double scale() const { return attention_scale > 0 ? attention_scale : 1.0 / std::sqrt(static_cast<double>(head_dim())); }
  // The tokens layer l holds after `tokens` positions: all of them, or its window.
  long held_tokens(int l, long tokens) const { return window(l) > 0 && tokens > window(l) ? window(l) : tokens; }
  int q_dim() const { return n_heads * head_dim(); }
  int kv_dim() const { return n_kv_heads * head_dim(); }
  int rotary_dims() const { return rope_dims > 0 ? rope_dims : head_dim(); }
};

using MatrixRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMapRM = Eigen::Map<const MatrixRM>;

struct LayerWeights {
  const float* rms_att;  // [dim]
  const float* wq;       // [n_heads*head_dim, dim]
  const float* wk;       // [kv_dim, dim]
  const float* wv;       // [kv_dim, dim]
  const float* wo;       // [dim, n_heads*head_dim]
  const float* rms_ffn;  // [dim]
  const float* w1;       // [hidden, dim]
  const float* w2;       // [dim, hidden]
  const float* w3;       // [hidden, dim]
};

struct Checkpoint {
  std::string path;
  std::string name;            // file name without folders and storage suffixes
  std::string sha256;          // of the float32 legacy file (rebuilt when loaded from float16)
  std::string storage;         // "float32" or "float16"
  ModelConfig config;
  std::vector<float> values;   // every float of the file, in file order
  const float* token_embedding = nullptr;  // [vocab, dim]
  std::vector<LayerWeights> layers;
  const float* rms_final = nullptr;        // [dim]
  const float* classifier = nullptr;       // [vocab, dim] (the embedding when shared)
};

// Loads either form (split parts NAME.part00.. accepted, see file_io.h). Throws Error naming the file
// when the header is implausible or the size disagrees with the header.
Checkpoint load_checkpoint(const std::string& path);

// Number of floats a legacy file with this header holds after its 28-byte header.
int64_t legacy_float_count(const ModelConfig& c);

// Serializes `ck` in the float16 form; throws when a value is not exactly representable in float16.
std::vector<uint8_t> encode_float16_checkpoint(const Checkpoint& ck);

}  // namespace oscar
