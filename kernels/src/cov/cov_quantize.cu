// cov/cov_quantize.cu: oscar-cov prefill and append (layout oscar/cov_format.h). A token row of head_dim HD
// is held by HD/8 lanes, 8 channels per lane; OSCAR's per-row quantile clamp (or a ratio clip), token-wise min/max,
// fp16 (scale, zero), codes by oscar::group_params / div_by_recip / rounded_code (bit-exact with the CPU's quantize_value);
// the quantile clip's threshold by row_quantile (a pop of the largest values, or a radix search). Sink and recent tokens are copied; append
// demotes the token leaving the recent ring into the body.
#include "api_util.h"
#include "cov/cov_kernels.h"
#include "decode/mma.cuh"
#include "decode/rotate.cuh"
#include "decode/rotate_rows.cuh"
#include "decode/shapes.h"
#include "decode/split_plan.h"
#include "oscar/cov_format.h"
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

// Prefill: HD/8 lanes per (bh, t) row; K and V both handled by it.
template <int HD, int BITS, bool ROT>
__global__ void __launch_bounds__(256) prefill_kernel(CovView c, RotArgs rot, const uint16_t* __restrict__ k,
                                                      const uint16_t* __restrict__ v, const int32_t* __restrict__ lens, int max_len) {
  constexpr int LR = HD / 8, CB = HD * BITS / 8, ROWS = 256 / LR;
  const int li = threadIdx.x & (LR - 1);
  // every lane of the warp runs every shuffle (rows past the end on a clamped row): full-warp shuffles of width LR,
  // without the convergence checks that a row's partial mask costs
  constexpr unsigned mask = 0xffffffffu;
  const int64_t total = static_cast<int64_t>(c.B) * c.Hkv * max_len;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * ROWS;
  for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * ROWS; row0 < total; row0 += stride) {
    // every lane runs the shuffles; rows past the end are computed on a clamped row
    int64_t row = row0 + threadIdx.x / LR;
    const bool in_range = row < total;
    if (!in_range) row = total - 1;
    // 32-bit index math (the API bounds batch * kv_heads * max_len below 2^32)
    const uint32_t bh32 = static_cast<uint32_t>(row) / static_cast<uint32_t>(max_len);
    const int64_t bh = bh32;
    const int t = static_cast<int>(static_cast<uint32_t>(row) - bh32 * static_cast<uint32_t>(max_len));
    const int b = static_cast<int>(bh / c.Hkv);
    int len = lens[b];
    len = len < 0 ? 0 : (len > max_len ? max_len : len);
    const bool live = in_range && t < len;
    uint4 kin = reinterpret_cast<const uint4*>(k + row * HD)[li];
    uint4 vin = reinterpret_cast<const uint4*>(v + row * HD)[li];
    float kx[8], vx[8];
    bf16x8_to_float(kin, kx);
    bf16x8_to_float(vin, vx);
    if constexpr (ROT) {  // in-kernel rotation of the unrotated input (every lane runs it: the shuffles need the whole row)
      const int h = static_cast<int>(bh % c.Hkv);
      rotate_row8<HD>(kx, rot.kind, rot.kind == 2 ? head_matrix(rot.key, rot.per_head, h, HD) : nullptr, li, mask);
      rotate_row8<HD>(vx, rot.kind, rot.kind == 2 ? head_matrix(rot.value, rot.per_head, h, HD) : nullptr, li, mask);
      kin = pack8_bf16(kx);
      vin = pack8_bf16(vx);
    }
    uint32_t kbits, kpar, vbits, vpar;
    float thk = -1.0f, thv = -1.0f;  // the quantile clip's thresholds (uniform: one cache field each)
    if (c.quantile_k >= 0 && c.quantile_v >= 0) row_quantiles_kv<HD>(kx, c.quantile_k, vx, c.quantile_v, mask, thk, thv);
    else if (c.quantile_k >= 0) thk = row_quantile<HD>(kx, c.quantile_k, mask);
    else if (c.quantile_v >= 0) thv = row_quantile<HD>(vx, c.quantile_v, mask);
    quantize_row<HD, BITS>(kx, c.clip_k, thk, c.rounding, mask, kbits, kpar);
    quantize_row<HD, BITS>(vx, c.clip_v, thv, c.rounding, mask, vbits, vpar);
    if (!live) continue;
    const int64_t nb = covfmt::body_tokens(len, c.S, c.W);
    if (t < c.S) {
      reinterpret_cast<uint4*>(c.ks + (bh * c.S + t) * HD)[li] = kin;
      reinterpret_cast<uint4*>(c.vs + (bh * c.S + t) * HD)[li] = vin;
    } else if (t - c.S < nb) {
      const int64_t bi = bh * c.cap + (t - c.S);
      store_codes<BITS>(c.kc + bi * CB, li, kbits);
      store_codes<BITS>(c.vc + bi * CB, li, vbits);
      if (li == 0) { c.kp[bi] = kpar; c.vp[bi] = vpar; }
    } else {
      const int64_t slot = bh * c.W + static_cast<int64_t>(static_cast<uint32_t>(t - c.S) % static_cast<uint32_t>(c.W));
      reinterpret_cast<uint4*>(c.kr + slot * HD)[li] = kin;
      reinterpret_cast<uint4*>(c.vr + slot * HD)[li] = vin;
    }
  }
}

// Append: HD/8 lanes per (bh, K or V) row; row r = 2 bh + (1 for V). WRITE = false: only the demotion (a dense
// rotation then writes the new token: NewTokenRows below).
template <int HD, int BITS, bool ROT, bool WRITE = true>
__global__ void __launch_bounds__(256) append_kernel(CovView c, RotArgs rot, const uint16_t* __restrict__ k,
                                                     const uint16_t* __restrict__ v, const int32_t* __restrict__ lens) {
  constexpr int LR = HD / 8, CB = HD * BITS / 8;
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / LR;
  const int64_t bh = r >> 1;
  if (bh >= static_cast<int64_t>(c.B) * c.Hkv) return;  // whole row group
  const int li = threadIdx.x & (LR - 1);
  const bool is_v = (r & 1) != 0;
  const int b = static_cast<int>(bh / c.Hkv);
  const int64_t t = lens[b];
  if (t < 0 || t >= c.S + c.cap + c.W) return;  // whole row group (host checked the bound)
  const uint16_t* in = (is_v ? v : k) + bh * HD;
  uint4 nin = WRITE ? reinterpret_cast<const uint4*>(in)[li] : uint4{};
  if constexpr (ROT)  // the new token arrives unrotated (the window and demoted tokens are stored rotated)
    nin = rotate_piece<HD>(nin, rot, is_v, static_cast<int>(bh % c.Hkv), li, row_lanes_mask<HD>(threadIdx.x & 31));
  if (t < c.S) {
    if constexpr (WRITE) reinterpret_cast<uint4*>((is_v ? c.vs : c.ks) + (bh * c.S + t) * HD)[li] = nin;
    return;
  }
  uint4* slot = reinterpret_cast<uint4*>((is_v ? c.vr : c.kr) + (bh * c.W + (t - c.S) % c.W) * HD) + li;
  if (t - c.S >= c.W) {  // demote token t - W (same ring slot) into body index t - W - S
    const uint4 old = *slot;
    float x[8];
    bf16x8_to_float(old, x);
    uint32_t bits, par;
    const unsigned mask = row_lanes_mask<HD>(threadIdx.x & 31);
    const int quantile = is_v ? c.quantile_v : c.quantile_k;
    const float thr = quantile >= 0 ? row_quantile<HD>(x, quantile, mask) : -1.0f;
    quantize_row<HD, BITS>(x, is_v ? c.clip_v : c.clip_k, thr, c.rounding, mask, bits, par);
    const int64_t bi = bh * c.cap + (t - c.W - c.S);
    store_codes<BITS>((is_v ? c.vc : c.kc) + bi * CB, li, bits);
    if (li == 0) (is_v ? c.vp : c.kp)[bi] = par;
  }
  if constexpr (WRITE) *slot = nin;
}

// The new token's K and V rows under a dense rotation, written where append_kernel would put them (sink, or the
// recent ring slot it has just demoted): row r = 2 bh + (1 for V).
struct NewTokenRows {
  CovView c;
  RotArgs rot;
  const uint16_t* k;
  const uint16_t* v;
  const int32_t* lens;
  int hd;
  __device__ int64_t count() const { return 2LL * c.B * c.Hkv; }
  __device__ const void* src(int64_t r) const { return ((r & 1) ? v : k) + (r >> 1) * hd; }
  __device__ const float* matrix(int64_t r) const {
    return head_matrix((r & 1) ? rot.value : rot.key, rot.per_head, static_cast<int>((r >> 1) % c.Hkv), hd);
  }
  __device__ void* dst(int64_t r) const {
    const int64_t bh = r >> 1;
    const int64_t t = lens[bh / c.Hkv];
    if (t < 0 || t >= c.S + c.cap + c.W) return nullptr;
    uint16_t* base = (r & 1) ? (t < c.S ? c.vs : c.vr) : (t < c.S ? c.ks : c.kr);
    return t < c.S ? base + (bh * c.S + t) * hd : base + (bh * c.W + (t - c.S) % c.W) * hd;
  }
};

}  // namespace

template <int HD, int BITS>
oscar_status cov_prefill(const CovView& c, const RotArgs& rot, const uint16_t* k, const uint16_t* v, const int32_t* lens, int32_t max_len,
                         cudaStream_t s, oscar_error* err) {
  const int64_t rows = static_cast<int64_t>(c.B) * c.Hkv * max_len;
  const int64_t per_block = 256 / (HD / 8);
  const int64_t want = (rows + per_block - 1) / per_block, cap = 16LL * plan::sm_count();
  const unsigned blocks = static_cast<unsigned>(want < cap ? want : cap);
  if (rot.kind) prefill_kernel<HD, BITS, true><<<blocks, 256, 0, s>>>(c, rot, k, v, lens, max_len);
  else prefill_kernel<HD, BITS, false><<<blocks, 256, 0, s>>>(c, rot, k, v, lens, max_len);
  return api::check_launch(err, "oscar_cov_prefill");
}

template <int HD, int BITS>
oscar_status cov_append(const CovView& c, const RotArgs& rot, const uint16_t* k, const uint16_t* v, const int32_t* lens, cudaStream_t s,
                        oscar_error* err) {
  const int64_t threads = static_cast<int64_t>(c.B) * c.Hkv * 2 * (HD / 8);
  if (rot.kind == 2) {  // dense matrices: the demotion, then the new rows rotated a 32-column slice per warp
    const unsigned blocks = static_cast<unsigned>((threads + 255) / 256);
    append_kernel<HD, BITS, false, false><<<blocks, 256, 0, s>>>(c, rot, k, v, lens);
    const NewTokenRows rows{c, rot, k, v, lens, HD};
    launch_rotate_rows<HD, false, false, false>(rows, 2LL * c.B * c.Hkv, s);
  } else if (rot.kind) {  // Hadamard: butterflies in registers, one warp per block (the rows spread over the SMs)
    const unsigned blocks = static_cast<unsigned>((threads + 31) / 32);
    append_kernel<HD, BITS, true><<<blocks, 32, 0, s>>>(c, rot, k, v, lens);
  } else {
    const unsigned blocks = static_cast<unsigned>((threads + 255) / 256);
    append_kernel<HD, BITS, false><<<blocks, 256, 0, s>>>(c, rot, k, v, lens);
  }
  return api::check_launch(err, "oscar_cov_append");
}

#define OSCAR_COV_QUANTIZE_INSTANCE(HD, BITS)                                                                                  \
  template oscar_status cov_prefill<HD, BITS>(const CovView&, const RotArgs&, const uint16_t*, const uint16_t*, const int32_t*, int32_t, \
                                              cudaStream_t, oscar_error*);                                                     \
  template oscar_status cov_append<HD, BITS>(const CovView&, const RotArgs&, const uint16_t*, const uint16_t*, const int32_t*,       \
                                             cudaStream_t, oscar_error*);
OSCAR_KV_SHAPES(OSCAR_COV_QUANTIZE_INSTANCE)

}  // namespace oscar::kernels
