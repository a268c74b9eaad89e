// attention_reference.h: the GPU tests' reference: one query's softmax attention in double over keys and
// values given as double rows (head_dim D), and the relative L2 error of a kernel's output against it.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "oscar/float_formats.h"

namespace attn_ref {

// o[0..D) = softmax(scale * q K^T) V over the first L rows of K, V ([L][D]); o = 0 when L == 0.
inline void attention(const double* q, const std::vector<double>& K, const std::vector<double>& V, int L, int D, double scale,
                      double* o) {
  std::vector<double> s(L);
  double m = -INFINITY;
  for (int t = 0; t < L; ++t) {
    double d = 0;
    for (int c = 0; c < D; ++c) d += q[c] * K[size_t(t) * D + c];
    s[t] = d * scale;
    m = std::max(m, s[t]);
  }
  double l = 0;
  for (int c = 0; c < D; ++c) o[c] = 0;
  for (int t = 0; t < L; ++t) {
    const double p = std::exp(s[t] - m);
    l += p;
    for (int c = 0; c < D; ++c) o[c] += p * V[size_t(t) * D + c];
  }
  for (int c = 0; c < D; ++c) o[c] = L ? o[c] / l : 0.0;
}

// The same with a bf16 query.
inline void attention_bf16q(const uint16_t* q, const std::vector<double>& K, const std::vector<double>& V, int L, int D, double scale,
                            double* o) {
  std::vector<double> qd(D);
  for (int c = 0; c < D; ++c) qd[c] = oscar::bf16_bits_to_float(q[c]);
  attention(qd.data(), K, V, L, D, scale, o);
}

// ||got - ref|| / ||ref|| (absolute when ref = 0); infinity when got holds a non-finite value.
inline double rel_err(const float* got, const double* ref, int D) {
  double num = 0, den = 0;
  for (int c = 0; c < D; ++c) {
    if (!std::isfinite(got[c])) return INFINITY;
    num += (got[c] - ref[c]) * (got[c] - ref[c]);
    den += ref[c] * ref[c];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace attn_ref
