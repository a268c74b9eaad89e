// sinks.cpp: attention-sink statistics of one layer (position 0's norms and attention mass).
#include "oscar/04_stats/sinks.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "oscar/01_core/error.h"
#include "oscar/01_core/stats.h"

namespace oscar {

namespace {

// ||x_0|| / median_t ||x_t|| of one head ([T, hd] row-major); NaN when the median is 0.
double first_over_median(const float* x, int tokens, int hd) {
  std::vector<double> norms(static_cast<size_t>(tokens));
  for (int t = 0; t < tokens; ++t) {
    double s = 0;
    for (int c = 0; c < hd; ++c) s += static_cast<double>(x[static_cast<size_t>(t) * hd + c]) * x[static_cast<size_t>(t) * hd + c];
    norms[static_cast<size_t>(t)] = std::sqrt(s);
  }
  const double first = norms[0];
  const double med = median(std::move(norms));
  return med > 0 ? first / med : std::numeric_limits<double>::quiet_NaN();
}

// Mean and min over heads, skipping NaN (NaN when every head is NaN).
void mean_min(const std::vector<double>& v, double& mean, double& mn) {
  double s = 0;
  int n = 0;
  mn = std::numeric_limits<double>::quiet_NaN();
  for (double x : v) {
    if (std::isnan(x)) continue;
    s += x, ++n;
    mn = std::isnan(mn) ? x : std::min(mn, x);
  }
  mean = n ? s / n : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

LayerSinks layer_sinks(int layer, const HeadTensor& q, const HeadTensor& k, const HeadTensor& v, double scaling,
                       int max_queries) {
  LayerAttention a;
  a.scaling = scaling;
  return layer_sinks(layer, q, k, v, a, max_queries);
}

LayerSinks layer_sinks(int layer, const HeadTensor& q, const HeadTensor& k, const HeadTensor& v, const LayerAttention& att,
                       int max_queries) {
  const double scaling = att.scaling;
  const int T = k.tokens, hd = k.head_dim, kv = k.heads, nh = q.heads;
  if (T <= 0 || hd <= 0 || kv <= 0 || nh <= 0)
    fail("layer {}: no tokens or heads to measure attention sinks on (q {}x{}x{}, k {}x{}x{}); analyze a non-empty dump", layer,
         q.heads, q.tokens, q.head_dim, k.heads, k.tokens, k.head_dim);
  if (q.tokens != T || v.tokens != T || q.head_dim != hd || v.head_dim != hd || v.heads != kv || nh % kv != 0)
    fail("layer {}: q [{}, {}, {}], k [{}, {}, {}] and v [{}, {}, {}] do not fit together (same tokens and head_dim, query "
         "heads a multiple of KV heads); check the dump",
         layer, q.heads, q.tokens, q.head_dim, k.heads, k.tokens, k.head_dim, v.heads, v.tokens, v.head_dim);
  if (max_queries <= 0) fail("layer {}: {} queries to average; use at least 1", layer, max_queries);
  if (!att.sinks.empty() && static_cast<int>(att.sinks.size()) != nh)
    fail("layer {}: {} sink logits for {} query heads; check the dump", layer, att.sinks.size(), nh);
  LayerSinks s;
  s.layer = layer;
  s.scaling = scaling;
  s.queries = std::min(max_queries, T);
  std::vector<double> kr(static_cast<size_t>(kv)), vr(static_cast<size_t>(kv));
  for (int h = 0; h < kv; ++h) {
    kr[static_cast<size_t>(h)] = first_over_median(k.head(h), T, hd);
    vr[static_cast<size_t>(h)] = first_over_median(v.head(h), T, hd);
  }
  mean_min(kr, s.key_ratio_mean, s.key_ratio_min);
  mean_min(vr, s.value_ratio_mean, s.value_ratio_min);

  const int group = nh / kv, first_query = T - s.queries;
  s.window = att.sliding_window;
  for (int t = first_query; t < T; ++t) s.queries_seeing_0 += att.visible(t, 0) ? 1 : 0;
  if (s.out_of_window()) {  // a local layer past its window: position 0 is not attended to at all
    s.attention_mean = s.attention_max_head = std::numeric_limits<double>::quiet_NaN();
    return s;
  }
  std::vector<double> per_head(static_cast<size_t>(nh), 0.0);
#pragma omp parallel for schedule(dynamic)
  for (int h = 0; h < nh; ++h) {
    const float* qh = q.head(h);
    const float* kh = k.head(h / group);
    std::vector<double> score(static_cast<size_t>(T));
    double acc = 0;
    for (int t = first_query; t < T; ++t) {
      const float* qt = qh + static_cast<size_t>(t) * hd;
      if (!att.visible(t, 0)) continue;  // beyond a sliding window, position 0 gets no attention
      double mx = att.sinks.empty() ? -std::numeric_limits<double>::infinity() : att.sinks[static_cast<size_t>(h)];
      for (int j = 0; j <= t; ++j) {
        if (!att.visible(t, j)) continue;
        const float* kj = kh + static_cast<size_t>(j) * hd;
        double d = 0;
        for (int c = 0; c < hd; ++c) d += static_cast<double>(qt[c]) * kj[c];
        score[static_cast<size_t>(j)] = att.logit(d);
        mx = std::max(mx, score[static_cast<size_t>(j)]);
      }
      double sum = att.sinks.empty() ? 0.0 : std::exp(att.sinks[static_cast<size_t>(h)] - mx);
      for (int j = 0; j <= t; ++j)
        if (att.visible(t, j)) sum += std::exp(score[static_cast<size_t>(j)] - mx);
      acc += std::exp(score[0] - mx) / sum;
    }
    per_head[static_cast<size_t>(h)] = acc / s.queries_seeing_0;
  }
  double total = 0;
  for (int h = 0; h < nh; ++h) {
    total += per_head[static_cast<size_t>(h)];
    if (h == 0 || per_head[static_cast<size_t>(h)] > s.attention_max_head) {
      s.attention_max_head = per_head[static_cast<size_t>(h)];
      s.attention_max_head_index = h;
    }
  }
  s.attention_mean = total / nh;
  return s;
}

}  // namespace oscar
