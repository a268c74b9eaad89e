// attention_twin.h: the CPU twin of the decode-attention kernels (oscar_cov_decode, oscar_omni_decode,
// oscar_bf16_decode): one bf16 query per (sequence, query head), softmax(scale * q K^T) V in float64 over
// the cache as stored (the twins' dequantized rows, or the bf16 rows for the baseline), GQA head
// hq -> KV head hq / (Hq / Hkv); and the relative L2 error the GPU tests bound.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "oscar/float_formats.h"
#include "twins/cache_image.h"

namespace attn_twin {

// The logit modifiers of a decode (oscar_decode_options: softcap, sinks): softcap > 0 maps every score s to
// softcap tanh(s / softcap); sink (finite) joins the softmax denominator as e^sink with no value.
struct Logits {
  double softcap = 0;
  double sink = -INFINITY;
};

// The scores scale * q . K[t] of the first L rows of K ([L][D]), soft-capped when softcap > 0.
inline std::vector<double> scores(const double* q, const std::vector<double>& K, int64_t L, int D, double scale, double softcap = 0) {
  std::vector<double> s(static_cast<size_t>(L));
  for (int64_t t = 0; t < L; ++t) {
    double d = 0;
    for (int c = 0; c < D; ++c) d += q[c] * K[size_t(t) * D + c];
    s[size_t(t)] = softcap > 0 ? softcap * std::tanh(d * scale / softcap) : d * scale;
  }
  return s;
}

// A bf16 query (raw bits) in double.
inline std::vector<double> widen_bf16(const uint16_t* q, int D) {
  std::vector<double> qd(D);
  for (int c = 0; c < D; ++c) qd[c] = oscar::bf16_bits_to_float(q[c]);
  return qd;
}

// log sum_t e^{s_t} of plain scores with a bf16 query (raw bits); -inf when L == 0.
inline double logsumexp_bf16q(const uint16_t* q, const std::vector<double>& K, int64_t L, int D, double scale) {
  const std::vector<double> s = scores(widen_bf16(q, D).data(), K, L, D, scale);
  double m = -INFINITY, l = 0;
  for (double x : s) m = std::max(m, x);
  for (double x : s) l += std::exp(x - m);
  return L ? m + std::log(l) : -INFINITY;
}

// o[0..D) = softmax(scale * q K^T) V over the first L rows of K, V ([L][D]), with the logit modifiers lg; o = 0 when L == 0.
inline void attention(const double* q, const std::vector<double>& K, const std::vector<double>& V, int64_t L, int D, double scale,
                      double* o, const Logits& lg = {}) {
  const std::vector<double> s = scores(q, K, L, D, scale, lg.softcap);
  double m = lg.sink;
  for (double x : s) m = std::max(m, x);
  double l = std::isfinite(lg.sink) ? std::exp(lg.sink - m) : 0.0;
  for (int c = 0; c < D; ++c) o[c] = 0;
  for (int64_t t = 0; t < L; ++t) {
    const double p = std::exp(s[size_t(t)] - m);
    l += p;
    for (int c = 0; c < D; ++c) o[c] += p * V[size_t(t) * D + c];
  }
  for (int c = 0; c < D; ++c) o[c] = L ? o[c] / l : 0.0;
}

// The same with a bf16 query (raw bits).
inline void attention_bf16q(const uint16_t* q, const std::vector<double>& K, const std::vector<double>& V, int64_t L, int D, double scale,
                            double* o, const Logits& lg = {}) {
  attention(widen_bf16(q, D).data(), K, V, L, D, scale, o, lg);
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

// The bf16 baseline's cache: rows [0, L) of (b, h) of the kernel's input, in double.
inline void bf16_head(const twins::Bf16Rows& k, const twins::Bf16Rows& v, int b, int h, int64_t L, std::vector<double>& K,
                      std::vector<double>& V) {
  K.resize(size_t(L) * k.D);
  V.resize(K.size());
  for (int64_t t = 0; t < L; ++t)
    for (int c = 0; c < k.D; ++c) {
      K[size_t(t) * k.D + c] = oscar::bf16_bits_to_float(k.at(b, h, t, c));
      V[size_t(t) * k.D + c] = oscar::bf16_bits_to_float(v.at(b, h, t, c));
    }
}

// Decode of sequences `seqs` of a batch: q bf16 [B][Hq][D]; head(b, h, L, K, V) fills the cache rows of
// KV head h. Returns out [B][Hq][D] in double (zero for sequences not in `seqs`). softcap, sinks ([Hq] or empty): the
// logit modifiers (Logits) of query head hq.
template <class Head>
std::vector<double> decode(const std::vector<uint16_t>& q, const std::vector<int>& lens, const std::vector<int>& seqs, int Hq, int Hkv,
                           int D, double scale, Head head, double softcap = 0, const std::vector<float>& sinks = {}) {
  std::vector<double> out(lens.size() * size_t(Hq) * D, 0.0), K, V;
  const int G = Hq / Hkv;
  for (int b : seqs)
    for (int h = 0; h < Hkv; ++h) {
      head(b, h, int64_t(lens[size_t(b)]), K, V);
      for (int g = 0; g < G; ++g) {
        const size_t o = (size_t(b) * Hq + size_t(h) * G + g) * D;
        const int hq = h * G + g;
        const Logits lg{softcap, sinks.empty() ? -INFINITY : double(sinks[size_t(hq)])};
        attention_bf16q(&q[o], K, V, lens[size_t(b)], D, scale, &out[o], lg);
      }
    }
  return out;
}

}  // namespace attn_twin
