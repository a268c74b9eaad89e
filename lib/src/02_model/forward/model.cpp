// model.cpp: the KvCache, the model's checks and the forward pass: one chunk of n tokens at positions p..p+n-1 per
// call, embedded, run through each layer by the architecture's block unit (blocks.h), normalised and classified.
// Matrix products go through linear() (weights.h: Eigen over row blocks in parallel); attention through ops.h.
#include "oscar/02_model/forward/model.h"

#include "blocks.h"

#include <algorithm>
#include <cmath>

#include "oscar/01_core/error.h"

namespace oscar {

KvCache::KvCache(const ModelConfig& c)
    : kv_dim_(c.kv_dim()), k_(c.n_layers), v_(c.n_layers), rows_(c.n_layers, 0), first_(c.n_layers, 0),
      windows_(c.n_layers, 0), k_view_(c.n_layers), v_view_(c.n_layers) {
  for (int l = 0; l < c.n_layers; ++l) windows_[l] = c.window(l);
}

void KvCache::drop_rows(int layer, int n) {
  if (n <= 0) return;
  const int keep = rows_[layer] - n;
  for (MatrixRM* m : {&k_[layer], &v_[layer]}) m->topRows(keep) = m->middleRows(n, keep).eval();
  rows_[layer] = keep;
  first_[layer] += n;
}

void KvCache::append(int layer, const MatrixRM& k, const MatrixRM& v) {
  // A local layer keeps the positions the chunk's first query can see onward; rows are dropped a window's worth at
  // a time, so that one-token steps do not shift the cache every time.
  if (const int w = windows_[layer]; w > 0) {
    const int dead = (length_ - w + 1) - first_[layer];  // positions below length_ - w + 1 are out of every window
    if (dead >= w) drop_rows(layer, dead);
  }
  MatrixRM& K = k_[layer];
  MatrixRM& V = v_[layer];
  const int need = rows_[layer] + static_cast<int>(k.rows());
  if (need > K.rows()) {
    const int cap = std::max<int>(need, static_cast<int>(K.rows()) * 2);
    MatrixRM K2(cap, kv_dim_), V2(cap, kv_dim_);
    K2.topRows(rows_[layer]) = K.topRows(rows_[layer]);
    V2.topRows(rows_[layer]) = V.topRows(rows_[layer]);
    K.swap(K2);
    V.swap(V2);
  }
  K.middleRows(rows_[layer], k.rows()) = k;
  V.middleRows(rows_[layer], v.rows()) = v;
  rows_[layer] = need;
}

void KvCache::attention_view(int layer, int /*n*/, AttentionView& view) {
  view.k = &k_[layer];  // rows past rows_ are capacity that no query reads
  view.v = &v_[layer];
  view.first = first_[layer];
  view.window = windows_[layer];
}

namespace {

ModelWeights checkpoint_weights(const Checkpoint& ck) {
  const ModelConfig& c = ck.config;
  ModelWeights w;
  w.token_embedding = WeightMatrix::f32(ck.token_embedding, c.vocab_size, c.dim);
  w.rms_final = ck.rms_final;
  w.classifier = WeightMatrix::f32(ck.classifier, c.vocab_size, c.dim);
  for (const LayerWeights& L : ck.layers) {
    ModelLayer m;
    m.rms_att = L.rms_att;
    m.wq = WeightMatrix::f32(L.wq, c.q_dim(), c.dim);
    m.wk = WeightMatrix::f32(L.wk, c.kv_dim(), c.dim);
    m.wv = WeightMatrix::f32(L.wv, c.kv_dim(), c.dim);
    m.wo = WeightMatrix::f32(L.wo, c.dim, c.q_dim());
    m.rms_ffn = L.rms_ffn;
    m.w1 = WeightMatrix::f32(L.w1, c.hidden_dim, c.dim);
    m.w2 = WeightMatrix::f32(L.w2, c.dim, c.hidden_dim);
    m.w3 = WeightMatrix::f32(L.w3, c.hidden_dim, c.dim);
    w.layers.push_back(m);
  }
  return w;
}

void check_matrix(const WeightMatrix& m, int64_t rows, int64_t cols, int layer, const char* what) {
  if (m.rows() == rows && m.cols() == cols) return;
  const std::string where = layer < 0 ? std::string(what) : fmt::format("layer {} {}", layer, what);
  fail("{}{}: a {}x{} matrix (rows x cols), the model's config needs {}x{}; the weights do not belong to this config",
       where, m.tensor() ? fmt::format(" (tensor '{}')", m.tensor()->name) : std::string(), m.rows(), m.cols(), rows, cols);
}

void check_vector(const float* v, int layer, const char* what) {
  if (!v) fail("layer {}: {} is missing", layer, what);
}

}  // namespace

Model::Model(const Checkpoint& ck)
    : ck_(&ck), config_(ck.config), w_(checkpoint_weights(ck)), facts_(&architecture_facts(config_.architecture)) {
  init_rope();
}

Model::Model(const ModelConfig& config, ModelWeights weights)
    : config_(config), w_(std::move(weights)), facts_(&architecture_facts(config_.architecture)) {
  const ModelConfig& c = config_;
  if (c.dim <= 0 || c.hidden_dim <= 0 || c.n_layers <= 0 || c.vocab_size <= 0 || c.seq_len <= 0)
    fail("model config: dim {}, hidden_dim {}, n_layers {}, vocab_size {}, seq_len {} must all be positive", c.dim,
         c.hidden_dim, c.n_layers, c.vocab_size, c.seq_len);
  if (c.n_heads <= 0 || c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0 || c.head_dim() <= 0)
    fail("model config: {} query heads over {} KV heads of head_dim {}: the KV heads must divide the query heads",
         c.n_heads, c.n_kv_heads, c.head_dim());
  if (c.rope_convention != "adjacent-pairs" && c.rope_convention != "half-split")
    fail("model config: RoPE convention '{}' is unknown (adjacent-pairs or half-split)", c.rope_convention);
  if (c.rotary_dims() % 2 != 0 || c.rotary_dims() > c.head_dim())
    fail("model config: RoPE over {} dims of heads of {}: must be even and at most head_dim", c.rotary_dims(), c.head_dim());
  if (!(c.rms_eps > 0) || !(c.rope_theta > 0)) fail("model config: rms_eps {} and rope_theta {} must be positive", c.rms_eps, c.rope_theta);
  if (!c.layer_windows.empty() && static_cast<int>(c.layer_windows.size()) != c.n_layers)
    fail("model config: {} sliding windows for {} layers", c.layer_windows.size(), c.n_layers);
  for (int w : c.layer_windows)
    if (w < 0) fail("model config: a sliding window of {} tokens", w);
  if (!(c.attention_scale >= 0) || !std::isfinite(c.attention_scale) || !(c.rope_theta_local >= 0))
    fail("model config: attention scale {} and local RoPE base {} must be finite and not negative", c.attention_scale,
         c.rope_theta_local);
  if (static_cast<int>(w_.layers.size()) != c.n_layers)
    fail("model weights: {} layers, the config has {}", w_.layers.size(), c.n_layers);
  check_matrix(w_.token_embedding, c.vocab_size, c.dim, -1, "token embedding");
  check_matrix(w_.classifier, c.vocab_size, c.dim, -1, "classifier");
  if (!w_.rms_final) fail("model weights: the final RMSNorm weight is missing");
  for (int l = 0; l < c.n_layers; ++l) {
    const ModelLayer& L = w_.layers[l];
    check_matrix(L.wq, c.q_dim(), c.dim, l, "attention q");
    check_matrix(L.wk, c.kv_dim(), c.dim, l, "attention k");
    check_matrix(L.wv, c.kv_dim(), c.dim, l, "attention v");
    check_matrix(L.wo, c.dim, c.q_dim(), l, "attention output");
    check_matrix(L.w1, c.hidden_dim, c.dim, l, "ffn gate");
    check_matrix(L.w2, c.dim, c.hidden_dim, l, "ffn down");
    check_matrix(L.w3, c.hidden_dim, c.dim, l, "ffn up");
    check_vector(L.rms_att, l, "the attention RMSNorm weight");
    check_vector(L.rms_ffn, l, "the ffn RMSNorm weight");
    if (c.qkv_bias) {
      check_vector(L.bq, l, "the q bias");
      check_vector(L.bk, l, "the k bias");
      check_vector(L.bv, l, "the v bias");
    }
    if (c.qk_norm) {
      check_vector(L.q_norm, l, "the q norm weight");
      check_vector(L.k_norm, l, "the k norm weight");
    }
    if (facts_->block().post_norms()) {
      check_vector(L.post_att_norm, l, "the post-attention RMSNorm weight");
      check_vector(L.post_ffn_norm, l, "the post-feed-forward RMSNorm weight");
    }
  }
  init_rope();
}

void Model::init_rope() {
  // 1 / theta^(2i / rope_dims) in float, as llama2.c's run.c (and Hugging Face's inv_freq) computes it.
  const int rd = config_.rotary_dims();
  auto table = [&](double base) {
    const float theta = static_cast<float>(base);
    std::vector<float> f;
    for (int i = 0; i < rd; i += 2) {
      float x = 1.0f / std::pow(theta, static_cast<float>(i) / static_cast<float>(rd));
      if (w_.rope_freq_factors) x /= w_.rope_freq_factors[i / 2];
      f.push_back(x);
    }
    return f;
  };
  inv_freq_ = table(config_.rope_theta);
  inv_freq_local_ = table(config_.rope_theta_local > 0 ? config_.rope_theta_local : config_.rope_theta);
}

const Checkpoint& Model::checkpoint() const {
  if (!ck_) fail("internal: this {} model was not built from a llama2.c checkpoint", config_.architecture);
  return *ck_;
}

MatrixRM Model::forward(std::span<const int> tokens, KvCache& cache, const LayerCallback& on_layer, bool last_only) const {
  const ModelConfig& c = config_;
  const int n = static_cast<int>(tokens.size()), p0 = cache.length();
  if (n == 0) return MatrixRM(0, c.vocab_size);
  if (p0 + n > c.seq_len)
    fail("{} tokens at position {} exceed the model's context of {} tokens (seq_len); use --tokens {} or fewer",
         n, p0, c.seq_len, c.seq_len);
  MatrixRM x(n, c.dim);
  for (int t = 0; t < n; ++t) {
    if (tokens[t] < 0 || tokens[t] >= c.vocab_size) fail("token id {} at position {} is outside the vocabulary ({})", tokens[t], p0 + t, c.vocab_size);
    w_.token_embedding.rows_to_f32(tokens[t], 1, x.row(t).data());
  }
  if (facts_->scale_embeddings) x *= std::sqrt(static_cast<float>(c.dim));
  const forward::RopeTable rope(n, p0, inv_freq_), rope_local(n, p0, inv_freq_local_);
  const forward::BlockFunction block = forward::block_function(facts_->unit);
  forward::BlockScratch scratch;
  for (int l = 0; l < c.n_layers; ++l)
    block(forward::BlockContext{*this, l, p0, cache, on_layer, c.window(l) > 0 ? rope_local : rope, scratch}, x);
  cache.advance(n);
  MatrixRM xb, logits;
  if (last_only) {
    const MatrixRM last = x.bottomRows(1);
    forward::rmsnorm_rows(last, w_.rms_final, static_cast<float>(c.rms_eps), xb);
  } else {
    forward::rmsnorm_rows(x, w_.rms_final, static_cast<float>(c.rms_eps), xb);
  }
  linear(xb, w_.classifier, logits);
  return logits;
}

std::vector<double> next_token_losses(const MatrixRM& logits, std::span<const int> tokens) {
  std::vector<double> out;
  for (size_t t = 0; t + 1 < tokens.size(); ++t) {
    const auto row = logits.row(static_cast<Eigen::Index>(t));
    const double m = row.maxCoeff();
    double s = 0;
    for (Eigen::Index j = 0; j < row.size(); ++j) s += std::exp(static_cast<double>(row(j)) - m);
    out.push_back(m + std::log(s) - row(tokens[t + 1]));
  }
  return out;
}

double mean_next_token_loss(const MatrixRM& logits, std::span<const int> tokens) {
  const auto l = next_token_losses(logits, tokens);
  if (l.empty()) fail("a loss needs at least two tokens");
  double s = 0;
  for (double x : l) s += x;
  return s / static_cast<double>(l.size());
}

std::vector<int> generate_greedy(const Model& model, std::span<const int> prompt, int n_new) {
  KvCache cache(model.config());
  std::vector<int> out;
  MatrixRM logits = model.forward(prompt, cache);
  for (int i = 0; i < n_new && cache.length() < model.config().seq_len; ++i) {
    Eigen::Index best;
    logits.row(logits.rows() - 1).maxCoeff(&best);
    out.push_back(static_cast<int>(best));
    const int tok = static_cast<int>(best);
    logits = model.forward(std::span<const int>(&tok, 1), cache);
  }
  return out;
}

}  // namespace oscar
