// rotate_twin.h: CPU twin of the kernels' in-kernel rotations (oscar/rotate_math.h): bf16 rows rotated by the
// normalized Hadamard or a dense matrix and rounded to bf16, decode outputs un-rotated in float32; and random
// orthogonal test matrices (Gram-Schmidt in double on Gaussian draws, rounded to float).
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "oscar/float_formats.h"
#include "oscar/fwht_math.h"
#include "oscar/rotate_math.h"

namespace rotate_twin {

struct Rotation {
  int kind = 0;       // 1 Hadamard, 2 matrix
  int per_head = 0;   // matrix: one per KV head
  int D = 0;
  std::vector<float> key, value;  // [per_head ? H : 1][D][D]
  const float* k_of(int h) const { return key.data() + (per_head ? size_t(h) * D * D : 0); }
  const float* v_of(int h) const { return value.data() + (per_head ? size_t(h) * D * D : 0); }
};

inline std::vector<float> random_orthogonal(int D, std::mt19937& rng) {
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> m(size_t(D) * D);
  for (auto& x : m) x = nd(rng);
  for (int r = 0; r < D; ++r) {  // rows orthonormalized in turn (twice for stability)
    for (int pass = 0; pass < 2; ++pass)
      for (int p = 0; p < r; ++p) {
        double dot = 0;
        for (int c = 0; c < D; ++c) dot += m[size_t(r) * D + c] * m[size_t(p) * D + c];
        for (int c = 0; c < D; ++c) m[size_t(r) * D + c] -= dot * m[size_t(p) * D + c];
      }
    double n = 0;
    for (int c = 0; c < D; ++c) n += m[size_t(r) * D + c] * m[size_t(r) * D + c];
    n = std::sqrt(n);
    for (int c = 0; c < D; ++c) m[size_t(r) * D + c] /= n;
  }
  return std::vector<float>(m.begin(), m.end());
}

inline Rotation make(int kind, int per_head, int H, int D, uint32_t seed) {
  Rotation r;
  r.kind = kind; r.per_head = per_head; r.D = D;
  if (kind == 2) {
    std::mt19937 rng(seed);
    for (int h = 0; h < (per_head ? H : 1); ++h) {
      const auto k = random_orthogonal(D, rng), v = random_orthogonal(D, rng);
      r.key.insert(r.key.end(), k.begin(), k.end());
      r.value.insert(r.value.end(), v.begin(), v.end());
    }
  }
  return r;
}

// One bf16 row rotated by the rule (key side: R_K or H; value: R_V or H), back to bf16.
inline void rotate_row(const uint16_t* in, uint16_t* out, const Rotation& r, int h, bool value) {
  const int D = r.D;
  std::vector<float> x(D), y(D);
  for (int i = 0; i < D; ++i) x[i] = oscar::bf16_bits_to_float(in[i]);
  if (r.kind == 1) {
    oscar::fwht_inplace(x.data(), D, true);
    y = x;
  } else {
    oscar::rotate_row_matrix(x.data(), value ? r.v_of(h) : r.k_of(h), D, y.data());
  }
  for (int i = 0; i < D; ++i) out[i] = oscar::float_to_bf16_bits(y[i]);
}
// Rows [B][H][T][D] (keys or values) rotated row by row.
inline std::vector<uint16_t> rotate_rows(const std::vector<uint16_t>& x, int B, int H, int T, const Rotation& r, bool value) {
  std::vector<uint16_t> y(x.size());
  const int D = r.D;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t) {
        const size_t o = ((size_t(b) * H + h) * T + t) * D;
        rotate_row(&x[o], &y[o], r, h, value);
      }
  return y;
}
// Queries [B][Hq][D]: query head hq uses KV head hq / G.
inline std::vector<uint16_t> rotate_queries(const std::vector<uint16_t>& q, int B, int Hq, int G, const Rotation& r) {
  std::vector<uint16_t> y(q.size());
  for (int b = 0; b < B; ++b)
    for (int hq = 0; hq < Hq; ++hq) {
      const size_t o = (size_t(b) * Hq + hq) * r.D;
      rotate_row(&q[o], &y[o], r, hq / G, false);
    }
  return y;
}
// Decode outputs [B][Hq][D] un-rotated by R_V (float32 rule), in place.
inline void unrotate_outputs(std::vector<float>& out, int B, int Hq, int G, const Rotation& r) {
  const int D = r.D;
  std::vector<float> y(D);
  for (int b = 0; b < B; ++b)
    for (int hq = 0; hq < Hq; ++hq) {
      float* o = &out[(size_t(b) * Hq + hq) * D];
      if (r.kind == 1) {
        oscar::fwht_inplace(o, D, true);
      } else {
        oscar::unrotate_row_matrix(o, r.v_of(hq / G), D, y.data());
        for (int i = 0; i < D; ++i) o[i] = y[i];
      }
    }
}

}  // namespace rotate_twin
