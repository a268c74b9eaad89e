// omni_twin.h: the CPU twin of the oscar-omni cache kernels (kernels/src/omni/), written only with
// the shared rules (oscar/omni_format.h, oscar/quant_rules.h): the image of every device array (residual
// block, codes, key params per channel and 32-token block, value params per token and 32-channel group,
// per-token key norms) after prefill of sequences holding lens[b] tokens of the bf16 K/V rows, sized by
// omnifmt::layout. As for oscar-cov, live elements depend only on the rows and the lengths (a token's
// block and residual slot follow from L), so the twin at L is also the state after appends up to L;
// test_twins.cpp proves it equal to lib's simulate_layer and token-by-token QuantizedKvCache.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "oscar/float_formats.h"
#include "oscar/omni_format.h"
#include "oscar/quant_rules.h"
#include "twins/cache_image.h"

namespace omni_twin {

// Array indices in Cache::img (the oscar_omni_cache struct's order); V of a K/V pair is + 1.
enum : int { kRes = 0, kCodes = 2, kKParams = 4, kVParams = 5, kNorms = 6 };

struct Cache {
  int B = 0, H = 0, D = 0, bits = 0;
  int64_t body_capacity = 0, capacity = 0;
  twins::Image img;  // k_res, v_res, k_codes, v_codes, k_params, v_params, k_norms
};

// An empty image for `batch` sequences of `kv_heads` heads holding up to `capacity` tokens, sized by
// omnifmt::layout (aborts if the twin's shapes disagree with it).
inline Cache empty(int batch, int kv_heads, int head_dim, int bits, int64_t capacity) {
  using namespace oscar::omnifmt;
  const Layout l = layout(batch, kv_heads, head_dim, bits, capacity);
  Cache c;
  c.B = batch; c.H = kv_heads; c.D = head_dim; c.bits = bits; c.body_capacity = l.body_capacity; c.capacity = l.capacity;
  const int64_t BH = int64_t(batch) * kv_heads, CB = code_bytes(head_dim, bits), cap = l.body_capacity;
  c.img.add_kv("omni_twin", "res", 2, {BH, kResidual, head_dim}, {"bh", "slot", "ch"}, l.res_bytes);
  c.img.add_kv("omni_twin", "codes", 1, {BH, cap, CB}, {"bh", "t", "byte"}, l.codes_bytes);
  c.img.add("omni_twin", "k_params", 4, {BH, cap / kKeyBlock, head_dim}, {"bh", "block", "ch"}, l.k_params_bytes);
  c.img.add("omni_twin", "v_params", 4, {BH, cap, head_dim / kValueGroup}, {"bh", "t", "group"}, l.v_params_bytes);
  c.img.add("omni_twin", "k_norms", 2, {batch, cap}, {"b", "t"}, l.norms_bytes);
  return c;
}

// The cache holding tokens [0, lens[b]) of k, v (bf16 [B][H][T][D]) for every sequence b.
inline Cache build(const twins::Bf16Rows& k, const twins::Bf16Rows& v, const std::vector<int>& lens, int bits, int64_t capacity) {
  using namespace oscar;
  using namespace oscar::omnifmt;
  Cache c = empty(int(lens.size()), k.H, k.D, bits, capacity);
  const int H = c.H, D = c.D;
  const int64_t cap = c.body_capacity, CB = code_bytes(D, bits);
  auto& A = c.img.arrays;
  uint16_t* norms = A[kNorms].as<uint16_t>();
  auto x = [&](const twins::Bf16Rows& a, int b, int h, int64_t t, int ch) { return bf16_bits_to_float(a.at(b, h, t, ch)); };
  auto mark = [](twins::Array& a, int64_t first, int64_t n) { std::fill(a.live.begin() + first, a.live.begin() + first + n, uint8_t(1)); };
  for (int b = 0; b < c.B; ++b) {
    const int64_t L = lens[b], nb = body_tokens(L);
    if (L > c.capacity || L > k.T) { std::fprintf(stderr, "omni_twin: L=%lld beyond the capacity or the rows\n", (long long)L); std::abort(); }
    std::vector<float> norm(static_cast<size_t>(nb));
    for (int64_t t = 0; t < nb; ++t) {
      norm[size_t(t)] = omni_token_norm([&](int i) { return x(k, b, i / D, t, i % D); }, H * D, ScaleDtype::F16);
      norms[int64_t(b) * cap + t] = float_to_half_bits(norm[size_t(t)]);
      A[kNorms].live[size_t(int64_t(b) * cap + t)] = 1;
    }
    for (int h = 0; h < H; ++h) {
      const int64_t bh = int64_t(b) * H + h;
      uint8_t* kc = A[kCodes].as<uint8_t>();
      uint8_t* vc = A[kCodes + 1].as<uint8_t>();
      for (int64_t t0 = 0; t0 < nb; t0 += kKeyBlock)
        for (int ch = 0; ch < D; ++ch) {
          float y[kKeyBlock];
          float mn = 0, mx = 0;
          for (int i = 0; i < kKeyBlock; ++i) {
            const float xv = x(k, b, h, t0 + i, ch), n = norm[size_t(t0 + i)];
            y[i] = n > 0 ? xv / n : xv;
            mn = i ? std::min(mn, y[i]) : y[i];
            mx = i ? std::max(mx, y[i]) : y[i];
          }
          const IntZeroParams p = int_zero_params(mn, mx, bits, 1.0f, ScaleDtype::F16);
          const int64_t pi = (bh * (cap / kKeyBlock) + t0 / kKeyBlock) * D + ch;
          A[kKParams].as<uint32_t>()[pi] = twins::pack_params(p.p);
          A[kKParams].live[size_t(pi)] = 1;
          for (int i = 0; i < kKeyBlock; ++i)
            pack_code(&kc[(bh * cap + t0 + i) * CB], ch, quantize_value_int_zero(y[i], p, bits, Rounding::HalfEven), bits);
        }
      for (int64_t t = 0; t < nb; ++t) {
        mark(A[kCodes], (bh * cap + t) * CB, CB);
        mark(A[kCodes + 1], (bh * cap + t) * CB, CB);
        for (int g = 0; g < D / kValueGroup; ++g) {
          float mn = 0, mx = 0;
          for (int j = 0; j < kValueGroup; ++j) {
            const float xv = x(v, b, h, t, g * kValueGroup + j);
            mn = j ? std::min(mn, xv) : xv;
            mx = j ? std::max(mx, xv) : xv;
          }
          const IntZeroParams p = int_zero_params(mn, mx, bits, 1.0f, ScaleDtype::F16);
          const int64_t pi = (bh * cap + t) * (D / kValueGroup) + g;
          A[kVParams].as<uint32_t>()[pi] = twins::pack_params(p.p);
          A[kVParams].live[size_t(pi)] = 1;
          for (int j = 0; j < kValueGroup; ++j) {
            const int ch = g * kValueGroup + j;
            pack_code(&vc[(bh * cap + t) * CB], ch, quantize_value_int_zero(x(v, b, h, t, ch), p, bits, Rounding::HalfEven), bits);
          }
        }
      }
      for (int64_t t = nb; t < L; ++t)
        for (int tensor = 0; tensor < 2; ++tensor) {
          const twins::Bf16Rows& src = tensor ? v : k;
          const int64_t row = bh * kResidual + (t - nb);
          std::copy(src.row(b, h, t), src.row(b, h, t) + D, A[kRes + tensor].as<uint16_t>() + row * D);
          mark(A[kRes + tensor], row * D, D);
        }
    }
  }
  return c;
}

// Token t of (b, h), channel ch, of a sequence holding L tokens, as stored: bf16 residual value, or
// n_t * (code * scale + zero) for keys and code * scale + zero for values (F = double for the decode
// reference; F = float gives lib's arithmetic: dequantize in float, then multiply by the norm).
template <class F>
inline F dequant(const Cache& c, bool is_v, int b, int h, int64_t t, int64_t L, int ch) {
  using namespace oscar;
  using namespace oscar::omnifmt;
  const auto& A = c.img.arrays;
  const int64_t bh = int64_t(b) * c.H + h, nb = body_tokens(L), CB = code_bytes(c.D, c.bits), cap = c.body_capacity;
  if (t >= nb) return bf16_bits_to_float(A[kRes + (is_v ? 1 : 0)].as<uint16_t>()[(bh * kResidual + (t - nb)) * c.D + ch]);
  const F code = F(unpack_code(A[kCodes + (is_v ? 1 : 0)].as<uint8_t>() + (bh * cap + t) * CB, ch, c.bits));
  if (is_v) {
    const uint32_t p = A[kVParams].as<uint32_t>()[(bh * cap + t) * (c.D / kValueGroup) + ch / kValueGroup];
    return code * F(half_bits_to_float(uint16_t(p))) + F(half_bits_to_float(uint16_t(p >> 16)));
  }
  const uint32_t p = A[kKParams].as<uint32_t>()[(bh * (cap / kKeyBlock) + t / kKeyBlock) * c.D + ch];
  const F n = half_bits_to_float(A[kNorms].as<uint16_t>()[int64_t(b) * cap + t]);
  const F y = code * F(half_bits_to_float(uint16_t(p))) + F(half_bits_to_float(uint16_t(p >> 16)));
  return y * n;
}

// Rows [0, L) of (b, h) dequantized into K, V ([L][D], double): the decode reference's cache.
inline void dequant_head(const Cache& c, int b, int h, int64_t L, std::vector<double>& K, std::vector<double>& V) {
  twins::dequant_rows(c.D, L, K, V, [&](bool is_v, int64_t t, int ch) { return dequant<double>(c, is_v, b, h, t, L, ch); });
}

}  // namespace omni_twin
