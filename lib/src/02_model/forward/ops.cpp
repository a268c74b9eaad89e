// ops.cpp: RMSNorm, RoPE, the attention sub-layer and the feed-forward activations of the block units. Attention
// runs per (query head, block of query rows) in parallel (parallel.h's chunk loop) over the cache's view: each
// block reads only the keys its rows can see (causal, within the layer's sliding window), so a long prefill skips
// the masked part of the scores, and a local layer reads its window alone.
#include "ops.h"

#include <algorithm>
#include <cmath>

#include "oscar/01_core/error.h"
#include "oscar/01_core/parallel.h"

namespace oscar::forward {

void rmsnorm_rows(const MatrixRM& x, const float* w, float eps, MatrixRM& out) {
  out.resize(x.rows(), x.cols());
  const Eigen::Map<const Eigen::RowVectorXf> wv(w, x.cols());
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    float ss = x.row(t).squaredNorm() / static_cast<float>(x.cols()) + eps;
    out.row(t) = x.row(t).cwiseProduct(wv) * (1.0f / std::sqrt(ss));
  }
}

void rmsnorm_heads(MatrixRM& x, int head_dim, const float* w, float eps) {
  const Eigen::Map<const Eigen::RowVectorXf> wv(w, head_dim);
  for (Eigen::Index t = 0; t < x.rows(); ++t)
    for (Eigen::Index h = 0; h < x.cols() / head_dim; ++h) {
      auto seg = x.row(t).segment(h * head_dim, head_dim);
      const float ss = seg.squaredNorm() / static_cast<float>(head_dim) + eps;
      seg = seg.cwiseProduct(wv) * (1.0f / std::sqrt(ss));
    }
}

RopeTable::RopeTable(int n, int first_pos, const std::vector<float>& inv_freq)
    : cos(n, static_cast<Eigen::Index>(inv_freq.size())), sin(n, static_cast<Eigen::Index>(inv_freq.size())) {
  for (int t = 0; t < n; ++t) {
    const float pos = static_cast<float>(first_pos + t);
    for (size_t i = 0; i < inv_freq.size(); ++i) {
      const float val = pos * inv_freq[i];
      cos(t, static_cast<Eigen::Index>(i)) = std::cos(val);
      sin(t, static_cast<Eigen::Index>(i)) = std::sin(val);
    }
  }
}

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

namespace {

constexpr int kQueryBlock = 128;

// Attention of the chunk's queries q [n, n_heads*hd] (positions p0..p0+n-1) over `view` (causal softmax in float,
// within the view's window; body rows per query as the view says).
void attend_view(const AttentionView& view, const MatrixRM& q, int p0, int hd, int group, float scale, MatrixRM& out) {
  const int n = static_cast<int>(q.rows()), n_heads = static_cast<int>(q.cols()) / hd, F = view.first;
  if (F + view.k->rows() < p0 + n || F + view.v->rows() < p0 + n || F > p0)
    fail("internal: a cache view of positions {}..{} for queries {}..{}", F, F + view.k->rows(), p0, p0 + n);
  const bool body = view.k_body != nullptr;
  if (body && (static_cast<int>(view.key_body.size()) != n || static_cast<int>(view.value_body.size()) != n))
    fail("internal: a cache view with body ranges for {} / {} of {} queries", view.key_body.size(), view.value_body.size(), n);
  const int W = view.window;
  auto first_visible = [&](int p) { return W > 0 ? std::max(F, p - W + 1) : F; };
  const int n_blocks = (n + kQueryBlock - 1) / kQueryBlock;
  parallel_chunks(static_cast<int64_t>(n_heads) * n_blocks, [&](int64_t item) {
    const int h = static_cast<int>(item / n_blocks), r0 = static_cast<int>(item % n_blocks) * kQueryBlock;
    const int rows = std::min(kQueryBlock, n - r0), kvh = h / group;
    const int lo = first_visible(p0 + r0), hi = p0 + r0 + rows;  // positions [lo, hi) hold every key a row sees
    const auto qb = q.block(r0, h * hd, rows, hd);
    MatrixRM s = (qb * view.k->block(lo - F, kvh * hd, hi - lo, hd).transpose()) * scale;  // [rows, hi - lo]
    // The union of the rows' body ranges within [lo, hi), for keys (kb) and values (vb).
    auto span_of = [&](const std::vector<std::pair<int, int>>& ranges) {
      int a = hi, e = lo;
      for (int t = 0; t < rows; ++t) {
        const auto [b0, b1] = ranges[static_cast<size_t>(r0 + t)];
        if (std::max(b0, lo) < std::min(b1, hi)) a = std::min(a, std::max(b0, lo)), e = std::max(e, std::min(b1, hi));
      }
      return std::pair<int, int>{a, std::max(a, e)};
    };
    if (body) {
      const auto [a, e] = span_of(view.key_body);
      if (e > a) {
        const MatrixRM sb = (qb * view.k_body->block(a - F, kvh * hd, e - a, hd).transpose()) * scale;
        for (int t = 0; t < rows; ++t) {
          const auto [b0, b1] = view.key_body[static_cast<size_t>(r0 + t)];
          for (int j = std::max(b0, a); j < std::min(b1, e); ++j) s(t, j - lo) = sb(t, j - a);
        }
      }
    }
    for (int t = 0; t < rows; ++t) {
      const int p = p0 + r0 + t, j0 = first_visible(p) - lo, j1 = p - lo;  // visible columns j0..j1
      float m = -INFINITY;
      for (int j = j0; j <= j1; ++j) m = std::max(m, s(t, j));
      float sum = 0.f;
      for (int j = j0; j <= j1; ++j) {
        const float ex = std::exp(s(t, j) - m);
        s(t, j) = ex;
        sum += ex;
      }
      const float inv = 1.0f / sum;
      for (int j = 0; j < j0; ++j) s(t, j) = 0.f;
      for (int j = j0; j <= j1; ++j) s(t, j) *= inv;
      for (int j = j1 + 1; j < hi - lo; ++j) s(t, j) = 0.f;
    }
    auto dst = out.block(r0, h * hd, rows, hd);
    if (body) {
      const auto [a, e] = span_of(view.value_body);
      if (e > a) {  // the body's probabilities move to their own matrix, read against the body's values
        MatrixRM pb = MatrixRM::Zero(rows, e - a);
        for (int t = 0; t < rows; ++t) {
          const auto [b0, b1] = view.value_body[static_cast<size_t>(r0 + t)];
          for (int j = std::max(b0, a); j < std::min(b1, e); ++j) pb(t, j - a) = s(t, j - lo), s(t, j - lo) = 0.f;
        }
        dst.noalias() = s * view.v->block(lo - F, kvh * hd, hi - lo, hd);
        dst.noalias() += pb * view.v_body->block(a - F, kvh * hd, e - a, hd);
        return;
      }
    }
    dst.noalias() = s * view.v->block(lo - F, kvh * hd, hi - lo, hd);
  });
}

void add_bias(MatrixRM& x, const float* b) {
  if (b) x.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(b, x.cols());
}

}  // namespace

void attention(const BlockContext& b) {
  const ModelConfig& c = b.model.config();
  const ModelLayer& W = b.w();
  BlockScratch& s = b.s;
  const int hd = c.head_dim(), n = static_cast<int>(s.xb.rows()), l = b.layer;
  const float eps = static_cast<float>(c.rms_eps);
  linear(s.xb, W.wq, s.q_pre);
  linear(s.xb, W.wk, s.k_pre);
  linear(s.xb, W.wv, s.v);
  add_bias(s.q_pre, W.bq);
  add_bias(s.k_pre, W.bk);
  add_bias(s.v, W.bv);
  if (W.q_norm) rmsnorm_heads(s.q_pre, hd, W.q_norm, eps);
  if (W.k_norm) rmsnorm_heads(s.k_pre, hd, W.k_norm, eps);
  s.q = s.q_pre;
  s.k = s.k_pre;
  const bool adjacent = c.rope_convention == "adjacent-pairs";
  apply_rope(s.q, hd, adjacent, b.rope);
  apply_rope(s.k, hd, adjacent, b.rope);
  if (b.on_layer) b.on_layer(LayerQKV{l, b.p0, s.q_pre, s.k_pre, s.q, s.k, s.v});
  b.cache.append(l, s.k, s.v);
  s.att.resize(n, c.q_dim());
  if (b.cache.attend(l, s.q, s.att)) return;
  AttentionView view;
  b.cache.attention_view(l, n, view);
  // 1/sqrt(head_dim) in float, as llama2.c computes it (bit-identical logits); an architecture's own scale otherwise.
  const float scale = c.attention_scale > 0 ? static_cast<float>(c.attention_scale) : 1.0f / std::sqrt(static_cast<float>(hd));
  attend_view(view, s.q, b.p0, hd, c.n_heads / c.n_kv_heads, scale, s.att);
}

void swiglu(MatrixRM& h1, const MatrixRM& h3) {
  h1 = h1.array() / (1.0f + (-h1.array()).exp());  // SiLU
  h1 = h1.cwiseProduct(h3);
}

void geglu_tanh(MatrixRM& h1, const MatrixRM& h3) {
  // GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as gelu_pytorch_tanh.
  const float k = 0.7978845608028654f;
  for (Eigen::Index i = 0; i < h1.size(); ++i) {
    const float x = h1.data()[i];
    h1.data()[i] = 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x))) * h3.data()[i];
  }
}

}  // namespace oscar::forward
