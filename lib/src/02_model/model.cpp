// model.cpp: the forward pass. One chunk of n tokens at positions p..p+n-1 per call; matrix products
// through linear() (weights.h: Eigen over row blocks in parallel), attention per query head in parallel
// (parallel.h's chunk loop),
// or by the cache itself when it implements KvCache::attend().
#include "oscar/02_model/model.h"


#include <algorithm>
#include <cmath>

#include "oscar/01_core/error.h"
#include "oscar/01_core/parallel.h"

namespace oscar {

KvCache::KvCache(const ModelConfig& c)
    : kv_dim_(c.kv_dim()), k_(c.n_layers), v_(c.n_layers), rows_(c.n_layers, 0), k_view_(c.n_layers), v_view_(c.n_layers) {}

void KvCache::append(int layer, const MatrixRM& k, const MatrixRM& v) {
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

void KvCache::attention_view(int layer, const MatrixRM*& k, const MatrixRM*& v) {
  // Exposes exactly the filled rows (a copy only when capacity exceeds the fill).
  const int n = rows_[layer];
  if (k_[layer].rows() == n) {
    k = &k_[layer];
    v = &v_[layer];
    return;
  }
  k_view_[layer] = k_[layer].topRows(n);
  v_view_[layer] = v_[layer].topRows(n);
  k = &k_view_[layer];
  v = &v_view_[layer];
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

Model::Model(const Checkpoint& ck) : ck_(&ck), config_(ck.config), w_(checkpoint_weights(ck)) { init_rope(); }

Model::Model(const ModelConfig& config, ModelWeights weights) : config_(config), w_(std::move(weights)) {
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
  }
  init_rope();
}

void Model::init_rope() {
  // 1 / theta^(2i / rope_dims) in float, as llama2.c's run.c (and Hugging Face's inv_freq) computes it.
  const int rd = config_.rotary_dims();
  const float theta = static_cast<float>(config_.rope_theta);
  inv_freq_.clear();
  for (int i = 0; i < rd; i += 2) {
    float f = 1.0f / std::pow(theta, static_cast<float>(i) / static_cast<float>(rd));
    if (w_.rope_freq_factors) f /= w_.rope_freq_factors[i / 2];
    inv_freq_.push_back(f);
  }
}

const Checkpoint& Model::checkpoint() const {
  if (!ck_) fail("internal: this {} model was not built from a llama2.c checkpoint", config_.architecture);
  return *ck_;
}

namespace {

void rmsnorm_rows(const MatrixRM& x, const float* w, float eps, MatrixRM& out) {
  out.resize(x.rows(), x.cols());
  const Eigen::Map<const Eigen::RowVectorXf> wv(w, x.cols());
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    float ss = x.row(t).squaredNorm() / static_cast<float>(x.cols()) + eps;
    out.row(t) = x.row(t).cwiseProduct(wv) * (1.0f / std::sqrt(ss));
  }
}

// In place: RMSNorm of every head (head_dim columns) of every row with the weight w [head_dim] (qwen3).
void rmsnorm_heads(MatrixRM& x, int head_dim, const float* w, float eps) {
  const Eigen::Map<const Eigen::RowVectorXf> wv(w, head_dim);
  for (Eigen::Index t = 0; t < x.rows(); ++t)
    for (Eigen::Index h = 0; h < x.cols() / head_dim; ++h) {
      auto seg = x.row(t).segment(h * head_dim, head_dim);
      const float ss = seg.squaredNorm() / static_cast<float>(head_dim) + eps;
      seg = seg.cwiseProduct(wv) * (1.0f / std::sqrt(ss));
    }
}

// cos and sin of angle pos * inv_freq[i] for the chunk's positions: [n, rotary_dims/2] each.
struct RopeTable {
  MatrixRM cos, sin;
  RopeTable(int n, int first_pos, const std::vector<float>& inv_freq) : cos(n, inv_freq.size()), sin(n, inv_freq.size()) {
    for (int t = 0; t < n; ++t) {
      const float pos = static_cast<float>(first_pos + t);
      for (size_t i = 0; i < inv_freq.size(); ++i) {
        const float val = pos * inv_freq[i];
        cos(t, static_cast<Eigen::Index>(i)) = std::cos(val);
        sin(t, static_cast<Eigen::Index>(i)) = std::sin(val);
      }
    }
  }
};

// Rotates the pairs of every head: adjacent (2i, 2i+1) or half-split (i, i + rotary_dims/2), i below
// rotary_dims/2; channels past rotary_dims stay.
void apply_rope(MatrixRM& x, int head_dim, bool adjacent, const RopeTable& rt) {
  const int half = static_cast<int>(rt.cos.cols());
  const int stride = adjacent ? 2 : 1, partner = adjacent ? 1 : half;
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    float* row = x.row(t).data();
    const float* cs = rt.cos.row(t).data();
    const float* sn = rt.sin.row(t).data();
    for (int h0 = 0; h0 < x.cols(); h0 += head_dim)
      for (int i = 0; i < half; ++i) {
        const int c = h0 + i * stride;
        const float fcr = cs[i], fci = sn[i];
        const float v0 = row[c], v1 = row[c + partner];
        row[c] = v0 * fcr - v1 * fci;
        row[c + partner] = v0 * fci + v1 * fcr;
      }
  }
}

// Attention of the chunk's queries q [n, n_heads*hd] (positions p0..p0+n-1) over the cache's view of
// `layer` (causal softmax in float). Work items are (query head, block of kQueryBlock query rows), in
// parallel; a block reads only the keys its last row can see, so a long prefill skips the masked half of
// the scores.
constexpr int kQueryBlock = 128;
void attend_cpu(KvCache& cache, int layer, const MatrixRM& q, int p0, int hd, int group, float scale, MatrixRM& att_out) {
  const MatrixRM *K = nullptr, *V = nullptr;
  cache.attention_view(layer, K, V);
  const int n = static_cast<int>(q.rows()), n_heads = static_cast<int>(q.cols()) / hd, T = p0 + n;
  if (K->rows() != T || V->rows() != T) fail("internal: cache view of layer {} has {} rows, expected {}", layer, K->rows(), T);
  const int n_blocks = (n + kQueryBlock - 1) / kQueryBlock;
  parallel_chunks(static_cast<int64_t>(n_heads) * n_blocks, [&](int64_t item) {
    const int h = static_cast<int>(item / n_blocks), r0 = static_cast<int>(item % n_blocks) * kQueryBlock;
    const int rows = std::min(kQueryBlock, n - r0), keys = p0 + r0 + rows;  // keys 0..keys-1 are visible
    const int kvh = h / group;
    MatrixRM s = (q.block(r0, h * hd, rows, hd) * K->block(0, kvh * hd, keys, hd).transpose()) * scale;  // [rows, keys]
    for (int t = 0; t < rows; ++t) {
      const int last = p0 + r0 + t;  // causal: attends to positions 0..last
      float m = -INFINITY;
      for (int j = 0; j <= last; ++j) m = std::max(m, s(t, j));
      float sum = 0.f;
      for (int j = 0; j <= last; ++j) {
        const float e = std::exp(s(t, j) - m);
        s(t, j) = e;
        sum += e;
      }
      const float inv = 1.0f / sum;
      for (int j = 0; j <= last; ++j) s(t, j) *= inv;
      for (int j = last + 1; j < keys; ++j) s(t, j) = 0.f;
    }
    att_out.block(r0, h * hd, rows, hd).noalias() = s * V->block(0, kvh * hd, keys, hd);
  });
}

void add_bias(MatrixRM& x, const float* b) {
  if (b) x.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(b, x.cols());
}

}  // namespace

MatrixRM Model::forward(std::span<const int> tokens, KvCache& cache, const LayerCallback& on_layer) const {
  const ModelConfig& c = config_;
  const int n = static_cast<int>(tokens.size()), p0 = cache.length(), hd = c.head_dim();
  const int qd = c.q_dim(), group = c.n_heads / c.n_kv_heads;
  if (n == 0) return MatrixRM(0, c.vocab_size);
  if (p0 + n > c.seq_len)
    fail("{} tokens at position {} exceed the model's context of {} tokens (seq_len); use --tokens {} or fewer",
         n, p0, c.seq_len, c.seq_len);
  MatrixRM x(n, c.dim);
  for (int t = 0; t < n; ++t) {
    if (tokens[t] < 0 || tokens[t] >= c.vocab_size) fail("token id {} at position {} is outside the vocabulary ({})", tokens[t], p0 + t, c.vocab_size);
    w_.token_embedding.rows_to_f32(tokens[t], 1, x.row(t).data());
  }
  const float eps = static_cast<float>(c.rms_eps);
  const bool adjacent = c.rope_convention == "adjacent-pairs";
  const RopeTable rope(n, p0, inv_freq_);
  MatrixRM xb, q_pre, k_pre, q, k, v, att_out(n, qd), h1, h3;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int l = 0; l < c.n_layers; ++l) {
    const ModelLayer& W = w_.layers[l];
    rmsnorm_rows(x, W.rms_att, eps, xb);
    linear(xb, W.wq, q_pre);
    linear(xb, W.wk, k_pre);
    linear(xb, W.wv, v);
    add_bias(q_pre, W.bq);
    add_bias(k_pre, W.bk);
    add_bias(v, W.bv);
    if (W.q_norm) rmsnorm_heads(q_pre, hd, W.q_norm, eps);
    if (W.k_norm) rmsnorm_heads(k_pre, hd, W.k_norm, eps);
    q = q_pre;
    k = k_pre;
    apply_rope(q, hd, adjacent, rope);
    apply_rope(k, hd, adjacent, rope);
    if (on_layer) on_layer(LayerQKV{l, p0, q_pre, k_pre, q, k, v});
    cache.append(l, k, v);
    if (!cache.attend(l, q, att_out)) attend_cpu(cache, l, q, p0, hd, group, scale, att_out);
    linear_add(att_out, W.wo, x);
    rmsnorm_rows(x, W.rms_ffn, eps, xb);
    linear(xb, W.w1, h1);
    linear(xb, W.w3, h3);
    h1 = h1.array() / (1.0f + (-h1.array()).exp());  // SiLU
    h1 = h1.cwiseProduct(h3);
    linear_add(h1, W.w2, x);
  }
  cache.advance(n);
  rmsnorm_rows(x, w_.rms_final, eps, xb);
  MatrixRM logits;
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
