// model.cpp: the forward pass. One chunk of n tokens at positions p..p+n-1 per call; matrix products
// through Eigen (multi-threaded by OpenMP), attention per query head in parallel, or by the cache itself
// when it implements KvCache::attend().
#include "oscar/02_model/model.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "oscar/01_core/error.h"

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

Model::Model(const Checkpoint& ck) : ck_(ck) {
  const int hd = ck.config.head_dim();
  for (int i = 0; i < hd; i += 2) inv_freq_.push_back(1.0f / std::pow(10000.0f, static_cast<float>(i) / static_cast<float>(hd)));
}

namespace {

void rmsnorm_rows(const MatrixRM& x, const float* w, MatrixRM& out) {
  out.resize(x.rows(), x.cols());
  const Eigen::Map<const Eigen::RowVectorXf> wv(w, x.cols());
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    float ss = x.row(t).squaredNorm() / static_cast<float>(x.cols()) + 1e-5f;
    out.row(t) = x.row(t).cwiseProduct(wv) * (1.0f / std::sqrt(ss));
  }
}

// Rotates adjacent pairs (2i, 2i+1) of every head by angle pos * inv_freq[i] (llama2.c's RoPE).
void apply_rope(MatrixRM& x, int head_dim, int first_pos, const std::vector<float>& inv_freq) {
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    const float pos = static_cast<float>(first_pos + t);
    float* row = x.row(t).data();
    for (int c = 0; c < x.cols(); c += 2) {
      const float val = pos * inv_freq[(c % head_dim) / 2];
      const float fcr = std::cos(val), fci = std::sin(val);
      const float v0 = row[c], v1 = row[c + 1];
      row[c] = v0 * fcr - v1 * fci;
      row[c + 1] = v0 * fci + v1 * fcr;
    }
  }
}

// Attention of the chunk's queries q [n, n_heads*hd] (positions p0..p0+n-1) over the cache's view of
// `layer`, per query head in parallel (causal softmax in float).
void attend_cpu(KvCache& cache, int layer, const MatrixRM& q, int p0, int hd, int group, float scale, MatrixRM& att_out) {
  const MatrixRM *K = nullptr, *V = nullptr;
  cache.attention_view(layer, K, V);
  const int n = static_cast<int>(q.rows()), n_heads = static_cast<int>(q.cols()) / hd, T = p0 + n;
  if (K->rows() != T || V->rows() != T) fail("internal: cache view of layer {} has {} rows, expected {}", layer, K->rows(), T);
#pragma omp parallel for schedule(static)
  for (int h = 0; h < n_heads; ++h) {
    const int kvh = h / group;
    MatrixRM s = (q.middleCols(h * hd, hd) * K->middleCols(kvh * hd, hd).transpose()) * scale;  // [n, T]
    for (int t = 0; t < n; ++t) {
      const int last = p0 + t;  // causal: attends to positions 0..last
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
      for (int j = last + 1; j < T; ++j) s(t, j) = 0.f;
    }
    att_out.middleCols(h * hd, hd).noalias() = s * V->middleCols(kvh * hd, hd);
  }
}

}  // namespace

MatrixRM Model::forward(std::span<const int> tokens, KvCache& cache, const LayerCallback& on_layer) const {
  const ModelConfig& c = ck_.config;
  const int n = static_cast<int>(tokens.size()), p0 = cache.length(), hd = c.head_dim();
  const int qd = c.n_heads * hd, kvd = c.kv_dim(), group = c.n_heads / c.n_kv_heads;
  if (n == 0) return MatrixRM(0, c.vocab_size);
  if (p0 + n > c.seq_len)
    fail("{} tokens at position {} exceed the model's context of {} tokens (seq_len); use --tokens {} or fewer",
         n, p0, c.seq_len, c.seq_len);
  MatrixRM x(n, c.dim);
  for (int t = 0; t < n; ++t) {
    if (tokens[t] < 0 || tokens[t] >= c.vocab_size) fail("token id {} at position {} is outside the vocabulary ({})", tokens[t], p0 + t, c.vocab_size);
    x.row(t) = ConstMapRM(ck_.token_embedding + static_cast<int64_t>(tokens[t]) * c.dim, 1, c.dim);
  }
  MatrixRM xb, q_pre, k_pre, q, k, v, att_out(n, qd), h1, h3;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& W = ck_.layers[l];
    rmsnorm_rows(x, W.rms_att, xb);
    q_pre.noalias() = xb * ConstMapRM(W.wq, qd, c.dim).transpose();
    k_pre.noalias() = xb * ConstMapRM(W.wk, kvd, c.dim).transpose();
    v.noalias() = xb * ConstMapRM(W.wv, kvd, c.dim).transpose();
    q = q_pre;
    k = k_pre;
    apply_rope(q, hd, p0, inv_freq_);
    apply_rope(k, hd, p0, inv_freq_);
    if (on_layer) on_layer(LayerQKV{l, p0, q_pre, k_pre, q, k, v});
    cache.append(l, k, v);
    if (!cache.attend(l, q, att_out)) attend_cpu(cache, l, q, p0, hd, group, scale, att_out);
    x.noalias() += att_out * ConstMapRM(W.wo, c.dim, qd).transpose();
    rmsnorm_rows(x, W.rms_ffn, xb);
    h1.noalias() = xb * ConstMapRM(W.w1, c.hidden_dim, c.dim).transpose();
    h3.noalias() = xb * ConstMapRM(W.w3, c.hidden_dim, c.dim).transpose();
    h1 = h1.array() / (1.0f + (-h1.array()).exp());  // SiLU
    h1 = h1.cwiseProduct(h3);
    x.noalias() += h1 * ConstMapRM(W.w2, c.dim, c.hidden_dim).transpose();
  }
  cache.advance(n);
  rmsnorm_rows(x, ck_.rms_final, xb);
  MatrixRM logits = xb * ConstMapRM(ck_.classifier, c.vocab_size, c.dim).transpose();
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
