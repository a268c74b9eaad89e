// omni/omni_decode.cu: oscar-omni split-KV decode attention (layout oscar/omni_format.h) for every
// (head_dim, bits) of decode/shapes.h (the merge is decode/merge.cu). Head_dim HD, MT = HD / 16 m-tiles.
//
// Design (same skeleton as cov/cov_decode.cu):
//  * Keys: k^_tc = n_t (s_bc code_tc + z_bc) for token t of key block b, channel c. Per block of 32 tokens
//    (one warp chunk) the query is folded with the block's channel scales: B_c = q^_c s_bc as an exact
//    fp16 pair hi + lo (q^ = q scaled by a power of two), and the MMAs run on the raw codes (magic-number
//    fp16 A fragments, as in oscar-cov; lane t holds channels [HD/4 t, HD/4 (t + 1))) against hi and lo.
//    One extra MMA per k-step with row-constant A fragments gives, per query, the magic bias
//    sum_c q^_c s_bc (rows 8-15 = scales) and the zero-point term sum_c q^_c z_bc (rows 0-7 = zero points),
//    so score_t = n_t 2^e (D_t - 1024 sum q^ s + sum q^ z) needs no per-token shuffles.
//  * Values: v^_tc = s_tg code_tc + z_tg with g = c / 32. A lane's PV fragments cover its HD/8 channels
//    [HD/8 g, HD/8 (g + 1)), inside one value group (HD/8 <= 32), so its A fragment (two tokens of one
//    channel) is dequantized in place with one fp16 FMA by the two tokens' fp16 scales (exact operands, one
//    rounding); the weights are fp16 and the zero points enter as sum_t p_t z_tg of the lane's own group,
//    from the same MMA (and the same rounded weights) that sums p_t s_tg for the centring, added after the
//    combine.
//  * Residual tokens (BF16) are served by window blocks with the shared BF16 tile.
//  * Grid: (splits + nwin) x (batch * kv_heads) x (query groups of 8), decode/split_plan.h.
#include "api_util.h"
#include "decode/bf16_tile.cuh"
#include "decode/decode_grid.cuh"
#include "decode/partials.cuh"
#include "decode/shapes.h"
#include "decode/split_plan.h"
#include "omni/omni_kernels.h"
#include "oscar/omni_format.h"

namespace oscar::kernels {
namespace {

using omnifmt::kKeyBlock;
using omnifmt::kResidual;
using omnifmt::kValueGroup;

// One warp chunk = one key block of 32 tokens, staged by cp.async: K codes, V codes, the block's key
// (scale, zero) per channel (thread t's HD/4 channels in a row padded by 16 bytes against bank conflicts),
// the tokens' value (scale, zero) per group, the tokens' norms.
template <int HD, int BITS>
struct OmniStage {
  static constexpr int CH = kKeyBlock;
  static constexpr int CB = HD * BITS / 8;     // code bytes per token row
  static constexpr int NG = HD / kValueGroup;  // value groups per token
  static constexpr int KP_ROW = HD + 16;       // HD/4 key params of 4 bytes + 16
  static constexpr int KP = 2 * CH * CB;       // key params: 4 rows of KP_ROW
  static constexpr int VP = KP + 4 * KP_ROW;   // value params: 32 tokens x NG x 4 B
  static constexpr int KN = VP + CH * NG * 4;  // norms: 32 x 2 B
  static constexpr int BYTES = KN + CH * 2;
  // cp.async stages per warp: 3, but 2 at HD 256 INT4 (3 would not let 2 blocks share an SM's 228 KB)
  static constexpr int STAGES = HD >= 256 && BITS == 4 ? 2 : 3;
  static_assert(BYTES % 16 == 0 && CB % 16 == 0, "stage size");
};

template <int HD, int BITS>
__device__ __forceinline__ void omni_issue(uint8_t* stg, const uint8_t* __restrict__ kc, const uint8_t* __restrict__ vc,
                                           const uint32_t* __restrict__ kp_blk, const uint32_t* __restrict__ vp,
                                           const uint16_t* __restrict__ kn, int64_t base, int lane) {
  using S = OmniStage<HD, BITS>;
  constexpr int R16 = S::CB / 16, KR16 = HD / 16;  // 16-byte pieces per code row, per key-param row
#pragma unroll
  for (int p = lane; p < S::CH * R16; p += 32) {
    const int r = p / R16, cc = p % R16;
    cp_async16(stg + p * 16, kc + (base + r) * S::CB + cc * 16);
    cp_async16(stg + S::CH * S::CB + p * 16, vc + (base + r) * S::CB + cc * 16);
  }
#pragma unroll
  for (int p = lane; p < HD / 4; p += 32) cp_async16(stg + S::KP + (p / KR16) * S::KP_ROW + (p % KR16) * 16, kp_blk + p * 4);
#pragma unroll
  for (int p = lane; p < S::CH * S::NG / 4; p += 32) cp_async16(stg + S::VP + p * 16, vp + base * S::NG + p * 4);
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
// The P V weights are taken as p 2^K, K = 15 - kLazyRescale to start with (p <= 2^kLazyRescale under the
// lazy rescale, decode/warp_state.cuh: p 2^K <= 2^15, finite in fp16), so that weights down to 2^-(14 + K)
// keep fp16's full precision (p itself would go subnormal below 2^-14); acc, ex and off carry the factor and
// the epilogue divides it out. Without the lazy rescale (p <= 1) K = 15.
constexpr bool kOmniLazy = OSCAR_LEVER_LAZY != 0;  // decode/levers.h
constexpr float kOmniPScaleMax = kOmniLazy ? 32768.0f / 256.0f : 32768.0f;
static_assert(kLazyRescale == 8.0f, "kOmniPScaleMax assumes p <= 2^8");
// 2^(BITS pos) of the value codes of m-tile mt, row half rh (fp16 magic positions; at HD 64 the two rows
// of an m-tile can differ).
template <int HD, int BITS>
__host__ __device__ constexpr float omni_vpos_factor(int mt, int rh) {
  return static_cast<float>(1 << (BITS * MagicPos<BITS, 10>::pos(v_pair_code<BITS, HD>(mt, rh))));
}
__device__ __forceinline__ uint32_t half2_const(float x) {
  const uint32_t h = float_to_half_bits(x);
  return h | (h << 16);
}

// One 32-token chunk: qh = thread t's query fragments (q^ 2^(8 - BITS pos)), fsc[j] = 2^(e_j - 8) sl2,
// pw = the warp's current weight factor 2^K (see kOmniPScaleMax; lowered here when a chunk needs it).
template <int HD, int BITS>
__device__ __forceinline__ void omni_chunk(WarpState<HD>& st, float& pw, const uint8_t* stg, const uint32_t (&qh)[Tiles<HD>::MT][2],
                                           const float (&fsc)[2], float cap2, uint16_t* ps, int g, int t) {
  using S = OmniStage<HD, BITS>;
  using M10 = MagicPos<BITS, 10>;
  constexpr int MT = Tiles<HD>::MT, CPT = Tiles<HD>::CPT, NG = S::NG;
  constexpr int CB = S::CB, PW = 16 / BITS, CW = 32 / BITS;
  constexpr int KW = HD * BITS / 128;  // words per lane per token for QK (channels HD/4 t ..)
  constexpr int VB = HD * BITS / 64;   // bytes per lane per token for PV (channels CPT g ..)
  constexpr int VW = VB >= 4 ? VB / 4 : 1;
  const uint8_t* kc = stg;
  const uint8_t* vc = stg + S::CH * CB;
  const uint32_t* kpw = reinterpret_cast<const uint32_t*>(stg + S::KP + t * S::KP_ROW);
  const uint32_t* vpw = reinterpret_cast<const uint32_t*>(stg + S::VP);
  const uint16_t* kn = reinterpret_cast<const uint16_t*>(stg + S::KN);
  const int grp = CPT * g / kValueGroup;  // the value group of this lane's output channels
  // Block query fragments B = q^ * scale as an fp16 pair hi + lo (lo = q^ scale - hi, exact by one HFMA2:
  // q^ and scale are fp16, so the product has at most 22 significant bits): the scores take both, since
  // hi alone (2^-12 relative per channel) moved scores of ~40 log2 units (keys of norm-imbalanced tokens
  // against a far-off zero point) by ~0.02 and an output dominated by two tokens by >1%. The magic bias
  // 1024 sum(q^ scale) and the zero-point term sum(q^ z) come from one MMA with row-constant A fragments
  // (rows 0-7: zero points z 2^(BITS pos); rows 8-15: scales), both with exact products.
  uint32_t bq[MT][2], bl[MT][2];
  float cz[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int m = 0; m < MT / 2; ++m) {  // pairs p = 4m .. 4m + 3 (k-steps 2m, 2m + 1)
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
    for (int r = 0; r < 2; ++r) load_words<KW>(kc + (16 * u + g + 8 * r) * CB + t * KW * 4, kw[r]);
    float c[4] = {0.f, 0.f, 0.f, 0.f}, c2[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int ks = 0; ks < MT; ++ks) {
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
  softmax_step<2, kOmniLazy>(st, s, cap2);
  // P V in fp16. The weights are rounded to fp16 once and the same rounded weights enter the MMA and the
  // zero-point sums. A fragments: fp16(code 2^(BITS pos) s') by one HFMA2 on the magic codes (1024 + code
  // 2^(BITS pos)) with the two tokens' value scales s' and the exact constant -1024 s' (the fp16 scale is
  // used as stored; the 2^(BITS pos) factor is removed per output channel in the epilogue). -1024 s' must
  // stay finite: s' = s 2^-k with k = 0 unless a scale of the chunk reaches 64 (rare; then B carries 2^k,
  // exactly, and the weight factor 2^K drops to at most kOmniPScaleMax 2^-k, the warp's state rescaled with it).
  // One MMA per sub-tile with the value parameters of the lane's own group as A (row g: scales, row g + 8:
  // zero points) sums, over the chunk, p s (cs[0..1], for the centring) and p z (cs[2..3], the zero-point term
  // of the lane's output channels; exact fp16 products, fp32 sums).
  uint32_t sv[2][2], zv[2][2];  // [u][pr]: fp16 scales / zero points of tokens (16u + 2t + 8pr, +1) in group grp
  bool big = false;
#pragma unroll
  for (int u = 0; u < 2; ++u)
#pragma unroll
    for (int pr = 0; pr < 2; ++pr) {
      const int i0 = 16 * u + 2 * t + 8 * pr;
      const uint32_t w0 = vpw[i0 * NG + grp], w1 = vpw[(i0 + 1) * NG + grp];
      sv[u][pr] = prmt(w0, w1, 0x5410);
      zv[u][pr] = prmt(w0, w1, 0x7632);
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
      for (int pr = 0; pr < 2; ++pr) { sv[u][pr] = hmul2_f16(sv[u][pr], down); zv[u][pr] = hmul2_f16(zv[u][pr], down); }
    bscale = half2_const(ldexpf(1.0f, k));
    const float lim = ldexpf(kOmniPScaleMax, -k);  // p 2^K 2^k <= 2^15
    if (pw > lim) {
      const float r = lim / pw;  // a power of two: exact
      pw = lim;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) st.acc[mt][i] *= r;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        st.off[j] *= r;
        st.ex[0][j] *= r;
      }
    }
  }
  float cs[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int u = 0; u < 2; ++u) {
#pragma unroll
    for (int i = 0; i < 4; ++i) s[u][i] *= pw;  // rounded to fp16 once, by p_to_bfrag
    uint32_t b[2];
    p_to_bfrag<true>(ps, g, t, s[u][0], s[u][1], s[u][2], s[u][3], b);
    if (bscale) { b[0] = hmul2_f16(b[0], bscale); b[1] = hmul2_f16(b[1], bscale); }
    const uint32_t neg1024 = half2_const(-1024.0f);
    const uint32_t nz[2] = {hmul2_f16(sv[u][0], neg1024), hmul2_f16(sv[u][1], neg1024)};
    const uint32_t sa[4] = {sv[u][0], zv[u][0], sv[u][1], zv[u][1]};
    mma_f16(cs, sa, b);
    uint32_t vw[4][VW];
#pragma unroll
    for (int r = 0; r < 4; ++r) load_words<VW, (VB < 4)>(vc + (16 * u + 2 * t + (r & 1) + 8 * (r >> 1)) * CB + g * VB, vw[r]);
    uint32_t lo[2][VW], hi[2][VW];
    pair_tokens<VW>(vw, lo, hi);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      uint32_t a[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        a[k] = hfma2_f16(codes_f16x2<BITS>(v_pair_word<BITS, VW, HD>(lo, hi, mt, k), v_pair_code<BITS, HD>(mt, k)), sv[u][k >> 1], nz[k >> 1]);
      mma_f16(st.acc[mt], a, b);
    }
  }
  // Keep the accumulators centred: move the chunk's mid-code offset mid * sum(p * s) (times the channel's
  // 2^(BITS pos)) from acc into st.off (an accumulator growing by it over a long split loses the output
  // to the tensor cores' fp32 accumulation; see cov/cov_decode.cu's int_chunk).
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) st.acc[mt][i] = fmaf(-mid_code<BITS>() * omni_vpos_factor<HD, BITS>(mt, i >> 1), cs[i & 1], st.acc[mt][i]);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    st.off[j] = fmaf(mid_code<BITS>(), cs[j], st.off[j]);
    st.ex[0][j] += cs[2 + j];
  }
}

// Query fragments for the omni body: thread t holds channels [HD/4 t, HD/4 (t + 1)) of query slot g (pairs
// as in the oscar-cov kernel), scaled by 2^(-e) with e the slot's exponent (|q| < 2^e) and pre-divided by
// the codes' magic position factor.
template <int HD, int BITS>
__device__ __forceinline__ void load_q_omni(const uint16_t* qrow, bool live, int t, uint32_t (&qh)[Tiles<HD>::MT][2], int& e) {
  constexpr int PW = 16 / BITS, CW = 32 / BITS, CH = HD / 4;
  float amax = 0.f;
#pragma unroll
  for (int c = 0; c < CH; ++c) amax = fmaxf(amax, live ? fabsf(bf16f(qrow[CH * t + c])) : 0.f);
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  frexpf(amax, &e);  // amax = m 2^e, m in [0.5, 1); e = 0 for amax = 0
#pragma unroll
  for (int ks = 0; ks < Tiles<HD>::MT; ++ks)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int p = 2 * ks + h;
      const int ch0 = CH * t + (p / PW) * CW + p % PW, ch1 = ch0 + PW;
      const int sh = 8 - e - BITS * MagicPos<BITS, 10>::pos(p % PW);
      const float a = live ? ldexpf(bf16f(qrow[ch0]), sh) : 0.f, b = live ? ldexpf(bf16f(qrow[ch1]), sh) : 0.f;
      qh[ks][h] = static_cast<uint32_t>(__half_as_ushort(__float2half_rn(a))) |
                  (static_cast<uint32_t>(__half_as_ushort(__float2half_rn(b))) << 16);
    }
}

template <int HD, int BITS>
constexpr size_t omni_smem_bytes() {
  using S = OmniStage<HD, BITS>;
  constexpr size_t stages = static_cast<size_t>(kWarps) * S::STAGES * S::BYTES;
  return stages > sizeof(CombineSmem<HD>) ? stages : sizeof(CombineSmem<HD>);
}

// blockIdx.x = split (>= nsplit: the BF16 residual block), blockIdx.y = b * Hkv + h, blockIdx.z = query group.
template <int HD, int BITS>
__global__ void __launch_bounds__(kWarps * 32, plan::blocks_per_sm(HD)) omni_decode_kernel(OmniView c, DecodeArgs a) {
  constexpr int MT = Tiles<HD>::MT;
  using S = OmniStage<HD, BITS>;
  constexpr int kStages = S::STAGES;
  __shared__ __align__(16) uint16_t ps_all[kWarps][16 * 8];
  extern __shared__ __align__(16) uint8_t dyn_smem[];
  CombineSmem<HD>& cs = *reinterpret_cast<CombineSmem<HD>*>(dyn_smem);
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t bh = blockIdx.y;
  const int b = static_cast<int>(bh / c.Hkv), h = static_cast<int>(bh % c.Hkv);
  const int split = blockIdx.x;
  const int64_t L = max(0, a.lens[b]);
  const int64_t nb = omnifmt::body_tokens(L);
  const QueryGroup qg = query_group(a);
  const uint16_t* qrow = query_row<HD>(a, b, h, qg, g);
  const bool qlive = g < qg.nq;
  uint16_t* ps = ps_all[warp];
  WarpState<HD> st;
  state_init(st);
  if (split >= a.nsplit) {
    uint32_t qb[MT][2];
    load_q_bf16<HD>(qrow, qlive, t, qb);
    const int64_t nres = L - nb;
    const uint16_t* kr = c.kr + bh * kResidual * HD;
    const uint16_t* vr = c.vr + bh * kResidual * HD;
    for (int64_t base = (split - a.nsplit) * (kWarps * 16) + warp * 16; base < nres; base += a.nwin * (kWarps * 16)) {
      const int n = static_cast<int>(min64(16, nres - base));
      bf16_tile<HD>(st, kr, vr, [&](int i) { return base + i; }, n, qb, a.sl2, a.cap2, ps, g, t);
    }
    __syncthreads();
    block_partial_bf16<HD>(st, a, qg, bh, split, cs, warp, g, t);
    return;
  }
  uint32_t qh[MT][2];
  int e;
  load_q_omni<HD, BITS>(qrow, qlive, t, qh, e);
  float pw = kOmniPScaleMax;
  const float fsc[2] = {ldexpf(a.sl2, __shfl_sync(0xffffffffu, e, (2 * t) * 4) - 8),
                        ldexpf(a.sl2, __shfl_sync(0xffffffffu, e, (2 * t + 1) * 4) - 8)};
  const uint8_t* kc = c.kc + bh * c.cap * S::CB;
  const uint8_t* vc = c.vc + bh * c.cap * S::CB;
  const uint32_t* kp = c.kp + bh * (c.cap / kKeyBlock) * HD;
  const uint32_t* vp = c.vp + bh * c.cap * S::NG;
  const uint16_t* kn = c.kn + static_cast<int64_t>(b) * c.cap;
  uint8_t* wst = dyn_smem + warp * (kStages * S::BYTES);
  const int64_t start = split * a.split_len, end = min64(nb, start + a.split_len);
  constexpr int64_t step = kWarps * S::CH;
  int64_t nxt = start + warp * S::CH;
#pragma unroll
  for (int sidx = 0; sidx < kStages - 1; ++sidx) {
    if (nxt < end) omni_issue<HD, BITS>(wst + sidx * S::BYTES, kc, vc, kp + (nxt / kKeyBlock) * HD, vp, kn, nxt, lane);
    cp_async_commit();
    nxt += step;
  }
  int stage = 0;
  for (int64_t base = start + warp * S::CH; base < end; base += step) {
    int is = stage + kStages - 1;
    if (is >= kStages) is -= kStages;
    if (nxt < end) omni_issue<HD, BITS>(wst + is * S::BYTES, kc, vc, kp + (nxt / kKeyBlock) * HD, vp, kn, nxt, lane);
    cp_async_commit();
    nxt += step;
    cp_async_wait<kStages - 1>();
    __syncwarp();
    omni_chunk<HD, BITS>(st, pw, wst + stage * S::BYTES, qh, fsc, a.cap2, ps, g, t);
    __syncwarp();
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages are reused as CombineSmem
#pragma unroll
  for (int j = 0; j < 2; ++j) st.l[j] = sum_over_g(st.l[j]);
  const float ipw = 1.0f / pw;  // exact (a power of two)
  // st.ex[0] already sums p z over the split for this thread's value group (the MMA rows of omni_chunk), st.off the
  // mid-code offset: both whole sums, not per-row parts
  block_partial<HD>(
      st, [&](int mt, int rh, int j, float v) { return fmaf(v, 1.0f / omni_vpos_factor<HD, BITS>(mt, rh), st.ex[0][j] + st.off[j]) * ipw; },
      a, qg, bh, split, cs, warp, g, t);
}

}  // namespace

template <int HD, int BITS>
oscar_status omni_decode(const OmniView& c, const DecodeArgs& a, const Launch& l) {
  return launch_decode_grid(omni_decode_kernel<HD, BITS>, omni_smem_bytes<HD, BITS>(), c, a, l);
}

#define OSCAR_OMNI_DECODE_INSTANCE(HD, BITS) template oscar_status omni_decode<HD, BITS>(const OmniView&, const DecodeArgs&, const Launch&);
OSCAR_KV_SHAPES(OSCAR_OMNI_DECODE_INSTANCE)

}  // namespace oscar::kernels
