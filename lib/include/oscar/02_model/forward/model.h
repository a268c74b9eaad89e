// model.h: a float32 decoder-only transformer forward pass on the CPU: llama2.c's Llama and the GGUF architectures
// of the architecture table (architecture.h: llama, qwen2 with q/k/v biases, qwen3 with per-head q/k RMSNorm, gemma3
// with sandwich norms, GeGLU and sliding-window layers). Model::forward embeds the tokens, runs each layer through
// its architecture's block unit (lib/src/02_model/forward/block_*.cpp) and the classifier. Activations are float32;
// weights are WeightMatrix views (float32, or a GGUF tensor in its stored type, dequantized block by block).
// Tokens are processed in chunks appended to a KvCache; attention reads the cache through
// KvCache::attention_view(), the seam where a quantized cache policy substitutes what the model attends to,
// unless the cache computes attention itself (KvCache::attend(), e.g. GpuKvCache through the CUDA decode kernels).
#pragma once
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "oscar/02_model/architecture.h"
#include "oscar/02_model/formats/checkpoint.h"
#include "oscar/02_model/formats/weights.h"

namespace oscar {

// Per-layer activations of the tokens of one forward chunk: rows are tokens, columns head-major
// (head h occupies columns [h*head_dim, (h+1)*head_dim)).
struct LayerQKV {
  int layer;
  int first_position;  // position of row 0
  // What RoPE receives: the projections (plus the biases of qwen2); for qwen3 and gemma3 after the per-head q/k
  // RMSNorm. With adjacent-pairs RoPE on a GGUF llama, channels are in the file's (permuted) order.
  const MatrixRM& q_pre;  // [n, n_heads*head_dim] before RoPE
  const MatrixRM& k_pre;  // [n, kv_dim] before RoPE
  const MatrixRM& q;      // after RoPE
  const MatrixRM& k;      // after RoPE
  const MatrixRM& v;
};
using LayerCallback = std::function<void(const LayerQKV&)>;

// What the queries of a chunk read in one layer. Rows of k and v are positions [first, first + k.rows()). The
// query at position p reads positions [max(first, p - window + 1), p] (window 0: from `first`). When the cache
// holds a low-bit body, k_body / v_body hold the body's form of the same rows, and query row t of the chunk reads
// positions [key_body[t].first, key_body[t].second) of the keys (value_body[t] of the values) from them instead:
// what a token-by-token decode would have shown that query.
struct AttentionView {
  const MatrixRM* k = nullptr;
  const MatrixRM* v = nullptr;
  const MatrixRM* k_body = nullptr;  // null: no body, every row from k and v
  const MatrixRM* v_body = nullptr;
  int first = 0;
  int window = 0;
  std::vector<std::pair<int, int>> key_body, value_body;  // per query row (positions), when k_body is set
};

// Full-precision keys (after RoPE) and values of the processed positions, per layer; a layer with a sliding window
// keeps only the positions a later query can still see.
class KvCache {
 public:
  explicit KvCache(const ModelConfig& c);
  virtual ~KvCache() = default;
  int length() const { return length_; }
  // Appends the chunk's keys and values of `layer` (rows = positions length() ..); a local layer first drops the
  // rows that no query of this chunk or a later one can see.
  virtual void append(int layer, const MatrixRM& k, const MatrixRM& v);
  // What the chunk's `n` queries (positions length() .. length()+n-1) read in `layer`, called after append(). The
  // default is the full-precision cache; quantizing policies override it.
  virtual void attention_view(int layer, int n, AttentionView& view);
  // Attention computed by the cache itself, called after append() with the chunk's queries q
  // [n, n_heads*head_dim] (after RoPE; row t at position length()+t, attending causally to positions
  // 0..length()+t within the layer's window, logits scaled by the config's scale()): fills out
  // [n, n_heads*head_dim] (head-major) and returns true, or returns false (the default) and the model attends
  // over attention_view().
  virtual bool attend(int /*layer*/, const MatrixRM& /*q*/, MatrixRM& /*out*/) { return false; }
  // Whether a chunk of several tokens gives each query what decoding one token at a time would (true for caches
  // whose views carry per-query body ranges); false: callers that need a server's view feed one token at a time.
  virtual bool serves_chunks() const { return true; }
  // While on, the queries of a chunk of several tokens read every held row in its window form (a quantizing cache
  // still quantizes the rows on write): a server's prefill, whose attention runs over the prompt's own keys and
  // values before they are stored in low bits. Off (the default): each query reads the cache of its own time.
  void read_chunks_in_full_precision(bool on) { chunks_full_precision_ = on; }
  void advance(int n) { length_ += n; }
  // The rows held for `layer`: positions [first_position(layer), length()).
  const MatrixRM& keys(int layer) const { return k_[layer]; }
  const MatrixRM& values(int layer) const { return v_[layer]; }
  int first_position(int layer) const { return first_[layer]; }
  int held_rows(int layer) const { return rows_[layer]; }
  int window(int layer) const { return windows_[layer]; }

 protected:
  int kv_dim_, length_ = 0;
  std::vector<MatrixRM> k_, v_;
  std::vector<int> rows_;     // filled rows per layer (capacity grows geometrically)
  std::vector<int> first_;    // per layer: the position of row 0 (0 unless a sliding window dropped rows)
  std::vector<int> windows_;  // per layer: the sliding window, 0 for global layers
  std::vector<MatrixRM> k_view_, v_view_;
  bool chunks_full_precision_ = false;
  // Drops rows [0, n) of `layer` (positions first_ .. first_+n-1).
  void drop_rows(int layer, int n);
};

// One transformer block's weights (views). Biases and the q/k norms are null when the architecture has
// none.
struct ModelLayer {
  const float* rms_att = nullptr;  // [dim]
  WeightMatrix wq, wk, wv;         // [q_dim, dim], [kv_dim, dim], [kv_dim, dim]
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;  // [q_dim], [kv_dim], [kv_dim] (qwen2)
  const float *q_norm = nullptr, *k_norm = nullptr;          // [head_dim] each (qwen3, gemma3)
  WeightMatrix wo;                 // [dim, q_dim]
  const float* post_att_norm = nullptr;  // [dim]: RMSNorm of the attention output (gemma3)
  const float* rms_ffn = nullptr;  // [dim]
  WeightMatrix w1, w2, w3;         // gate [hidden, dim], down [dim, hidden], up [hidden, dim]
  const float* post_ffn_norm = nullptr;  // [dim]: RMSNorm of the feed-forward output (gemma3)
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
  const ArchitectureFacts& facts() const { return *facts_; }
  // RoPE frequency per rotated pair of a head in layer l (local layers may have another base).
  const std::vector<float>& inv_freq(int l) const { return config_.window(l) > 0 ? inv_freq_local_ : inv_freq_; }

  // Runs `tokens` at positions cache.length().. and appends them to the cache. Returns the logits
  // [tokens.size(), vocab], or with `last_only` those of the last token alone [1, vocab] (a prompt's prefill).
  // `on_layer`, when set, sees each layer's q/k/v of this chunk.
  MatrixRM forward(std::span<const int> tokens, KvCache& cache, const LayerCallback& on_layer = {},
                   bool last_only = false) const;

 private:
  void init_rope();
  const Checkpoint* ck_ = nullptr;
  ModelConfig config_;
  ModelWeights w_;
  const ArchitectureFacts* facts_ = nullptr;
  std::vector<float> inv_freq_, inv_freq_local_;  // RoPE frequency per rotated pair within a head
};

// Mean next-token cross-entropy (nats) of logits row t predicting tokens[t+1], t in [0, T-1).
double mean_next_token_loss(const MatrixRM& logits, std::span<const int> tokens);
// Per-position losses of the same predictions.
std::vector<double> next_token_losses(const MatrixRM& logits, std::span<const int> tokens);

// Greedy continuation of `prompt` by `n_new` tokens (argmax, lowest id on ties).
std::vector<int> generate_greedy(const Model& model, std::span<const int> prompt, int n_new);

}  // namespace oscar
