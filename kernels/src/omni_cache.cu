// omni_cache.cu: oscar-omni (OScaR) quantized KV cache (layout: oscar/omni_format.h): prefill and append
// quantize (per-token key norms over all KV heads, keys per channel over 32-token blocks, values per token
// in 32-channel groups, BF16 residual block of 128), and split-KV decode attention over it.
//
// Decode design (same skeleton as the oscar-cov kernel in cov_cache.cu, see decode_common.cuh):
//  * Keys: k^_tc = n_t (s_bc code_tc + z_bc) for token t of key block b, channel c. Per block of 32 tokens
//    (one warp chunk) the query is folded with the block's channel scales: B_c = q^_c s_bc as an exact
//    fp16 pair hi + lo (q^ = q scaled by a power of two), and the MMAs run on the raw codes (magic-number
//    fp16 A fragments, as in oscar-cov) against hi and lo. One extra MMA with row-constant A fragments
//    gives, per query, the magic bias sum_c q^_c s_bc (rows 8-15 = scales) and the zero-point term
//    sum_c q^_c z_bc (rows 0-7 = zero points), so score_t = n_t 2^e (D_t - 1024 sum q^ s + sum q^ z)
//    needs no per-token shuffles.
//  * Values: v^_tc = s_tg code_tc + z_tg with g = c / 32. A thread's PV fragments cover 16 channels of one
//    group, so its A fragment (two tokens of one channel) is dequantized in place with one fp16 FMA by the
//    two tokens' fp16 scales (exact operands, one rounding); the weights are fp16 and the zero points
//    enter as sum_t p_t z_tg per group with the same rounded weights, added after the combine.
//  * Residual tokens (BF16) are served by window blocks with the shared BF16 tile.
#include "api_util.h"
#include "decode/bf16_tile.cuh"
#include "decode/checks.h"
#include "decode/merge.h"
#include "decode/partials.cuh"
#include "decode/split_plan.h"
#include "oscar/omni_format.h"
#include "oscar/quant_rules.h"
#include "oscar_kv.h"

namespace oscar::kernels {
namespace {

using omnifmt::kKeyBlock;
using omnifmt::kResidual;
constexpr int kHD = 128;  // the compiled head_dim (oscar-omni)
constexpr int kStages = 3;

struct OmniView {
  int B, Hkv;
  int64_t cap;
  uint16_t *kr, *vr;  // residual
  uint8_t *kc, *vc;
  uint32_t *kp, *vp;  // fp16x2 (scale, zero)
  uint16_t* kn;       // fp16 norms [B][cap]
};

// ---------------------------------------------------------------------------------------------
// Quantization of one 32-token block of every KV head of sequence b (body tokens t0 .. t0 + 31), by a
// block of 256 threads. src_k(h, i) / src_v(h, i): the bf16 row of token t0 + i of head h.
constexpr int kQThreads = 256;
struct QuantSmem {
  float norm[kKeyBlock];
  float mn[2][kHD], mx[2][kHD];
  uint8_t codes[kKeyBlock][kHD];
};

template <int BITS, class SrcK, class SrcV>
__device__ void quantize_block32(const OmniView& c, int b, int64_t t0, SrcK src_k, SrcV src_v, QuantSmem& sm) {
  constexpr int CB = kHD * BITS / 8;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // 1. Token norms over all KV heads (omnifmt::omni_token_norm's order: lane l owns channels 4l..4l+3 of
  //    every head, adds their squares head by head, then the xor butterfly).
  for (int i = warp; i < kKeyBlock; i += kQThreads / 32) {
    double acc = 0.0;
    for (int h = 0; h < c.Hkv; ++h) {
      const uint2 w = reinterpret_cast<const uint2*>(src_k(h, i))[lane];
      const float x[4] = {__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xffff0000u), __uint_as_float(w.y << 16),
                          __uint_as_float(w.y & 0xffff0000u)};
#pragma unroll
      for (int j = 0; j < 4; ++j) acc = __dadd_rn(acc, __dmul_rn(x[j], x[j]));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc = __dadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, o));
    const uint16_t nb = float_to_half_bits(__double2float_rn(__dsqrt_rn(acc)));
    if (lane == 0) {
      sm.norm[i] = half_bits_to_float(nb);
      c.kn[static_cast<int64_t>(b) * c.cap + t0 + i] = nb;
    }
  }
  __syncthreads();
  // 2. Keys: per channel over the 32 tokens of y = k / n. Thread = (channel ch, half hf of the tokens).
  const int ch = tid & (kHD - 1), hf = tid >> 7;
  for (int h = 0; h < c.Hkv; ++h) {
    const int64_t bh = static_cast<int64_t>(b) * c.Hkv + h;
    float y[16];
    float mn = INFINITY, mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const int i = hf * 16 + k;
      const float x = __uint_as_float(static_cast<uint32_t>(src_k(h, i)[ch]) << 16);
      const float n = sm.norm[i];
      y[k] = n > 0.0f ? __fdiv_rn(x, n) : x;
      mn = fminf(mn, y[k]);
      mx = fmaxf(mx, y[k]);
    }
    sm.mn[hf][ch] = mn;
    sm.mx[hf][ch] = mx;
    __syncthreads();
    mn = fminf(sm.mn[0][ch], sm.mn[1][ch]);
    mx = fmaxf(sm.mx[0][ch], sm.mx[1][ch]);
    const GroupParams p = group_params(mn, mx, BITS, false, 1.0f, ScaleDtype::F16);
    if (hf == 0)
      c.kp[(bh * (c.cap / kKeyBlock) + t0 / kKeyBlock) * kHD + ch] =
          static_cast<uint32_t>(float_to_half_bits(p.scale)) | (static_cast<uint32_t>(float_to_half_bits(p.zero)) << 16);
#pragma unroll
    for (int k = 0; k < 16; ++k) sm.codes[hf * 16 + k][ch] = quantize_value(y[k], p, BITS, false, Rounding::HalfEven);
    __syncthreads();
    // pack: 32 rows x CB bytes as 32-bit words, 16 (INT2) or 8 (INT4) codes per word
    constexpr int WPR = CB / 4, CPW = 32 / BITS;
    for (int wi = tid; wi < kKeyBlock * WPR; wi += kQThreads) {
      const int i = wi / WPR, w = wi % WPR;
      uint32_t bits = 0;
#pragma unroll
      for (int q = 0; q < CPW; ++q) bits |= static_cast<uint32_t>(sm.codes[i][w * CPW + q]) << (BITS * q);
      reinterpret_cast<uint32_t*>(c.kc + (bh * c.cap + t0 + i) * CB)[w] = bits;
    }
    __syncthreads();  // sm.codes / mn / mx reused by the next head
  }
  // 3. Values: per token, groups of 32 channels = 8 lanes x 4 channels; one warp per row.
  for (int r = warp; r < kKeyBlock * c.Hkv; r += kQThreads / 32) {
    const int h = r / kKeyBlock, i = r % kKeyBlock;
    const int64_t bh = static_cast<int64_t>(b) * c.Hkv + h;
    const uint2 w = reinterpret_cast<const uint2*>(src_v(h, i))[lane];
    const float x[4] = {__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xffff0000u), __uint_as_float(w.y << 16),
                        __uint_as_float(w.y & 0xffff0000u)};
    float mn = fminf(fminf(x[0], x[1]), fminf(x[2], x[3])), mx = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) {
      mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    }
    const GroupParams p = group_params(mn, mx, BITS, false, 1.0f, ScaleDtype::F16);
    uint32_t bits = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) bits |= static_cast<uint32_t>(quantize_value(x[j], p, BITS, false, Rounding::HalfEven)) << (BITS * j);
    uint8_t* row = c.vc + (bh * c.cap + t0 + i) * CB;
    if constexpr (BITS == 2) row[lane] = static_cast<uint8_t>(bits);
    else reinterpret_cast<uint16_t*>(row)[lane] = static_cast<uint16_t>(bits);
    if ((lane & 7) == 0)
      c.vp[(bh * c.cap + t0 + i) * (kHD / 32) + (lane >> 3)] =
          static_cast<uint32_t>(float_to_half_bits(p.scale)) | (static_cast<uint32_t>(float_to_half_bits(p.zero)) << 16);
  }
}

// Prefill: block (b, 32-token block blk): quantized when inside the body, else copied to the residual.
template <int BITS>
__global__ void __launch_bounds__(kQThreads) omni_prefill_kernel(OmniView c, const uint16_t* __restrict__ k,
                                                                 const uint16_t* __restrict__ v,
                                                                 const int32_t* __restrict__ lens, int max_len) {
  __shared__ QuantSmem sm;
  const int nblk = (max_len + kKeyBlock - 1) / kKeyBlock;
  const int b = blockIdx.x / nblk, blk = blockIdx.x % nblk;
  int L = lens[b];
  L = L < 0 ? 0 : (L > max_len ? max_len : L);
  const int64_t nb = omnifmt::body_tokens(L);
  const int64_t t0 = static_cast<int64_t>(blk) * kKeyBlock;
  auto row = [&](const uint16_t* x, int h, int64_t t) { return x + ((static_cast<int64_t>(b) * c.Hkv + h) * max_len + t) * kHD; };
  if (t0 + kKeyBlock <= nb) {
    quantize_block32<BITS>(
        c, b, t0, [&](int h, int i) { return row(k, h, t0 + i); }, [&](int h, int i) { return row(v, h, t0 + i); }, sm);
    return;
  }
  const int64_t end = min64(L, t0 + kKeyBlock);
  const int64_t first = t0 > nb ? t0 : nb;
  const int64_t n = end - first;
  if (n <= 0) return;
  // residual copy: (head, token, 16-byte piece) per thread
  const int64_t pieces = static_cast<int64_t>(c.Hkv) * n * (kHD / 8);
  for (int64_t p = threadIdx.x; p < pieces; p += kQThreads) {
    const int piece = static_cast<int>(p % (kHD / 8));
    const int64_t ti = (p / (kHD / 8)) % n;
    const int h = static_cast<int>(p / (kHD / 8) / n);
    const int64_t t = first + ti;
    const int64_t dst = ((static_cast<int64_t>(b) * c.Hkv + h) * kResidual + (t - nb)) * kHD;
    reinterpret_cast<uint4*>(c.kr + dst)[piece] = reinterpret_cast<const uint4*>(row(k, h, t))[piece];
    reinterpret_cast<uint4*>(c.vr + dst)[piece] = reinterpret_cast<const uint4*>(row(v, h, t))[piece];
  }
}

// Append: grid (B, 4). Token t = lens[b] goes to residual slot t % 128; when that is slot 127 the four
// blocks of the sequence quantize the residual block (the new token read straight from the input).
template <int BITS>
__global__ void __launch_bounds__(kQThreads) omni_append_kernel(OmniView c, const uint16_t* __restrict__ k,
                                                                const uint16_t* __restrict__ v,
                                                                const int32_t* __restrict__ lens) {
  __shared__ QuantSmem sm;
  const int b = blockIdx.x, sub = blockIdx.y;
  const int64_t t = lens[b];
  if (t < 0 || t >= c.cap + kResidual - 1) return;  // host checked the bound
  const int slot = static_cast<int>(t % kResidual);
  auto res = [&](uint16_t* x, int h, int s) { return x + ((static_cast<int64_t>(b) * c.Hkv + h) * kResidual + s) * kHD; };
  auto in = [&](const uint16_t* x, int h) { return x + (static_cast<int64_t>(b) * c.Hkv + h) * kHD; };
  if (slot != kResidual - 1) {
    if (sub != 0) return;
    for (int p = threadIdx.x; p < c.Hkv * (kHD / 8); p += kQThreads) {
      const int h = p / (kHD / 8), piece = p % (kHD / 8);
      reinterpret_cast<uint4*>(res(c.kr, h, slot))[piece] = reinterpret_cast<const uint4*>(in(k, h))[piece];
      reinterpret_cast<uint4*>(res(c.vr, h, slot))[piece] = reinterpret_cast<const uint4*>(in(v, h))[piece];
    }
    return;
  }
  const int64_t t0 = t - (kResidual - 1) + sub * kKeyBlock;
  quantize_block32<BITS>(
      c, b, t0,
      [&](int h, int i) -> const uint16_t* { const int s = sub * kKeyBlock + i; return s == kResidual - 1 ? in(k, h) : res(c.kr, h, s); },
      [&](int h, int i) -> const uint16_t* { const int s = sub * kKeyBlock + i; return s == kResidual - 1 ? in(v, h) : res(c.vr, h, s); },
      sm);
}

// ---------------------------------------------------------------------------------------------
// Decode. One warp chunk = one key block of 32 tokens, staged by cp.async: K codes, V codes, the block's
// key (scale, zero) per channel (thread t's 32 channels padded to 144 bytes against bank conflicts), the
// tokens' value (scale, zero) per group, the tokens' norms.
template <int BITS>
struct OmniStage {
  static constexpr int CH = kKeyBlock;
  static constexpr int CB = kHD * BITS / 8;
  static constexpr int KP = 2 * CH * CB;           // key params: 4 rows of 144 B
  static constexpr int KP_ROW = 144;
  static constexpr int VP = KP + 4 * KP_ROW;       // value params: 32 tokens x 16 B
  static constexpr int KN = VP + CH * 16;          // norms: 32 x 2 B
  static constexpr int BYTES = KN + CH * 2;
  static_assert(BYTES % 16 == 0, "stage size");
};

template <int BITS>
__device__ __forceinline__ void omni_issue(uint8_t* stg, const uint8_t* __restrict__ kc, const uint8_t* __restrict__ vc,
                                           const uint32_t* __restrict__ kp_blk, const uint32_t* __restrict__ vp,
                                           const uint16_t* __restrict__ kn, int64_t base, int lane) {
  using S = OmniStage<BITS>;
  constexpr int R16 = S::CB / 16;
#pragma unroll
  for (int p = lane; p < S::CH * R16; p += 32) {
    const int r = p / R16, cc = p % R16;
    cp_async16(stg + p * 16, kc + (base + r) * S::CB + cc * 16);
    cp_async16(stg + S::CH * S::CB + p * 16, vc + (base + r) * S::CB + cc * 16);
  }
  cp_async16(stg + S::KP + (lane >> 3) * S::KP_ROW + (lane & 7) * 16, kp_blk + lane * 4);
  cp_async16(stg + S::VP + lane * 16, vp + (base + lane) * 4);
  if (lane < 4) cp_async16(stg + S::KN + lane * 16, kn + base + lane * 8);
}

__device__ __forceinline__ uint32_t hmul2_f16(uint32_t a, uint32_t b) {
  __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
  return *reinterpret_cast<uint32_t*>(&r);
}
__device__ __forceinline__ uint32_t hfma2_f16(uint32_t a, uint32_t b, uint32_t c) {
  __half2 r = __hfma2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b), *reinterpret_cast<const __half2*>(&c));
  return *reinterpret_cast<uint32_t*>(&r);
}
// The P V weights are taken as p 2^K, K = 15 to start with (p <= 1: finite in fp16), so that weights
// down to 2^-29 keep fp16's full precision (p itself would go subnormal below 2^-14); acc, ex and off
// carry the factor and the epilogue divides it out.
constexpr float kOmniPScaleMax = 32768.0f;
// 2^(BITS pos) of the value codes of m-tile mt (fp16 magic positions; both A rows of a tile share it).
template <int BITS>
__host__ __device__ constexpr float omni_vpos_factor(int mt) {
  return static_cast<float>(1 << (BITS * MagicPos<BITS, 10>::pos(v_pair_code<BITS, kHD>(mt, 0))));
}
template <int BITS>
constexpr bool omni_rows_share_pos() {
  for (int mt = 0; mt < 8; ++mt)
    if (MagicPos<BITS, 10>::pos(v_pair_code<BITS, kHD>(mt, 0)) != MagicPos<BITS, 10>::pos(v_pair_code<BITS, kHD>(mt, 1))) return false;
  return true;
}
static_assert(omni_rows_share_pos<2>() && omni_rows_share_pos<4>(), "the two A rows of a value m-tile share the magic position");
__device__ __forceinline__ uint32_t half2_const(float x) {
  const uint32_t h = float_to_half_bits(x);
  return h | (h << 16);
}

// One 32-token chunk: qh = thread t's query fragments (q^ 2^(8 - BITS pos)), fsc[j] = 2^(e_j - 8) sl2,
// pw = the warp's current weight factor 2^K (see kOmniPScaleMax; lowered here when a chunk needs it).
template <int BITS>
__device__ __forceinline__ void omni_chunk(WarpState<kHD>& st, float& pw, const uint8_t* stg, const uint32_t (&qh)[8][2], const float (&fsc)[2],
                                           uint16_t* ps, int g, int t) {
  using S = OmniStage<BITS>;
  using M10 = MagicPos<BITS, 10>;
  constexpr int CB = S::CB, KW = BITS, VW = BITS / 2, PW = 16 / BITS, CW = 32 / BITS;
  const uint8_t* kc = stg;
  const uint8_t* vc = stg + S::CH * CB;
  const uint32_t* kpw = reinterpret_cast<const uint32_t*>(stg + S::KP + t * S::KP_ROW);
  const uint32_t* vpw = reinterpret_cast<const uint32_t*>(stg + S::VP);
  const uint16_t* kn = reinterpret_cast<const uint16_t*>(stg + S::KN);
  // Block query fragments B = q^ * scale as an fp16 pair hi + lo (lo = q^ scale - hi, exact by one HFMA2:
  // q^ and scale are fp16, so the product has at most 22 significant bits): the scores take both, since
  // hi alone (2^-12 relative per channel) moved scores of ~40 log2 units (keys of norm-imbalanced tokens
  // against a far-off zero point) by ~0.02 and an output dominated by two tokens by >1%. The magic bias
  // 1024 sum(q^ scale) and the zero-point term sum(q^ z) come from one MMA with row-constant A fragments
  // (rows 0-7: zero points z 2^(BITS pos); rows 8-15: scales), both with exact products.
  uint32_t bq[8][2], bl[8][2];
  float cz[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int m = 0; m < 4; ++m) {  // pairs p = 4m .. 4m + 3 (k-steps 2m, 2m + 1)
    const int off0 = ((4 * m) / PW) * CW + (4 * m) % PW;
    const uint4 w0 = *reinterpret_cast<const uint4*>(kpw + off0);
    const uint4 w1 = *reinterpret_cast<const uint4*>(kpw + off0 + PW);
    const uint32_t a0[4] = {w0.x, w0.y, w0.z, w0.w}, a1[4] = {w1.x, w1.y, w1.z, w1.w};
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const int ks = 2 * m + kk;
      uint32_t az[2], as[2];
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int p = 2 * ks + hh, i = p - 4 * m;
        const uint32_t s2 = prmt(a0[i], a1[i], 0x5410), z2 = prmt(a0[i], a1[i], 0x7632);
        bq[ks][hh] = hmul2_f16(qh[ks][hh], s2);
        bl[ks][hh] = hfma2_f16(qh[ks][hh], s2, bq[ks][hh] ^ 0x80008000u);
        az[hh] = hmul2_f16(z2, half2_const(static_cast<float>(1 << (BITS * M10::pos(p % PW)))));
        as[hh] = s2;
      }
      const uint32_t za[4] = {az[0], as[0], az[1], as[1]};
      mma_f16(cz, za, qh[ks]);
    }
  }
  const float bias[2] = {cz[0] - 1024.0f * cz[2], cz[1] - 1024.0f * cz[3]};
  // Scores of the two 16-token sub-tiles.
  float s[2][4];
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    uint32_t kw[2][KW];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint32_t* src = reinterpret_cast<const uint32_t*>(kc + (16 * u + g + 8 * r) * CB) + t * KW;
#pragma unroll
      for (int w = 0; w < KW; ++w) kw[r][w] = src[w];
    }
    float c[4] = {0.f, 0.f, 0.f, 0.f}, c2[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
      const int q0 = 2 * ks, q1 = 2 * ks + 1;
      const uint32_t a[4] = {codes_f16x2<BITS>(kw[0][q0 / PW], q0 % PW), codes_f16x2<BITS>(kw[1][q0 / PW], q0 % PW),
                             codes_f16x2<BITS>(kw[0][q1 / PW], q1 % PW), codes_f16x2<BITS>(kw[1][q1 / PW], q1 % PW)};
      if (ks & 1) { mma_f16(c2, a, bq[ks]); mma_f16(c, a, bl[ks]); }
      else { mma_f16(c, a, bq[ks]); mma_f16(c2, a, bl[ks]); }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float n = __half2float(__ushort_as_half(kn[16 * u + g + 8 * r]));
#pragma unroll
      for (int j = 0; j < 2; ++j) s[u][2 * r + j] = n * (c[2 * r + j] + c2[2 * r + j] + bias[j]) * fsc[j];
    }
  }
  softmax_step<2>(st, s);
  // P V in fp16. The weights are rounded to fp16 once and the same rounded weights enter the MMA and the
  // zero-point sums. A fragments: fp16(code 2^(BITS pos) s') by one HFMA2 on the magic codes (1024 + code
  // 2^(BITS pos)) with the two tokens' value scales s' and the exact constant -1024 s' (the fp16 scale is
  // used as stored; the 2^(BITS pos) factor is removed per output channel in the epilogue). -1024 s' must
  // stay finite: s' = s 2^-k with k = 0 unless a scale of the chunk reaches 64 (rare; then B carries 2^k,
  // exactly, and the weight factor 2^K drops to at most 2^(15 - k), the warp's state rescaled with it).
  // cs sums p s of this thread's value group over the chunk (an MMA with the scales as A).
  uint32_t sv[2][2];  // [u][pr]: fp16 scales of tokens (16u + 2t + 8pr, +1) in group g / 2
  bool big = false;
#pragma unroll
  for (int u = 0; u < 2; ++u)
#pragma unroll
    for (int pr = 0; pr < 2; ++pr) {
      const int i0 = 16 * u + 2 * t + 8 * pr;
      sv[u][pr] = prmt(vpw[i0 * 4 + (g >> 1)], vpw[(i0 + 1) * 4 + (g >> 1)], 0x5410);
      big |= __vcmpgeu2(sv[u][pr] & 0x7FFF7FFFu, 0x54005400u) != 0u;  // |s| >= 64
    }
  uint32_t bscale = 0u;  // fp16x2 2^k for the B fragments when k > 0
  if (__any_sync(0xffffffffu, big)) {
    float mx = 0.f;
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int pr = 0; pr < 2; ++pr) mx = fmaxf(mx, fmaxf(fabsf(half_lo(sv[u][pr])), fabsf(half_hi(sv[u][pr]))));
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const int k = max(1, ilogbf(mx) - 5);  // mx 2^-k < 64
    const uint32_t down = half2_const(ldexpf(1.0f, -k));
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int pr = 0; pr < 2; ++pr) sv[u][pr] = hmul2_f16(sv[u][pr], down);
    bscale = half2_const(ldexpf(1.0f, k));
    const float lim = ldexpf(1.0f, 15 - k);  // p 2^K 2^k <= 2^15
    if (pw > lim) {
      const float r = lim / pw;  // a power of two: exact
      pw = lim;
#pragma unroll
      for (int mt = 0; mt < 8; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) st.acc[mt][i] *= r;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        st.off[j] *= r;
#pragma unroll
        for (int gr = 0; gr < 4; ++gr) st.ex[gr][j] *= r;
      }
    }
  }
  float cs[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int u = 0; u < 2; ++u) {
#pragma unroll
    for (int i = 0; i < 4; ++i) s[u][i] = __half2float(__float2half_rn(s[u][i] * pw));
    // zero points: sum over this thread's C-layout tokens (16u + g + 8r) of p * z, per group
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint4 zr = *reinterpret_cast<const uint4*>(vpw + (16 * u + g + 8 * r) * 4);
      const float z[4] = {half_hi(zr.x), half_hi(zr.y), half_hi(zr.z), half_hi(zr.w)};
#pragma unroll
      for (int gr = 0; gr < 4; ++gr)
#pragma unroll
        for (int j = 0; j < 2; ++j) st.ex[gr][j] += s[u][2 * r + j] * z[gr];
    }
    uint32_t b[2];
    p_to_bfrag<true>(ps, g, t, s[u][0], s[u][1], s[u][2], s[u][3], b);
    if (bscale) { b[0] = hmul2_f16(b[0], bscale); b[1] = hmul2_f16(b[1], bscale); }
    const uint32_t neg1024 = half2_const(-1024.0f);
    const uint32_t nz[2] = {hmul2_f16(sv[u][0], neg1024), hmul2_f16(sv[u][1], neg1024)};
    const uint32_t sa[4] = {sv[u][0], sv[u][0], sv[u][1], sv[u][1]};
    mma_f16(cs, sa, b);
    uint32_t vw[4][VW];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = 16 * u + 2 * t + (r & 1) + 8 * (r >> 1);
      const uint32_t* src = reinterpret_cast<const uint32_t*>(vc + i * CB) + g * VW;
#pragma unroll
      for (int w = 0; w < VW; ++w) vw[r][w] = src[w];
    }
    uint32_t lo[2][VW], hi[2][VW];
    pair_tokens<VW>(vw, lo, hi);
#pragma unroll
    for (int mt = 0; mt < 8; ++mt) {
      uint32_t a[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        a[k] = hfma2_f16(codes_f16x2<BITS>(v_pair_word<BITS, VW, kHD>(lo, hi, mt, k), v_pair_code<BITS, kHD>(mt, k)), sv[u][k >> 1], nz[k >> 1]);
      mma_f16(st.acc[mt], a, b);
    }
  }
  // Keep the accumulators centred: move the chunk's mid-code offset mid * sum(p * s) (times the channel's
  // 2^(BITS pos)) from acc into st.off (an accumulator growing by it over a long split loses the output
  // to the tensor cores' fp32 accumulation; see cov_cache.cu's int_chunk).
#pragma unroll
  for (int mt = 0; mt < 8; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) st.acc[mt][i] = fmaf(-mid_code<BITS>() * omni_vpos_factor<BITS>(mt), cs[i], st.acc[mt][i]);
#pragma unroll
  for (int j = 0; j < 2; ++j) st.off[j] = fmaf(mid_code<BITS>(), cs[j], st.off[j]);
}

// Query fragments for the omni body: thread t holds channels 32t .. 32t + 31 of query slot g (pairs as in
// the oscar-cov kernel), scaled by 2^(-e) with e the slot's exponent (|q| < 2^e) and pre-divided by the
// codes' magic position factor.
template <int BITS>
__device__ __forceinline__ void load_q_omni(const uint16_t* qrow, bool live, int t, uint32_t (&qh)[8][2], int& e) {
  constexpr int PW = 16 / BITS, CW = 32 / BITS;
  float amax = 0.f;
#pragma unroll
  for (int c = 0; c < 32; ++c) amax = fmaxf(amax, live ? fabsf(bf16f(qrow[32 * t + c])) : 0.f);
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  frexpf(amax, &e);  // amax = m 2^e, m in [0.5, 1); e = 0 for amax = 0
#pragma unroll
  for (int ks = 0; ks < 8; ++ks)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int p = 2 * ks + h;
      const int ch0 = 32 * t + (p / PW) * CW + p % PW, ch1 = ch0 + PW;
      const int sh = 8 - e - BITS * MagicPos<BITS, 10>::pos(p % PW);
      const float a = live ? ldexpf(bf16f(qrow[ch0]), sh) : 0.f, b = live ? ldexpf(bf16f(qrow[ch1]), sh) : 0.f;
      qh[ks][h] = static_cast<uint32_t>(__half_as_ushort(__float2half_rn(a))) |
                  (static_cast<uint32_t>(__half_as_ushort(__float2half_rn(b))) << 16);
    }
}

template <int BITS>
constexpr size_t omni_smem_bytes() {
  return kWarps * kStages * OmniStage<BITS>::BYTES > sizeof(CombineSmem<kHD>) ? kWarps * kStages * OmniStage<BITS>::BYTES
                                                                         : sizeof(CombineSmem<kHD>);
}

template <int BITS>
__global__ void __launch_bounds__(kWarps * 32, 3) omni_decode_kernel(OmniView c, DecodeArgs a) {
  __shared__ __align__(16) uint16_t ps_all[kWarps][16 * 8];
  extern __shared__ __align__(16) uint8_t dyn_smem[];
  CombineSmem<kHD>& cs = *reinterpret_cast<CombineSmem<kHD>*>(dyn_smem);
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t bh = blockIdx.y;
  const int b = static_cast<int>(bh / c.Hkv), h = static_cast<int>(bh % c.Hkv);
  const int split = blockIdx.x;
  const int64_t L = max(0, a.lens[b]);
  const int64_t nb = omnifmt::body_tokens(L);
  const QueryGroup qg = query_group(a);
  const uint16_t* qrow = query_row<kHD>(a, b, h, qg, g);
  const bool qlive = g < qg.nq;
  uint16_t* ps = ps_all[warp];
  WarpState<kHD> st;
  state_init(st);
  if (split >= a.nsplit) {
    uint32_t qb[8][2];
    load_q_bf16<kHD>(qrow, qlive, t, qb);
    const int64_t nres = L - nb;
    const uint16_t* kr = c.kr + bh * kResidual * kHD;
    const uint16_t* vr = c.vr + bh * kResidual * kHD;
    for (int64_t base = (split - a.nsplit) * (kWarps * 16) + warp * 16; base < nres; base += a.nwin * (kWarps * 16)) {
      const int n = static_cast<int>(min64(16, nres - base));
      bf16_tile<kHD>(st, kr, vr, [&](int i) { return base + i; }, n, qb, a.sl2, ps, g, t);
    }
    __syncthreads();
    block_partial_bf16<kHD>(st, a, qg, bh, split, cs, warp, g, t);
    return;
  }
  uint32_t qh[8][2];
  int e;
  load_q_omni<BITS>(qrow, qlive, t, qh, e);
  float pw = kOmniPScaleMax;
  const float fsc[2] = {ldexpf(a.sl2, __shfl_sync(0xffffffffu, e, (2 * t) * 4) - 8),
                        ldexpf(a.sl2, __shfl_sync(0xffffffffu, e, (2 * t + 1) * 4) - 8)};
  using S = OmniStage<BITS>;
  const uint8_t* kc = c.kc + bh * c.cap * S::CB;
  const uint8_t* vc = c.vc + bh * c.cap * S::CB;
  const uint32_t* kp = c.kp + bh * (c.cap / kKeyBlock) * kHD;
  const uint32_t* vp = c.vp + bh * c.cap * (kHD / 32);
  const uint16_t* kn = c.kn + static_cast<int64_t>(b) * c.cap;
  uint8_t* wst = dyn_smem + warp * (kStages * S::BYTES);
  const int64_t start = split * a.split_len, end = min64(nb, start + a.split_len);
  constexpr int64_t step = kWarps * S::CH;
  int64_t nxt = start + warp * S::CH;
#pragma unroll
  for (int sidx = 0; sidx < kStages - 1; ++sidx) {
    if (nxt < end) omni_issue<BITS>(wst + sidx * S::BYTES, kc, vc, kp + (nxt / kKeyBlock) * kHD, vp, kn, nxt, lane);
    cp_async_commit();
    nxt += step;
  }
  int stage = 0;
  for (int64_t base = start + warp * S::CH; base < end; base += step) {
    int is = stage + kStages - 1;
    if (is >= kStages) is -= kStages;
    if (nxt < end) omni_issue<BITS>(wst + is * S::BYTES, kc, vc, kp + (nxt / kKeyBlock) * kHD, vp, kn, nxt, lane);
    cp_async_commit();
    nxt += step;
    cp_async_wait<kStages - 1>();
    __syncwarp();
    omni_chunk<BITS>(st, pw, wst + stage * S::BYTES, qh, fsc, ps, g, t);
    __syncwarp();
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages are reused as CombineSmem
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    st.l[j] = sum_over_g(st.l[j]);
#pragma unroll
    for (int gr = 0; gr < 4; ++gr) st.ex[gr][j] = sum_over_g(st.ex[gr][j]);
  }
  const float ipw = 1.0f / pw;  // exact (a power of two)
  // this thread's output channels 16g .. 16g + 15 lie in value group g / 2 (selected without dynamic indexing)
  float zsel[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int grp = g >> 1;
    zsel[j] = grp == 0 ? st.ex[0][j] : grp == 1 ? st.ex[1][j] : grp == 2 ? st.ex[2][j] : st.ex[3][j];
  }
  block_partial<kHD>(
      st, [&](int mt, int, int j, float v) { return fmaf(v, 1.0f / omni_vpos_factor<BITS>(mt), zsel[j] + st.off[j]) * ipw; },
      a, qg, bh, split, cs, warp, g, t);
}

// ---------------------------------------------------------------------------------------------
// Host side: validation and dispatch (the one place where bits are dispatched for oscar-omni).
oscar_status check_omni(const oscar_omni_cache* c, const char* fn, oscar_error* err, OmniView& v) {
  if (!c) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
  if (c->head_dim != kHD)
    return api::fail(err, OSCAR_ERR_UNSUPPORTED, "%s: head_dim=%d unsupported (only 128 is compiled)", fn, c->head_dim);
  if (c->bits != 2 && c->bits != 4) return api::fail(err, OSCAR_ERR_UNSUPPORTED, "%s: bits=%d unsupported (2 or 4)", fn, c->bits);
  if (c->batch <= 0 || c->num_kv_heads <= 0)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch=%d num_kv_heads=%d must be positive", fn, c->batch, c->num_kv_heads);
  if (c->body_capacity < 0 || c->body_capacity % kResidual != 0)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: body_capacity=%lld must be a non-negative multiple of %d", fn,
                     (long long)c->body_capacity, kResidual);
  const void* ptrs[7] = {c->k_res, c->v_res, c->k_codes, c->v_codes, c->k_params, c->v_params, c->k_norms};
  const char* names[7] = {"k_res", "v_res", "k_codes", "v_codes", "k_params", "v_params", "k_norms"};
  for (int i = 0; i < 7; ++i) {
    const bool needed = i < 2 || c->body_capacity > 0;
    if (needed && !ptrs[i]) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: cache->%s is NULL", fn, names[i]);
    if (ptrs[i] && !api::aligned(ptrs[i], 16))
      return api::fail(err, OSCAR_ERR_MISALIGNED, "%s: cache->%s %p is not 16-byte aligned", fn, names[i], ptrs[i]);
  }
  v.B = c->batch; v.Hkv = c->num_kv_heads; v.cap = c->body_capacity;
  v.kr = static_cast<uint16_t*>(c->k_res); v.vr = static_cast<uint16_t*>(c->v_res);
  v.kc = static_cast<uint8_t*>(c->k_codes); v.vc = static_cast<uint8_t*>(c->v_codes);
  v.kp = static_cast<uint32_t*>(c->k_params); v.vp = static_cast<uint32_t*>(c->v_params);
  v.kn = static_cast<uint16_t*>(c->k_norms);
  return OSCAR_OK;
}

}  // namespace
}  // namespace oscar::kernels

using namespace oscar;

extern "C" int oscar_omni_shape_supported(int32_t head_dim, int32_t bits) { return head_dim == kernels::kHD && (bits == 2 || bits == 4); }

extern "C" int64_t oscar_omni_capacity(const oscar_omni_cache* c) { return c ? c->body_capacity + kernels::kResidual - 1 : 0; }

extern "C" oscar_status oscar_omni_prefill(const oscar_omni_cache* cache, const void* k, const void* v, const int32_t* seq_lens,
                                           int32_t max_len, void* stream, oscar_error* err) {
  const char* fn = "oscar_omni_prefill";
  kernels::OmniView cv;
  oscar_status st = kernels::check_omni(cache, fn, err, cv);
  if (st != OSCAR_OK) return st;
  if ((st = kernels::check_write_args(fn, "k, v", k, v, seq_lens, err)) != OSCAR_OK) return st;
  if (max_len < 0 || max_len > oscar_omni_capacity(cache))
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: max_len=%d outside [0, capacity %lld]", fn, max_len,
                     (long long)oscar_omni_capacity(cache));
  if (max_len == 0) return OSCAR_OK;
  const int64_t blocks = static_cast<int64_t>(cache->batch) * ((max_len + kernels::kKeyBlock - 1) / kernels::kKeyBlock);
  if (blocks >= (int64_t(1) << 31)) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch * max_len too large", fn);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const auto* kk = static_cast<const uint16_t*>(k);
  const auto* vv = static_cast<const uint16_t*>(v);
  if (cache->bits == 2) kernels::omni_prefill_kernel<2><<<static_cast<unsigned>(blocks), kernels::kQThreads, 0, s>>>(cv, kk, vv, seq_lens, max_len);
  else kernels::omni_prefill_kernel<4><<<static_cast<unsigned>(blocks), kernels::kQThreads, 0, s>>>(cv, kk, vv, seq_lens, max_len);
  return api::check_launch(err, fn);
}

extern "C" oscar_status oscar_omni_append(const oscar_omni_cache* cache, const void* k_new, const void* v_new,
                                          const int32_t* seq_lens, int32_t max_seq_len, void* stream, oscar_error* err) {
  const char* fn = "oscar_omni_append";
  kernels::OmniView cv;
  oscar_status st = kernels::check_omni(cache, fn, err, cv);
  if (st != OSCAR_OK) return st;
  if ((st = kernels::check_write_args(fn, "k_new, v_new", k_new, v_new, seq_lens, err)) != OSCAR_OK) return st;
  if ((st = kernels::check_append_len(fn, max_seq_len, oscar_omni_capacity(cache), err)) != OSCAR_OK) return st;
  const dim3 grid(static_cast<unsigned>(cache->batch), kernels::kResidual / kernels::kKeyBlock);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const auto* kk = static_cast<const uint16_t*>(k_new);
  const auto* vv = static_cast<const uint16_t*>(v_new);
  if (cache->bits == 2) kernels::omni_append_kernel<2><<<grid, kernels::kQThreads, 0, s>>>(cv, kk, vv, seq_lens);
  else kernels::omni_append_kernel<4><<<grid, kernels::kQThreads, 0, s>>>(cv, kk, vv, seq_lens);
  return api::check_launch(err, fn);
}

extern "C" oscar_status oscar_omni_decode(const oscar_omni_cache* cache, const void* q, int32_t num_q_heads, const int32_t* seq_lens,
                                          int32_t max_seq_len, float softmax_scale, float* out, void* workspace,
                                          size_t workspace_bytes, void* stream, oscar_error* err) {
  const char* fn = "oscar_omni_decode";
  kernels::OmniView cv;
  oscar_status st = kernels::check_omni(cache, fn, err, cv);
  if (st != OSCAR_OK) return st;
  st = kernels::check_decode_args(fn, q, num_q_heads, cache->num_kv_heads, seq_lens, max_seq_len, oscar_omni_capacity(cache), out,
                                  workspace, err);
  if (st != OSCAR_OK) return st;
  const int64_t bh = static_cast<int64_t>(cache->batch) * cache->num_kv_heads;
  if (bh > 65535) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch * kv_heads = %lld exceeds 65535", fn, (long long)bh);
  namespace plan = kernels::plan;
  const int64_t units = bh * plan::query_groups(num_q_heads / cache->num_kv_heads);
  const int64_t win = max_seq_len < kernels::kResidual - 1 ? max_seq_len : kernels::kResidual - 1;
  const plan::Plan p = plan::quant_plan(units, omnifmt::body_tokens(max_seq_len), win, plan::kOmniGranule, plan::blocks_per_sm(kernels::kHD),
                                        plan::sm_count());
  kernels::DecodeArgs a;
  st = kernels::plan_decode_args(a, p, fn, q, seq_lens, num_q_heads, cache->num_kv_heads, bh, cache->head_dim, softmax_scale, workspace,
                                 workspace_bytes, err);
  if (st != OSCAR_OK) return st;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const dim3 grid(a.np, static_cast<unsigned>(bh), a.QS / kernels::kQSlots);
  if (cache->bits == 2) {
    constexpr size_t sm = kernels::omni_smem_bytes<2>();
    OSCAR_CUDA_TRY(cudaFuncSetAttribute(kernels::omni_decode_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sm)), err, fn);
    kernels::omni_decode_kernel<2><<<grid, kernels::kWarps * 32, sm, s>>>(cv, a);
  } else {
    constexpr size_t sm = kernels::omni_smem_bytes<4>();
    OSCAR_CUDA_TRY(cudaFuncSetAttribute(kernels::omni_decode_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sm)), err, fn);
    kernels::omni_decode_kernel<4><<<grid, kernels::kWarps * 32, sm, s>>>(cv, a);
  }
  st = api::check_launch(err, fn);
  if (st != OSCAR_OK) return st;
  return kernels::launch_merge(a, kernels::kHD, cache->batch, out, s, err, fn);
}
