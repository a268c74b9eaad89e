// cov_twin.h: the CPU twin of the oscar-cov cache kernels (kernels/src/cov/), written only with the
// shared rules (oscar/cov_format.h, oscar/quant_rules.h): the image of every device array (sink and recent
// windows, codes, fp16 (scale, zero)) after prefill of sequences holding lens[b] tokens of the bf16 K/V
// rows, sized by covfmt::layout. Contract: a cache's live elements depend only on the token rows and the
// lengths (cov_format.h: a token's segment and ring slot follow from L), so the state after prefill to L0
// and appends up to L is the twin at L; test_twins.cpp proves it equal to lib's token-by-token
// QuantizedKvCache and to simulate_layer. Dequantization: f64 for the decode reference, f32 as lib does.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "oscar/cov_format.h"
#include "oscar/float_formats.h"
#include "oscar/quant_rules.h"
#include "twins/cache_image.h"

namespace cov_twin {

// Array indices in Cache::img (the oscar_cov_cache struct's order); the K array of a pair, V is + 1.
enum : int { kSink = 0, kRecent = 2, kCodes = 4, kParams = 6 };

struct Cache {
  int B = 0, H = 0, D = 0, bits = 0, sink = 0, recent = 0;
  int64_t body_capacity = 0, capacity = 0;
  twins::Image img;  // k_sink, v_sink, k_recent, v_recent, k_codes, v_codes, k_params, v_params (oscar_cov_cache order)
};

// An empty cache image (all zero, nothing live) for `batch` sequences of `kv_heads` heads holding up to
// `capacity` tokens; the array sizes are covfmt::layout's (aborts if the twin's shapes disagree with it).
inline Cache empty(int batch, int kv_heads, int head_dim, int bits, int64_t capacity, int sink = oscar::covfmt::kDefaultSink,
                   int recent = oscar::covfmt::kDefaultRecent) {
  const oscar::covfmt::Layout l = oscar::covfmt::layout(batch, kv_heads, head_dim, bits, capacity, sink, recent);
  Cache c;
  c.B = batch; c.H = kv_heads; c.D = head_dim; c.bits = bits; c.sink = sink; c.recent = recent;
  c.body_capacity = l.body_capacity; c.capacity = l.capacity;
  const int64_t BH = int64_t(batch) * kv_heads, CB = oscar::covfmt::body_code_bytes(head_dim, bits);
  c.img.add_kv("cov_twin", "sink", 2, {BH, sink, head_dim}, {"bh", "t", "ch"}, l.sink_bytes);
  c.img.add_kv("cov_twin", "recent", 2, {BH, recent, head_dim}, {"bh", "slot", "ch"}, l.recent_bytes);
  c.img.add_kv("cov_twin", "codes", 1, {BH, l.body_capacity, CB}, {"bh", "body", "byte"}, l.codes_bytes);
  c.img.add_kv("cov_twin", "params", 4, {BH, l.body_capacity}, {"bh", "body"}, l.params_bytes);
  return c;
}

// The row rule of a cache (oscar_cov_cache's clip_mode, clip_k / clip_v, rounding); the allocator's at `bits` by default.
struct Rule {
  oscar::ClipMode mode;
  float clip_k = oscar::covfmt::kClipK, clip_v = oscar::covfmt::kClipV;
  oscar::Rounding rounding = oscar::covfmt::kRounding;
  static Rule allocator(int bits) { return Rule{oscar::covfmt::default_clip_mode(bits)}; }
};

// One body row: packed codes and (scale, zero) of one token's D bf16 values, as the kernel quantizes it: the quantile clamp
// (the threshold by sorting |x|), or the ratio clip, then the row's min and max.
inline void quantize_row(const uint16_t* x16, int D, int bits, oscar::ClipMode mode, float clip, oscar::Rounding rounding, uint8_t* codes,
                         uint32_t* params) {
  std::vector<float> x(D), mag(D);
  for (int i = 0; i < D; ++i) {
    x[i] = oscar::bf16_bits_to_float(x16[i]);
    mag[i] = std::fabs(x[i]);
  }
  if (mode == oscar::ClipMode::Quantile) {
    std::sort(mag.begin(), mag.end());
    const float thr = mag[size_t(oscar::quantile_clip_index(clip, D))];
    for (float& xi : x) xi = oscar::clamp_to_threshold(xi, thr);
    clip = 1.0f;
  }
  const float mn = *std::min_element(x.begin(), x.end()), mx = *std::max_element(x.begin(), x.end());
  const oscar::GroupParams p = oscar::group_params(mn, mx, bits, false, clip, oscar::ScaleDtype::F16);
  std::fill(codes, codes + oscar::covfmt::body_code_bytes(D, bits), uint8_t(0));
  for (int i = 0; i < D; ++i) oscar::pack_code(codes, i, oscar::quantize_value(x[i], p, bits, false, rounding), bits);
  *params = twins::pack_params(p);
}

// The cache holding tokens [0, lens[b]) of k, v (bf16 [B][H][T][D]) for every sequence b.
inline Cache build(const twins::Bf16Rows& k, const twins::Bf16Rows& v, const std::vector<int>& lens, int bits, int64_t capacity,
                   int sink, int recent, const Rule& rule) {
  Cache c = empty(int(lens.size()), k.H, k.D, bits, capacity, sink, recent);
  const int D = c.D, S = sink, W = recent;
  const int64_t CB = oscar::covfmt::body_code_bytes(D, bits);
  auto& A = c.img.arrays;
  twins::Array* win[2][2] = {{&A[kSink], &A[kSink + 1]}, {&A[kRecent], &A[kRecent + 1]}};
  twins::Array* codes[2] = {&A[kCodes], &A[kCodes + 1]};
  twins::Array* params[2] = {&A[kParams], &A[kParams + 1]};
  const float clip[2] = {rule.clip_k, rule.clip_v};
  for (int b = 0; b < c.B; ++b) {
    const int64_t L = lens[b], nb = oscar::covfmt::body_tokens(L, S, W);
    if (L > c.capacity || L > k.T) { std::fprintf(stderr, "cov_twin: L=%lld beyond the capacity or the rows\n", (long long)L); std::abort(); }
    for (int h = 0; h < c.H; ++h) {
      const int64_t bh = int64_t(b) * c.H + h;
      for (int tensor = 0; tensor < 2; ++tensor) {
        const twins::Bf16Rows& x = tensor ? v : k;
        for (int64_t t = 0; t < L; ++t) {
          if (t < S || t - S >= nb) {  // sink row, or recent ring slot (t - S) % W
            twins::Array& a = *win[t < S ? 0 : 1][tensor];
            const int64_t row = t < S ? bh * S + t : bh * W + (t - S) % W;
            std::copy(x.row(b, h, t), x.row(b, h, t) + D, a.as<uint16_t>() + row * D);
            std::fill(a.live.begin() + row * D, a.live.begin() + (row + 1) * D, uint8_t(1));
          } else {
            const int64_t i = bh * c.body_capacity + (t - S);
            quantize_row(x.row(b, h, t), D, bits, rule.mode, clip[tensor], rule.rounding, codes[tensor]->as<uint8_t>() + i * CB,
                         params[tensor]->as<uint32_t>() + i);
            std::fill(codes[tensor]->live.begin() + i * CB, codes[tensor]->live.begin() + (i + 1) * CB, uint8_t(1));
            params[tensor]->live[size_t(i)] = 1;
          }
        }
      }
    }
  }
  return c;
}
// The same with the allocator's rule at `bits` (what oscar_cov_cache_create leaves in the cache).
inline Cache build(const twins::Bf16Rows& k, const twins::Bf16Rows& v, const std::vector<int>& lens, int bits, int64_t capacity,
                   int sink = oscar::covfmt::kDefaultSink, int recent = oscar::covfmt::kDefaultRecent) {
  return build(k, v, lens, bits, capacity, sink, recent, Rule::allocator(bits));
}

// Token t of (b, h), channel ch, of a sequence holding L tokens, as stored: bf16 window value, or
// code * scale + zero (in double for the decode reference, in float exactly as lib dequantizes).
template <class F>
inline F dequant(const Cache& c, bool is_v, int b, int h, int64_t t, int64_t L, int ch) {
  const int64_t bh = int64_t(b) * c.H + h, nb = oscar::covfmt::body_tokens(L, c.sink, c.recent), D = c.D;
  const auto& A = c.img.arrays;
  const int x = is_v ? 1 : 0;
  if (t < c.sink) return oscar::bf16_bits_to_float(A[kSink + x].as<uint16_t>()[(bh * c.sink + t) * D + ch]);
  if (t - c.sink >= nb) return oscar::bf16_bits_to_float(A[kRecent + x].as<uint16_t>()[(bh * c.recent + (t - c.sink) % c.recent) * D + ch]);
  const int64_t i = bh * c.body_capacity + (t - c.sink), CB = oscar::covfmt::body_code_bytes(c.D, c.bits);
  const uint32_t p = A[kParams + x].as<uint32_t>()[i];
  const F code = F(oscar::unpack_code(A[kCodes + x].as<uint8_t>() + i * CB, ch, c.bits));
  return code * F(oscar::half_bits_to_float(uint16_t(p))) + F(oscar::half_bits_to_float(uint16_t(p >> 16)));
}

// Rows [0, L) of (b, h) dequantized into K, V ([L][D], double): the decode reference's cache.
inline void dequant_head(const Cache& c, int b, int h, int64_t L, std::vector<double>& K, std::vector<double>& V) {
  twins::dequant_rows(c.D, L, K, V, [&](bool is_v, int64_t t, int ch) { return dequant<double>(c, is_v, b, h, t, L, ch); });
}

}  // namespace cov_twin
