// cov/row_quantize.cuh: oscar-cov's row quantizer on the device, shared by the contiguous writers (cov_quantize.cu)
// and the paged writer (cov_paged_write.cu): a token row of head_dim HD held as 8 values per lane by HD/8 lanes, OSCAR's
// per-row quantile clamp (row_quantile: a pop of the largest values, or a radix search) or a ratio clip, token-wise
// min/max, fp16 (scale, zero), codes by oscar::group_params / div_by_recip / rounded_code (bit-exact with the CPU's
// quantize_value), the packed code store, and a token's K and V rows read, rotated and quantized by the cache's rule.
#pragma once
#include <cstdint>

#include "cov/cov_kernels.h"
#include "decode/mma.cuh"
#include "decode/rotate.cuh"
#include "oscar/quant_rules.h"

namespace oscar::kernels {
namespace {

// The k-th smallest |x| (0-based, counting repeats) of a row held as 8 values per lane by HD/8 lanes, by radix
// search: the largest u with #{|x| >= u} >= HD - k, built bit by bit on the bits of |x| (non-negative floats order as
// their bit patterns), so every lane of the row gets the same element of the row exactly (quant_rules.h:
// quantile_clip_index). The row's values are bf16 values (the inputs are bf16; rotate_row8 rounds to bf16): their low
// 16 bits are 0, so are u's, and only bits 30..16 are searched. Cost per lane: 8 steps of 24 compares and one row
// reduction, whatever k (the fallback of row_quantile for large HD - k).
template <int HD>
__device__ __forceinline__ float row_quantile_radix(const float (&x)[8], int k, unsigned mask) {
  static_assert(HD <= 1023, "three 10-bit counts share one shuffle");
  uint32_t a[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) a[i] = __float_as_uint(x[i]) & 0x7fffffffu;
  const uint32_t need = static_cast<uint32_t>(HD - k);
  uint32_t t = 0;
  // two bits a step: the counts of the three candidates (t|01, t|10, t|11) travel packed in one word (10 bits each),
  // so each step costs one row reduction; bits 30..17 in seven steps, then bit 16.
#pragma unroll 1
  for (int b = 29; b >= 17; b -= 2) {
    const uint32_t c1 = t | (1u << b), c2 = t | (2u << b), c3 = t | (3u << b);
    uint32_t n = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) n += (a[i] >= c1 ? 1u : 0u) + (a[i] >= c2 ? 1u << 10 : 0u) + (a[i] >= c3 ? 1u << 20 : 0u);
#pragma unroll
    for (int o = 1; o < HD / 8; o <<= 1) n += __shfl_xor_sync(mask, n, o, HD / 8);
    if ((n >> 20) >= need) t = c3;
    else if (((n >> 10) & 1023u) >= need) t = c2;
    else if ((n & 1023u) >= need) t = c1;
  }
  const uint32_t c = t | (1u << 16);
  uint32_t n = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) n += a[i] >= c ? 1u : 0u;
#pragma unroll
  for (int o = 1; o < HD / 8; o <<= 1) n += __shfl_xor_sync(mask, n, o, HD / 8);
  if (n >= need) t = c;
  return __uint_as_float(t);
}

// Sorts 8 values descending (the 19-comparator network for 8 inputs).
__device__ __forceinline__ void sort8_desc(uint32_t (&a)[8]) {
  constexpr int net[19][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {0, 4}, {1, 5}, {2, 6}, {3, 7}, {0, 1}, {2, 3},
                              {4, 5}, {6, 7}, {2, 4}, {3, 5}, {1, 4}, {3, 6}, {1, 2}, {3, 4}, {5, 6}};
#pragma unroll
  for (int c = 0; c < 19; ++c) {
    const uint32_t x = a[net[c][0]], y = a[net[c][1]];
    a[net[c][0]] = max(x, y);
    a[net[c][1]] = min(x, y);
  }
}

// The same element as row_quantile_radix, by popping the row's HD - k largest |x| one at a time: each lane sorts its
// 8 values, then each round takes the row's largest remaining head, which the lowest lane holding it pops (repeats
// are popped one per round, so the count is exact). A lane that has popped all its values offers 0, which is the
// answer anyway once the largest remaining value is 0. Cost per lane: the sort and HD - k rounds of one row
// reduction, a vote and a shift (~25 instructions at head_dim 128): cheaper than the radix search's ~110 per step
// while HD - k <= kPopMax.
constexpr int kPopMax = 32;
__device__ __forceinline__ void sorted_abs(const float (&x)[8], uint32_t (&a)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) a[i] = __float_as_uint(x[i]) & 0x7fffffffu;
  sort8_desc(a);
}
// One round: the row's largest remaining head (returned), popped by the lowest lane holding it.
template <int HD>
__device__ __forceinline__ uint32_t pop_largest(uint32_t (&a)[8], unsigned mask) {
  const unsigned me = 1u << (threadIdx.x & 31), row = row_lanes_mask<HD>(threadIdx.x & 31);
  uint32_t m = a[0];
#pragma unroll
  for (int o = 1; o < HD / 8; o <<= 1) m = max(m, __shfl_xor_sync(mask, m, o, HD / 8));
  const unsigned holders = __ballot_sync(mask, a[0] == m) & row;
  const bool pop = (holders & (0u - holders)) == me;  // the lowest holder
#pragma unroll
  for (int i = 0; i < 7; ++i) a[i] = pop ? a[i + 1] : a[i];
  a[7] = pop ? 0u : a[7];
  return m;
}
template <int HD>
__device__ __forceinline__ float row_quantile_pop(const float (&x)[8], int need, unsigned mask) {
  uint32_t a[8], m = 0;
  sorted_abs(x, a);
#pragma unroll 1
  for (int r = 0; r < need; ++r) m = pop_largest<HD>(a, mask);
  return __uint_as_float(m);
}

// The k-th smallest |x| of the row (every lane of the row gets it; k uniform over the warp).
template <int HD>
__device__ __forceinline__ float row_quantile(const float (&x)[8], int k, unsigned mask) {
  const int need = HD - k;
  return need <= kPopMax ? row_quantile_pop<HD>(x, need, mask) : row_quantile_radix<HD>(x, k, mask);
}

// row_quantile of a key row and a value row held by the same lanes, their pops interleaved (two independent chains
// of shuffles) for as many rounds as both need.
template <int HD>
__device__ __forceinline__ void row_quantiles_kv(const float (&xk)[8], int qk, const float (&xv)[8], int qv, unsigned mask, float& tk,
                                                 float& tv) {
  const int nk = HD - qk, nv = HD - qv;
  if (nk > kPopMax || nv > kPopMax) {
    tk = row_quantile<HD>(xk, qk, mask);
    tv = row_quantile<HD>(xv, qv, mask);
    return;
  }
  uint32_t ak[8], av[8], mk = 0, mv = 0;
  sorted_abs(xk, ak);
  sorted_abs(xv, av);
  const int both = min(nk, nv);
#pragma unroll 1
  for (int r = 0; r < both; ++r) {
    mk = pop_largest<HD>(ak, mask);
    mv = pop_largest<HD>(av, mask);
  }
#pragma unroll 1
  for (int r = both; r < nk; ++r) mk = pop_largest<HD>(ak, mask);
#pragma unroll 1
  for (int r = both; r < nv; ++r) mv = pop_largest<HD>(av, mask);
  tk = __uint_as_float(mk);
  tv = __uint_as_float(mv);
}

// The codes of this lane's 8 values, packed BITS each: quantize_value_recip's codes (quant_rules.h), rounded and
// clamped on the integer by rounded_code. A group whose stored scale is 0 gets r = 0, so q = 0 and code 0.
template <int BITS, Rounding R>
__device__ __forceinline__ uint32_t pack_codes(const float (&x)[8], const GroupParams& p, float r) {
  uint32_t bits = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) bits |= rounded_code(div_by_recip(__fsub_rn(x[i], p.zero), p.scale, r), BITS, R) << (BITS * i);
  return bits;
}

// Quantizes one row (this lane's 8 channels x): the lane's packed code bits and the (scale, zero) fp16 pair; mask: the lanes
// that run the call together (the row's, or the whole warp where every lane runs it). thr >= 0: the row is first
// clamped to +-thr (the quantile clip's threshold, row_quantile; clip is then 1, CovView); thr < 0: no clamp.
template <int HD, int BITS>
__device__ __forceinline__ void quantize_row(const float (&x_in)[8], float clip, float thr, Rounding rounding, unsigned mask,
                                             uint32_t& code_bits, uint32_t& params) {
  float x[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = thr >= 0.0f ? clamp_to_threshold(x_in[i], thr) : x_in[i];
  float mn = x[0], mx = x[0];
#pragma unroll
  for (int i = 1; i < 8; ++i) { mn = fminf(mn, x[i]); mx = fmaxf(mx, x[i]); }
#pragma unroll
  for (int o = 1; o < HD / 8; o <<= 1) {
    mn = fminf(mn, __shfl_xor_sync(mask, mn, o, HD / 8));
    mx = fmaxf(mx, __shfl_xor_sync(mask, mx, o, HD / 8));
  }
  // clip * min and clip * max rounded once each (no FMA), exactly as the CPU computes them.
  const float lo = __fmul_rn(clip, mn), hi = __fmul_rn(clip, mx);
  const GroupParams p = group_params(lo, hi, BITS, false, 1.0f, ScaleDtype::F16);
  // one division per group; codes through the reciprocal (== quantize_value, test_quant_recip); scale 0: r = 0
  const float r = p.scale > 0.0f ? __frcp_rn(p.scale) : 0.0f;
  code_bits = rounding == Rounding::HalfAway ? pack_codes<BITS, Rounding::HalfAway>(x, p, r)
                                             : pack_codes<BITS, Rounding::HalfEven>(x, p, r);
  params = static_cast<uint32_t>(float_to_half_bits(p.scale)) | (static_cast<uint32_t>(float_to_half_bits(p.zero)) << 16);
}

template <int BITS>
__device__ __forceinline__ void store_codes(uint8_t* row, int lane_in_row, uint32_t bits) {
  if constexpr (BITS == 2) reinterpret_cast<uint16_t*>(row)[lane_in_row] = static_cast<uint16_t>(bits);
  else reinterpret_cast<uint32_t*>(row)[lane_in_row] = bits;
}

// A token's K and V rows quantized: reads this lane's 8 bf16 channels of each at ksrc, vsrc into kin, vin; when ROT
// rotates them in the kernel (every lane of the row runs it: the shuffles need the whole row) by the matrices of KV head
// head() (or the Hadamard) and leaves the rotated bf16 channels in kin, vin; then quantizes both by the cache's rule (the
// quantile clip's thresholds are uniform: one cache field each) into the lane's code bits and (scale, zero) pairs.
template <int HD, int BITS, bool ROT, class Head>
__device__ __forceinline__ void quantize_kv_row(const CovView& c, const RotArgs& rot, const uint16_t* __restrict__ ksrc,
                                                const uint16_t* __restrict__ vsrc, Head head,
                                                int li, unsigned mask, uint4& kin, uint4& vin, uint32_t& kbits, uint32_t& kpar,
                                                uint32_t& vbits, uint32_t& vpar) {
  kin = reinterpret_cast<const uint4*>(ksrc)[li];
  vin = reinterpret_cast<const uint4*>(vsrc)[li];
  float kx[8], vx[8];
  bf16x8_to_float(kin, kx);
  bf16x8_to_float(vin, vx);
  if constexpr (ROT) {
    const int h = head();
    rotate_row8<HD>(kx, rot.kind, rot.kind == 2 ? head_matrix(rot.key, rot.per_head, h, HD) : nullptr, li, mask);
    rotate_row8<HD>(vx, rot.kind, rot.kind == 2 ? head_matrix(rot.value, rot.per_head, h, HD) : nullptr, li, mask);
    kin = pack8_bf16(kx);
    vin = pack8_bf16(vx);
  }
  float thk = -1.0f, thv = -1.0f;
  if (c.quantile_k >= 0 && c.quantile_v >= 0) row_quantiles_kv<HD>(kx, c.quantile_k, vx, c.quantile_v, mask, thk, thv);
  else if (c.quantile_k >= 0) thk = row_quantile<HD>(kx, c.quantile_k, mask);
  else if (c.quantile_v >= 0) thv = row_quantile<HD>(vx, c.quantile_v, mask);
  quantize_row<HD, BITS>(kx, c.clip_k, thk, c.rounding, mask, kbits, kpar);
  quantize_row<HD, BITS>(vx, c.clip_v, thv, c.rounding, mask, vbits, vpar);
}

}  // namespace
}  // namespace oscar::kernels
