// inputs.h: the K/V rows and queries the twin tests feed to the kernels and to lib's reference, by
// profile (each one the data of a former separate GPU test), deterministic for a given seed:
//   Mix    keys N(0,1) + 0.3 with every 97th value x8 (outlier channels), values 0.5 N(0,1) - 0.1, and
//          constant key rows (stored scale 0): (flat head 2, token 5) and (flat head 0, token 400);
//   Peaky  keys N(0,1) + 0.2, values a per-channel mean + N(0,1), queries 2.5 N(0,1) (peaky softmax);
//   Stress Token Norm Imbalance (every 53rd token's keys x0.05, every 71st x8, all heads alike), values
//          x300 in all of sequence B-2 and in tokens [min(1000, T/3), +100) of sequence B-1 (value scales
//          past the omni decode kernel's fp16 range: its rescaled path), a token (B-1, 40) with zero keys
//          in every head (norm 0: stored unscaled); queries 2.5 N(0,1);
//   Spread K, V, Q all N(0,1): spread attention with zero-mean values (the long-split accuracy case).
#pragma once
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "oscar/float_formats.h"
#include "twins/cache_image.h"

namespace twins {

enum class Profile { Mix, Peaky, Stress, Spread };

inline const char* profile_name(Profile p) {
  return p == Profile::Mix ? "mix" : p == Profile::Peaky ? "peaky" : p == Profile::Stress ? "stress" : "spread";
}

struct Inputs {
  Bf16Rows k, v;            // [B][H][T][D]
  std::vector<uint16_t> q;  // [B][Hq][D], drawn after K and V
};

// q_seqs: sequences of queries (default B; the long-split case draws B queries for one sequence of rows).
inline Inputs make_inputs(Profile p, int B, int Hq, int H, int T, int D, uint32_t seed, int q_seqs = -1) {
  using oscar::float_to_bf16_bits;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  Inputs in;
  in.k.init(B, H, T, D);
  in.v.init(B, H, T, D);
  in.q.resize(size_t(q_seqs < 0 ? B : q_seqs) * Hq * D);
  std::vector<float> vmean(D, 0.f);
  if (p == Profile::Peaky || p == Profile::Stress)
    for (auto& x : vmean) x = nd(rng);
  const int big_t0 = std::min(1000, T / 3);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t) {
        const float ts = p != Profile::Stress ? 1.f : (size_t(b) * T + t) % 53 == 0 ? 0.05f : (size_t(b) * T + t) % 71 == 0 ? 8.f : 1.f;
        const float vb = p == Profile::Stress && (b == B - 2 || (b == B - 1 && t >= big_t0 && t < big_t0 + 100)) ? 300.f : 1.f;
        for (int c = 0; c < D; ++c) {
          const size_t i = ((size_t(b) * H + h) * T + t) * D + c;
          float kx, vx;
          switch (p) {
            case Profile::Mix: kx = nd(rng) * (i % 97 == 0 ? 8.f : 1.f) + 0.3f; vx = nd(rng) * 0.5f - 0.1f; break;
            case Profile::Peaky: kx = nd(rng) + 0.2f; vx = vmean[c] + nd(rng); break;
            case Profile::Stress: kx = (nd(rng) + 0.2f) * ts; vx = (vmean[c] + nd(rng)) * vb; break;
            default: kx = nd(rng); vx = nd(rng); break;
          }
          in.k.x[i] = float_to_bf16_bits(kx);
          in.v.x[i] = float_to_bf16_bits(vx);
        }
      }
  if (p == Profile::Mix) {
    const int bh = std::min(2, B * H - 1);
    for (int c = 0; c < D; ++c) {
      if (T > 5) in.k.x[(size_t(bh) * T + 5) * D + c] = float_to_bf16_bits(1.25f);
      if (T > 400) in.k.x[size_t(400) * D + c] = float_to_bf16_bits(-0.75f);
    }
  }
  if (p == Profile::Stress && T > 40)
    for (int h = 0; h < H; ++h)
      for (int c = 0; c < D; ++c) in.k.at(B - 1, h, 40, c) = 0;
  for (auto& x : in.q) x = float_to_bf16_bits((p == Profile::Spread ? 1.f : 2.5f) * nd(rng));
  return in;
}

}  // namespace twins
