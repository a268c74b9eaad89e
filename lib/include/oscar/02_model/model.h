// model.h: a float32 decoder-only transformer forward pass on the CPU: llama2.c's Llama (RMSNorm, RoPE on
// adjacent pairs, grouped-query attention, SwiGLU, tied or separate classifier) and the GGUF
// architectures of gguf_model.h (llama, qwen2 with q/k/v biases, qwen3 with per-head q/k RMSNorm; RoPE
// on adjacent pairs or half-split, any base, explicit head_dim). Activations are float32; weights are
// WeightMatrix views (float32, or a GGUF tensor in its stored type, dequantized block by block). Tokens
// are processed in chunks appended to a KvCache; attention reads the cache through
// KvCache::attention_view(), the seam where a quantized cache policy substitutes what the model attends
// to, unless the cache computes attention itself (KvCache::attend(), e.g. GpuKvCache through the CUDA
// decode kernels).
#pragma once
#include <functional>
#include <span>
#include <vector>

#include "oscar/02_model/checkpoint.h"
#include "oscar/02_model/weights.h"

namespace oscar {

// Per-layer activations of the tokens of one forward chunk: rows are tokens, columns head-major
// (head h occupies columns [h*head_dim, (h+1)*head_dim)).
struct LayerQKV {
  int layer;
  int first_position;  // position of row 0
  // What RoPE receives: the projections (plus the biases of qwen2); for qwen3 after the per-head q/k
  // RMSNorm. With adjacent-pairs RoPE on a GGUF llama, channels are in the file's (permuted) order.
  const MatrixRM& q_pre;  // [n, n_heads*head_dim] before RoPE
  const MatrixRM& k_pre;  // [n, kv_dim] before RoPE
  const MatrixRM& q;      // after RoPE
  const MatrixRM& k;      // after RoPE
  const MatrixRM& v;
};
using LayerCallback = std::function<void(const LayerQKV&)>;

// Full-precision keys (after RoPE) and values of every processed position, per layer.
class KvCache {
 public:
  KvCache(const ModelConfig& c);
  virtual ~KvCache() = default;
  int length() const { return length_; }
  // Appends the chunk's keys and values of `layer` (rows = new positions).
  virtual void append(int layer, const MatrixRM& k, const MatrixRM& v);
  // What attention sees for `layer`: keys and values of positions [0, length_of_layer). The default is
  // the full-precision cache; quantizing policies override it.
  virtual void attention_view(int layer, const MatrixRM*& k, const MatrixRM*& v);
  // Attention computed by the cache itself, called after append() with the chunk's queries q
  // [n, n_heads*head_dim] (after RoPE; row t at position length()+t, attending causally to positions
  // 0..length()+t): fills out [n, n_heads*head_dim] (head-major, softmax scale 1/sqrt(head_dim)) and
  // returns true, or returns false (the default) and the model attends over attention_view().
  virtual bool attend(int /*layer*/, const MatrixRM& /*q*/, MatrixRM& /*out*/) { return false; }
  void advance(int n) { length_ += n; }
  const MatrixRM& keys(int layer) const { return k_[layer]; }
  const MatrixRM& values(int layer) const { return v_[layer]; }

 protected:
  int kv_dim_, length_ = 0;
  std::vector<MatrixRM> k_, v_;
  std::vector<int> rows_;  // filled rows per layer (capacity grows geometrically)
  std::vector<MatrixRM> k_view_, v_view_;
};

// One transformer block's weights (views). Biases and the q/k norms are null when the architecture has
// none.
struct ModelLayer {
  const float* rms_att = nullptr;  // [dim]
  WeightMatrix wq, wk, wv;         // [q_dim, dim], [kv_dim, dim], [kv_dim, dim]
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;  // [q_dim], [kv_dim], [kv_dim] (qwen2)
  const float *q_norm = nullptr, *k_norm = nullptr;          // [head_dim] each (qwen3)
  WeightMatrix wo;                 // [dim, q_dim]
  const float* rms_ffn = nullptr;  // [dim]
  WeightMatrix w1, w2, w3;         // gate [hidden, dim], down [dim, hidden], up [hidden, dim]
};

struct ModelWeights {
  WeightMatrix token_embedding;  // [vocab, dim]
  std::vector<ModelLayer> layers;
  const float* rms_final = nullptr;  // [dim]
  WeightMatrix classifier;           // [vocab, dim] (the embedding when tied)
  // Per rotated pair i, RoPE's frequency is divided by rope_freq_factors[i] (llama 3.1's rope_freqs
  // tensor); null: no factors.
  const float* rope_freq_factors = nullptr;
};

class Model {
 public:
  // A llama2.c checkpoint; `ck` must outlive the model. Runs the same float arithmetic as the
  // pre-GGUF forward pass (results bit-identical).
  explicit Model(const Checkpoint& ck);
  // Any supported architecture over weight views whose storage the caller keeps alive (GgufModel does).
  // Throws Error when a weight's shape disagrees with the config (naming it) or the config is
  // inconsistent (heads, RoPE convention and dims).
  Model(const ModelConfig& config, ModelWeights weights);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return w_; }
  // The llama2.c checkpoint the model was built from; throws Error for a model built from weights.
  const Checkpoint& checkpoint() const;

  // Runs `tokens` at positions cache.length().. and appends them to the cache. Returns the logits
  // [tokens.size(), vocab]. `on_layer`, when set, sees each layer's q/k/v of this chunk.
  MatrixRM forward(std::span<const int> tokens, KvCache& cache, const LayerCallback& on_layer = {}) const;

 private:
  void init_rope();
  const Checkpoint* ck_ = nullptr;
  ModelConfig config_;
  ModelWeights w_;
  std::vector<float> inv_freq_;  // RoPE frequency per rotated pair within a head
};

// Mean next-token cross-entropy (nats) of logits row t predicting tokens[t+1], t in [0, T-1).
double mean_next_token_loss(const MatrixRM& logits, std::span<const int> tokens);
// Per-position losses of the same predictions.
std::vector<double> next_token_losses(const MatrixRM& logits, std::span<const int> tokens);

// Greedy continuation of `prompt` by `n_new` tokens (argmax, lowest id on ties).
std::vector<int> generate_greedy(const Model& model, std::span<const int> prompt, int n_new);

}  // namespace oscar
