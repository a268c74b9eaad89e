// omni_twin.h: the CPU twin of the oscar-omni cache kernels (kernels/src/omni_cache.cu), written only with
// the shared rules (oscar/omni_format.h, oscar/quant_rules.h): what the cache must hold, bit for bit,
// after prefill/append of the given bf16 K/V. Used by gpu_test_omni.cu (against the kernels) and by
// test_omni_twin.cpp (against the lib's reference quantizer, cache_sim).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "oscar/float_formats.h"
#include "oscar/omni_format.h"
#include "oscar/quant_rules.h"

namespace omni_twin {

struct Cache {
  int B = 0, H = 0, D = 0, bits = 0;
  int64_t cap = 0;  // body capacity
  std::vector<uint16_t> k_res, v_res;   // [BH][128][D]
  std::vector<uint8_t> k_codes, v_codes;  // [BH][cap][D*bits/8]
  std::vector<uint32_t> k_params;       // [BH][cap/32][D]
  std::vector<uint32_t> v_params;       // [BH][cap][D/32]
  std::vector<uint16_t> k_norms;        // [B][cap]
};

inline uint32_t pack_params(oscar::GroupParams p) {
  return uint32_t(oscar::float_to_half_bits(p.scale)) | (uint32_t(oscar::float_to_half_bits(p.zero)) << 16);
}

// k, v: bf16 [B][H][T][D]; lens[b] tokens of sequence b. Entries outside the live tokens stay zero.
inline Cache build(const std::vector<uint16_t>& k, const std::vector<uint16_t>& v, const std::vector<int>& lens, int H, int T,
                   int D, int bits, int64_t cap) {
  using namespace oscar;
  Cache c;
  c.B = int(lens.size()); c.H = H; c.D = D; c.bits = bits; c.cap = cap;
  const int64_t BH = int64_t(c.B) * H, CB = D * bits / 8;
  c.k_res.assign(BH * omnifmt::kResidual * D, 0); c.v_res = c.k_res;
  c.k_codes.assign(BH * cap * CB, 0); c.v_codes = c.k_codes;
  c.k_params.assign(BH * (cap / omnifmt::kKeyBlock) * D, 0);
  c.v_params.assign(BH * cap * (D / omnifmt::kValueGroup), 0);
  c.k_norms.assign(int64_t(c.B) * cap, 0);
  auto x = [&](const std::vector<uint16_t>& a, int b, int h, int64_t t, int ch) {
    return bf16_bits_to_float(a[((int64_t(b) * H + h) * T + t) * D + ch]);
  };
  for (int b = 0; b < c.B; ++b) {
    const int64_t L = lens[b], nb = omnifmt::body_tokens(L);
    std::vector<float> norm(nb);
    for (int64_t t = 0; t < nb; ++t) {
      norm[t] = omnifmt::omni_token_norm([&](int i) { return x(k, b, i / D, t, i % D); }, H * D, ScaleDtype::F16);
      c.k_norms[int64_t(b) * cap + t] = float_to_half_bits(norm[t]);
    }
    for (int h = 0; h < H; ++h) {
      const int64_t bh = int64_t(b) * H + h;
      for (int64_t t0 = 0; t0 < nb; t0 += omnifmt::kKeyBlock)
        for (int ch = 0; ch < D; ++ch) {
          float y[omnifmt::kKeyBlock];
          float mn = 0, mx = 0;
          for (int i = 0; i < omnifmt::kKeyBlock; ++i) {
            const float xv = x(k, b, h, t0 + i, ch), n = norm[t0 + i];
            y[i] = n > 0 ? xv / n : xv;
            mn = i ? std::min(mn, y[i]) : y[i];
            mx = i ? std::max(mx, y[i]) : y[i];
          }
          const GroupParams p = group_params(mn, mx, bits, false, 1.0f, ScaleDtype::F16);
          c.k_params[(bh * (cap / omnifmt::kKeyBlock) + t0 / omnifmt::kKeyBlock) * D + ch] = pack_params(p);
          for (int i = 0; i < omnifmt::kKeyBlock; ++i)
            pack_code(&c.k_codes[(bh * cap + t0 + i) * CB], ch, quantize_value(y[i], p, bits, false, Rounding::HalfEven), bits);
        }
      for (int64_t t = 0; t < nb; ++t)
        for (int g = 0; g < D / omnifmt::kValueGroup; ++g) {
          float mn = 0, mx = 0;
          for (int j = 0; j < omnifmt::kValueGroup; ++j) {
            const float xv = x(v, b, h, t, g * omnifmt::kValueGroup + j);
            mn = j ? std::min(mn, xv) : xv;
            mx = j ? std::max(mx, xv) : xv;
          }
          const GroupParams p = group_params(mn, mx, bits, false, 1.0f, ScaleDtype::F16);
          c.v_params[(bh * cap + t) * (D / omnifmt::kValueGroup) + g] = pack_params(p);
          for (int j = 0; j < omnifmt::kValueGroup; ++j) {
            const int ch = g * omnifmt::kValueGroup + j;
            pack_code(&c.v_codes[(bh * cap + t) * CB], ch, quantize_value(x(v, b, h, t, ch), p, bits, false, Rounding::HalfEven), bits);
          }
        }
      for (int64_t t = nb; t < L; ++t)
        for (int ch = 0; ch < D; ++ch) {
          c.k_res[(bh * omnifmt::kResidual + (t - nb)) * D + ch] = k[((int64_t(b) * H + h) * T + t) * D + ch];
          c.v_res[(bh * omnifmt::kResidual + (t - nb)) * D + ch] = v[((int64_t(b) * H + h) * T + t) * D + ch];
        }
    }
  }
  return c;
}

// Dequantized key / value of token t (body or residual) of (b, h), channel ch, as the kernels read them.
inline double key(const Cache& c, int b, int h, int64_t t, int64_t L, int ch) {
  using namespace oscar;
  const int64_t bh = int64_t(b) * c.H + h, nb = omnifmt::body_tokens(L), CB = c.D * c.bits / 8;
  if (t >= nb) return bf16_bits_to_float(c.k_res[(bh * omnifmt::kResidual + (t - nb)) * c.D + ch]);
  const uint32_t p = c.k_params[(bh * (c.cap / omnifmt::kKeyBlock) + t / omnifmt::kKeyBlock) * c.D + ch];
  const double n = half_bits_to_float(c.k_norms[int64_t(b) * c.cap + t]);
  return n * (unpack_code(&c.k_codes[(bh * c.cap + t) * CB], ch, c.bits) * double(half_bits_to_float(uint16_t(p))) +
              half_bits_to_float(uint16_t(p >> 16)));
}
inline double value(const Cache& c, int b, int h, int64_t t, int64_t L, int ch) {
  using namespace oscar;
  const int64_t bh = int64_t(b) * c.H + h, nb = omnifmt::body_tokens(L), CB = c.D * c.bits / 8;
  if (t >= nb) return bf16_bits_to_float(c.v_res[(bh * omnifmt::kResidual + (t - nb)) * c.D + ch]);
  const uint32_t p = c.v_params[(bh * c.cap + t) * (c.D / omnifmt::kValueGroup) + ch / omnifmt::kValueGroup];
  return unpack_code(&c.v_codes[(bh * c.cap + t) * CB], ch, c.bits) * double(half_bits_to_float(uint16_t(p))) +
         half_bits_to_float(uint16_t(p >> 16));
}

}  // namespace omni_twin
