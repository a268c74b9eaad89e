// cov_cache.cu: oscar-cov quantized KV cache (layout: oscar/cov_format.h): prefill quantize,
// decode append with window demotion, split-KV decode attention over INT2/INT4 bodies with BF16
// sink/recent windows, the BF16 baseline decode, and the exact log-sum-exp merge.
//
// Decode attention design (head_dim 128, G = Hq/Hkv <= 8 query heads per KV head, one warp = one
// online-softmax state for all G queries, so every K/V byte is loaded once per KV head):
//  * S^T = K Q^T on tensor cores (mma.m16n8k16: 16 tokens x 8 query slots x 16 channels). For the
//    packed body the A fragment is built straight from the codes: a 32-bit word holds 16 (INT2) or 8
//    (INT4) codes; ((w >> b*i) & mask) | 0x6400 gives fp16 (1024 + code) pairs, minus 1024 = exact
//    codes (see codes_f16x2: the 1024 bias is removed after the MMA, shifted positions are undone by a
//    pre-scaled query). Channels are visited in a permuted order that makes each thread's fragment come
//    from contiguous bytes; the query fragment uses the same permutation, so the dot product is unchanged.
//    score = (scale_k * dot(q, codes) + zero_k * sum(q)) * softmax_scale * log2(e).
//  * O^T = V^T P'^T, P' = p * scale_v (bf16), plus Z = sum p * zero_v added to every channel; the
//    V^T fragment pairs two tokens of one channel via PRMT, then the same magic-number dequant (bf16,
//    128 + code). P' goes through 256 bytes of shared memory per warp to change fragment layout.
//  * BF16 sink/recent tokens (and the whole BF16 baseline) use bf16 MMAs on the stored rows directly.
//  * Each warp keeps (m, l, acc) in fp32; the block's warps are combined exactly in shared memory and
//    each block writes one partial (split); a second kernel merges the splits of a (sequence, query
//    head) exactly: o = sum_p 2^(m_p - M) o_p / sum_p 2^(m_p - M) l_p (log2 domain throughout).
//  * Body loads: each warp streams its chunks (64 tokens INT2 / 32 tokens INT4: codes + scale/zero, all
//    contiguous in memory) into its own shared-memory ring with cp.async, kStages chunks ahead, and
//    reads the MMA fragments from there, so loads of later chunks overlap the math of the current one.
//  * Grid: (splits + nwin) x (batch * kv_heads); splits >= `nsplit` share the BF16 windows, the others
//    equal slices of the body, sized so one decode step is about one wave of resident blocks (see
//    plan_quant); sequences shorter than a slice leave empty partials (m = -inf, l = 0). The merge is
//    launched with programmatic dependent launch so its launch overlaps the decode grid.
#include "decode_common.cuh"

namespace oscar::kernels {
namespace {

// ---------------------------------------------------------------------------------------------
// Quantization (shared by prefill and append): a half-warp holds one 128-channel row, 8 channels
// per lane. Returns the lane's packed code bits and the (scale, zero) fp16 pair.
template <int BITS>
__device__ __forceinline__ void quantize_row16(const float (&x)[8], float clip, uint32_t& code_bits,
                                               uint32_t& params) {
  float mn = x[0], mx = x[0];
#pragma unroll
  for (int i = 1; i < 8; ++i) { mn = fminf(mn, x[i]); mx = fmaxf(mx, x[i]); }
#pragma unroll
  for (int o = 1; o < 16; o <<= 1) {
    mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o, 16));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o, 16));
  }
  // clip * min and clip * max rounded once each (no FMA), exactly as the CPU computes them.
  const float lo = __fmul_rn(clip, mn), hi = __fmul_rn(clip, mx);
  const GroupParams p = group_params(lo, hi, BITS, false, 1.0f, ScaleDtype::F16);
  uint32_t bits = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i)
    bits |= static_cast<uint32_t>(quantize_value(x[i], p, BITS, false, Rounding::HalfEven)) << (BITS * i);
  code_bits = bits;
  params = static_cast<uint32_t>(float_to_half_bits(p.scale)) | (static_cast<uint32_t>(float_to_half_bits(p.zero)) << 16);
}

template <int BITS>
__device__ __forceinline__ void store_codes(uint8_t* row, int lane16, uint32_t bits) {
  if constexpr (BITS == 2) reinterpret_cast<uint16_t*>(row)[lane16] = static_cast<uint16_t>(bits);
  else reinterpret_cast<uint32_t*>(row)[lane16] = bits;
}

struct CacheView {
  int B, Hkv, S, W;
  int64_t cap;
  float clip_k, clip_v;
  uint16_t *ks, *vs, *kr, *vr;
  uint8_t *kc, *vc;
  uint32_t *kp, *vp;
};

// Prefill: a half-warp per (bh, t) row; K and V both handled by it.
template <int BITS>
__global__ void __launch_bounds__(256) kv_prefill_kernel(CacheView c, const uint16_t* __restrict__ k,
                                                          const uint16_t* __restrict__ v,
                                                          const int32_t* __restrict__ lens, int max_len) {
  constexpr int CB = kHD * BITS / 8;
  const int lane16 = threadIdx.x & 15;
  const int64_t total = static_cast<int64_t>(c.B) * c.Hkv * max_len;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * (blockDim.x / 16);
  for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 16); row0 < total; row0 += stride) {
    // every lane of the warp runs the shuffles; rows past the end are computed on a clamped row
    int64_t row = row0 + (threadIdx.x >> 4);
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
    const uint4 kin = reinterpret_cast<const uint4*>(k + row * kHD)[lane16];
    const uint4 vin = reinterpret_cast<const uint4*>(v + row * kHD)[lane16];
    float kx[8], vx[8];
    bf16x8_to_float(kin, kx);
    bf16x8_to_float(vin, vx);
    uint32_t kbits, kpar, vbits, vpar;
    quantize_row16<BITS>(kx, c.clip_k, kbits, kpar);
    quantize_row16<BITS>(vx, c.clip_v, vbits, vpar);
    if (!live) continue;
    const int64_t nb = covfmt::body_tokens(len, c.S, c.W);
    if (t < c.S) {
      reinterpret_cast<uint4*>(c.ks + (bh * c.S + t) * kHD)[lane16] = kin;
      reinterpret_cast<uint4*>(c.vs + (bh * c.S + t) * kHD)[lane16] = vin;
    } else if (t - c.S < nb) {
      const int64_t bi = bh * c.cap + (t - c.S);
      store_codes<BITS>(c.kc + bi * CB, lane16, kbits);
      store_codes<BITS>(c.vc + bi * CB, lane16, vbits);
      if (lane16 == 0) { c.kp[bi] = kpar; c.vp[bi] = vpar; }
    } else {
      const int64_t slot = bh * c.W + static_cast<int64_t>(static_cast<uint32_t>(t - c.S) % static_cast<uint32_t>(c.W));
      reinterpret_cast<uint4*>(c.kr + slot * kHD)[lane16] = kin;
      reinterpret_cast<uint4*>(c.vr + slot * kHD)[lane16] = vin;
    }
  }
}

// Append: one warp per bh; lanes 0-15 handle K, lanes 16-31 V.
template <int BITS>
__global__ void kv_append_kernel(CacheView c, const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
                                 const int32_t* __restrict__ lens) {
  constexpr int CB = kHD * BITS / 8;
  const int64_t bh = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (bh >= static_cast<int64_t>(c.B) * c.Hkv) return;  // whole warp
  const int lane16 = threadIdx.x & 15;
  const bool is_v = (threadIdx.x & 16) != 0;
  const int b = static_cast<int>(bh / c.Hkv);
  const int64_t t = lens[b];
  if (t < 0 || t >= c.S + c.cap + c.W) return;  // whole warp (host checked the bound)
  const uint16_t* in = (is_v ? v : k) + bh * kHD;
  const uint4 nin = reinterpret_cast<const uint4*>(in)[lane16];
  if (t < c.S) {
    reinterpret_cast<uint4*>((is_v ? c.vs : c.ks) + (bh * c.S + t) * kHD)[lane16] = nin;
    return;
  }
  uint4* slot = reinterpret_cast<uint4*>((is_v ? c.vr : c.kr) + (bh * c.W + (t - c.S) % c.W) * kHD) + lane16;
  if (t - c.S >= c.W) {  // demote token t - W (same ring slot) into body index t - W - S
    const uint4 old = *slot;
    float x[8];
    bf16x8_to_float(old, x);
    uint32_t bits, par;
    quantize_row16<BITS>(x, is_v ? c.clip_v : c.clip_k, bits, par);
    const int64_t bi = bh * c.cap + (t - c.W - c.S);
    store_codes<BITS>((is_v ? c.vc : c.kc) + bi * CB, lane16, bits);
    if (lane16 == 0) (is_v ? c.vp : c.kp)[bi] = par;
  }
  *slot = nin;
}

// One pipeline stage of a warp: CH rows of K codes, CH rows of V codes, CH K params, CH V params.
template <int BITS>
struct IntStage {
  static constexpr int CH = int_chunk_len<BITS>();
  static constexpr int CB = kHD * BITS / 8;
  static constexpr int BYTES = CH * (2 * CB + 8);
};

// Issues the copies of body tokens [base, base + n) (n in [1, CH]) into a stage; rows >= n repeat row
// n - 1 (their scores are masked), so every later fragment read stays in bounds and finite.
template <int BITS>
__device__ __forceinline__ void issue_chunk(uint8_t* stg, const uint8_t* __restrict__ kc, const uint8_t* __restrict__ vc,
                                            const uint32_t* __restrict__ kp, const uint32_t* __restrict__ vp, int64_t base,
                                            int n, int lane) {
  using S = IntStage<BITS>;
  constexpr int R16 = S::CB / 16;  // 16-byte pieces per row
#pragma unroll
  for (int p = lane; p < S::CH * R16; p += 32) {
    const int r = min(p / R16, n - 1), c = p % R16;
    cp_async16(stg + p * 16, kc + (base + r) * S::CB + c * 16);
    cp_async16(stg + S::CH * S::CB + p * 16, vc + (base + r) * S::CB + c * 16);
  }
#pragma unroll
  for (int p = lane; p < S::CH; p += 32) {
    const int r = min(p, n - 1);
    cp_async4(stg + 2 * S::CH * S::CB + p * 4, kp + base + r);
    cp_async4(stg + 2 * S::CH * S::CB + S::CH * 4 + p * 4, vp + base + r);
  }
}

// Packed-body chunk from a shared-memory stage: n valid tokens (n in [1, CH]).
template <int BITS>
__device__ __forceinline__ void int_chunk(WarpState& st, const uint8_t* stg, int n, const uint32_t (&qf)[8][2],
                                          const float (&qsum)[2], const float (&qbias)[2], float sl2, uint16_t* ps, int g,
                                          int t) {
  using S = IntStage<BITS>;
  constexpr int SUB = S::CH / 16;
  constexpr int CB = S::CB;           // bytes per token row
  constexpr int KW = BITS;            // words per thread per token for QK (CB / 4 / 4)
  constexpr int VW = BITS / 2;        // words per thread per token for PV (CB / 8 / 4)
  constexpr int PW = 16 / BITS;       // code pairs per word
  constexpr float kMid = mid_code<BITS>();
  const uint8_t* kc = stg;
  const uint8_t* vc = stg + S::CH * CB;
  const uint32_t* kp = reinterpret_cast<const uint32_t*>(stg + 2 * S::CH * CB);
  const uint32_t* vp = kp + S::CH;
  // Fragments are read from shared memory right where they are used (short live ranges).
  auto load_k = [&](int u, uint32_t (&kw)[2][KW], uint32_t (&kpar)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = 16 * u + g + 8 * r;
      const uint32_t* src = reinterpret_cast<const uint32_t*>(kc + i * CB) + t * KW;
      if constexpr (KW == 2) {
        const uint2 x = *reinterpret_cast<const uint2*>(src);
        kw[r][0] = x.x; kw[r][1] = x.y;
      } else {
        const uint4 x = *reinterpret_cast<const uint4*>(src);
        kw[r][0] = x.x; kw[r][1] = x.y; kw[r][2] = x.z; kw[r][3] = x.w;
      }
      kpar[r] = kp[i];
    }
  };
  auto load_v = [&](int u, uint32_t (&vw)[4][VW], uint32_t (&vpar)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) vpar[r] = vp[16 * u + g + 8 * r];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = 16 * u + 2 * t + (r & 1) + 8 * (r >> 1);
      const uint32_t* src = reinterpret_cast<const uint32_t*>(vc + i * CB) + g * VW;
      if constexpr (VW == 1) {
        vw[r][0] = *src;
      } else {
        const uint2 x = *reinterpret_cast<const uint2*>(src);
        vw[r][0] = x.x; vw[r][1] = x.y;
      }
    }
  };
  // Scores.
  float s[SUB][4];
#pragma unroll
  for (int u = 0; u < SUB; ++u) {
    uint32_t kw[2][KW], kpar[2];
    load_k(u, kw, kpar);
    float c[4] = {0.f, 0.f, 0.f, 0.f};
#if OSCAR_KV_QK_SPLIT
    float c2[4] = {0.f, 0.f, 0.f, 0.f};
#endif
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
      const int q0 = 2 * ks, q1 = 2 * ks + 1;
      const uint32_t a[4] = {codes_f16x2<BITS>(kw[0][q0 / PW], q0 % PW), codes_f16x2<BITS>(kw[1][q0 / PW], q0 % PW),
                             codes_f16x2<BITS>(kw[0][q1 / PW], q1 % PW), codes_f16x2<BITS>(kw[1][q1 / PW], q1 % PW)};
#if OSCAR_KV_QK_SPLIT
      if (ks & 1) mma_f16(c2, a, qf[ks]);
      else
#endif
      mma_f16(c, a, qf[ks]);
    }
#if OSCAR_KV_QK_SPLIT
#pragma unroll
    for (int i = 0; i < 4; ++i) c[i] += c2[i];
#endif
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float ksc = half_lo(kpar[r]), kz = half_hi(kpar[r]);
      const bool valid = 16 * u + g + 8 * r < n;
#pragma unroll
      for (int j = 0; j < 2; ++j)
        s[u][2 * r + j] = valid ? (ksc * (c[2 * r + j] - qbias[j]) + kz * qsum[j]) * sl2 : -INFINITY;
    }
  }
  softmax_step<SUB>(st, s);
  // P V. The value A fragments are 128 + code * 2^(BITS*pos); pc sums this chunk's P' (an MMA with ones).
  float pc[4] = {0.f, 0.f, 0.f, 0.f};
  const uint32_t ones[4] = {0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u};  // bf16 1.0
#pragma unroll
  for (int u = 0; u < SUB; ++u) {
    uint32_t vw[4][VW], vpar[2];
    load_v(u, vw, vpar);
    float pp[4];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // ex[1] sums p * scale_v in fp32, not the rounded P': the epilogue adds kMid * ex[1] + ex[0], so the
      // codes see P' only through (code - kMid) and the weights' rounding stays off the mean code.
      const float vsc = half_lo(vpar[r]), vz = half_hi(vpar[r]);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        st.ex[0][j] += s[u][2 * r + j] * vz;
        pp[2 * r + j] = __bfloat162float(__float2bfloat16_rn(s[u][2 * r + j] * vsc));
        st.ex[1][j] += s[u][2 * r + j] * vsc;
      }
    }
    uint32_t b[2];
    p_to_bfrag(ps, g, t, pp[0], pp[1], pp[2], pp[3], b);
    mma_bf16(pc, ones, b);
    uint32_t lo[2][VW], hi[2][VW];
    pair_tokens<VW>(vw, lo, hi);
#pragma unroll
    for (int mt = 0; mt < 8; ++mt) {
      uint32_t a[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) a[k] = codes_bf16x2<BITS>(v_pair_word<BITS, VW>(lo, hi, mt, k), v_pair_code<BITS>(mt, k));
      mma_bf16(st.acc[mt], a, b);
    }
  }
  // Keep the accumulators centred: take this chunk's magic and mid-code offset (128 + kMid * 2^(BITS*pos))
  // * sum(P') out of them. An accumulator that grows by that offset over a long split loses the output to
  // the tensor cores' fp32 accumulation (relative error 0.5-0.7 at 32K tokens per split on zero-mean values,
  // BENCHMARKS.md); the epilogue adds kMid * sum(p * scale_v) back from ex[1] (exact weights, see above).
#pragma unroll
  for (int mt = 0; mt < 8; ++mt) {
    const float off = 128.0f + kMid * static_cast<float>(1 << (BITS * MagicPos<BITS, 7>::pos(mt % (16 / BITS))));
#pragma unroll
    for (int i = 0; i < 4; ++i) st.acc[mt][i] = fmaf(-off, pc[i], st.acc[mt][i]);
  }
}

// Query fragments. INT path (fp16): pair index p of thread t maps to channels ch0 = 32t + (p/PW)*CW +
// p%PW and ch0 + PW. BF16 path: channels 32t + 2p, +1.
template <int BITS>
__device__ __forceinline__ void load_q_int(const uint16_t* qrow, bool live, int t, uint32_t (&qf)[8][2], float& qpart,
                                           float& qbias) {
  constexpr int PW = 16 / BITS, CW = 32 / BITS;
  qpart = 0.f;
  qbias = 0.f;
#pragma unroll
  for (int ks = 0; ks < 8; ++ks)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int p = 2 * ks + h;
      const int ch0 = 32 * t + (p / PW) * CW + p % PW, ch1 = ch0 + PW;
      // codes of pair p % PW arrive multiplied by 2^(BITS*pos): pre-divide the query (exact)
      const float inv = 1.0f / static_cast<float>(1 << (BITS * MagicPos<BITS, 10>::pos(p % PW)));
      const __half a0 = __float2half_rn(live ? bf16f(qrow[ch0]) : 0.f);
      const __half b0 = __float2half_rn(live ? bf16f(qrow[ch1]) : 0.f);
      qpart += __half2float(a0) + __half2float(b0);
      const __half a = __float2half_rn(__half2float(a0) * inv), b = __float2half_rn(__half2float(b0) * inv);
      qbias += 1024.0f * (__half2float(a) + __half2float(b));
      qf[ks][h] = static_cast<uint32_t>(__half_as_ushort(a)) | (static_cast<uint32_t>(__half_as_ushort(b)) << 16);
    }
}
// Quantized-cache decode. blockIdx.x = split (split == nsplit: the BF16 sink + recent windows),
// blockIdx.y = b * Hkv + h.
template <int BITS>
constexpr size_t decode_smem_bytes() {
  return kWarps * kStages * IntStage<BITS>::BYTES > sizeof(CombineSmem) ? kWarps * kStages * IntStage<BITS>::BYTES
                                                                         : sizeof(CombineSmem);
}
template <int BITS>
__global__ void __launch_bounds__(kWarps * 32, BITS == 2 ? OSCAR_KV_MIN_BLOCKS_INT2 : OSCAR_KV_MIN_BLOCKS_INT4) kv_decode_kernel(CacheView c, DecodeArgs a) {
  __shared__ __align__(16) uint16_t ps_all[kWarps][16 * 8];
  extern __shared__ __align__(16) uint8_t dyn_smem[];  // per-warp cp.async stages, then (aliased) CombineSmem
  CombineSmem& cs = *reinterpret_cast<CombineSmem*>(dyn_smem);
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");  // let the merge grid get resident early
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t bh = blockIdx.y;
  const int b = static_cast<int>(bh / c.Hkv), h = static_cast<int>(bh % c.Hkv);
  const int split = blockIdx.x;
  const int64_t L = max(0, a.lens[b]);
  const int64_t nb = covfmt::body_tokens(L, c.S, c.W);
  const uint16_t* qrow = a.q + (static_cast<int64_t>(b) * a.Hq + h * a.G + min(g, a.G - 1)) * kHD;
  const bool qlive = g < a.G;
  uint16_t* ps = ps_all[warp];
  WarpState st;
  state_init(st);
  if (split >= a.nsplit) {
    uint32_t qb[8][2];
    load_q_bf16(qrow, qlive, t, qb);
    const int64_t ns = min64(L, c.S);
    const int64_t nbf = L - nb;  // sink + recent tokens
    const uint16_t* ks = c.ks + bh * c.S * kHD;
    const uint16_t* vs = c.vs + bh * c.S * kHD;
    const uint16_t* kr = c.kr + bh * c.W * kHD;
    const uint16_t* vr = c.vr + bh * c.W * kHD;
    for (int64_t base = (split - a.nsplit) * (kWarps * 16) + warp * 16; base < nbf; base += a.nwin * (kWarps * 16)) {
      const int n = static_cast<int>(min64(16, nbf - base));
      if (base + n <= ns) {
        bf16_tile(st, ks, vs, [&](int i) { return base + i; }, n, qb, a.sl2, ps, g, t);
      } else if (base >= ns) {
        const int64_t t0 = c.S + nb + (base - ns);  // absolute token of logical index base
        bf16_tile(st, kr, vr, [&](int i) { return (t0 + i - c.S) % c.W; }, n, qb, a.sl2, ps, g, t);
      } else {  // tile straddles sink and recent (only when sink is not a multiple of 16)
        const int nsk = static_cast<int>(ns - base);
        bf16_tile(st, ks, vs, [&](int i) { return base + min(i, nsk - 1); }, nsk, qb, a.sl2, ps, g, t);
        const int64_t t0 = c.S + nb;
        if (n > nsk) bf16_tile(st, kr, vr, [&](int i) { return (t0 + i - c.S) % c.W; }, n - nsk, qb, a.sl2, ps, g, t);
      }
    }
  } else {
    uint32_t qf[8][2];
    float qpart, qb;
    load_q_int<BITS>(qrow, qlive, t, qf, qpart, qb);
    qpart += __shfl_xor_sync(0xffffffffu, qpart, 1);
    qpart += __shfl_xor_sync(0xffffffffu, qpart, 2);  // sum(q) of query slot g
    qb += __shfl_xor_sync(0xffffffffu, qb, 1);
    qb += __shfl_xor_sync(0xffffffffu, qb, 2);
    const float qsum[2] = {__shfl_sync(0xffffffffu, qpart, (2 * t) * 4), __shfl_sync(0xffffffffu, qpart, (2 * t + 1) * 4)};
    const float qbias[2] = {__shfl_sync(0xffffffffu, qb, (2 * t) * 4), __shfl_sync(0xffffffffu, qb, (2 * t + 1) * 4)};
    constexpr int CB = kHD * BITS / 8;
    const uint8_t* kc = c.kc + bh * c.cap * CB;
    const uint8_t* vc = c.vc + bh * c.cap * CB;
    const uint32_t* kp = c.kp + bh * c.cap;
    const uint32_t* vp = c.vp + bh * c.cap;
    constexpr int CH = IntStage<BITS>::CH, SB = IntStage<BITS>::BYTES;
    uint8_t* wst = dyn_smem + warp * (kStages * SB);
    const int64_t start = split * a.split_len, end = min(nb, start + a.split_len);
    constexpr int64_t step = kWarps * CH;
    int64_t nxt = start + warp * CH;  // next chunk to issue
#pragma unroll
    for (int sidx = 0; sidx < kStages - 1; ++sidx) {
      if (nxt < end) issue_chunk<BITS>(wst + sidx * SB, kc, vc, kp, vp, nxt, static_cast<int>(min64(CH, end - nxt)), lane);
      cp_async_commit();
      nxt += step;
    }
    int stage = 0;
    for (int64_t base = start + warp * CH; base < end; base += step) {
      int is = stage + kStages - 1;
      if (is >= kStages) is -= kStages;
      if (nxt < end) issue_chunk<BITS>(wst + is * SB, kc, vc, kp, vp, nxt, static_cast<int>(min64(CH, end - nxt)), lane);
      cp_async_commit();
      nxt += step;
      cp_async_wait<kStages - 1>();
      __syncwarp();
      int_chunk<BITS>(st, wst + stage * SB, static_cast<int>(min64(CH, end - base)), qf, qsum, qbias, a.sl2, ps, g, t);
      __syncwarp();
      stage = stage + 1 == kStages ? 0 : stage + 1;
    }
    cp_async_wait<0>();
  }
  __syncthreads();  // the stages are reused as CombineSmem
  if (split >= a.nsplit) {
    block_partial_bf16(st, a, bh, split, cs, warp, g, t);
  } else {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      st.l[j] = sum_over_g(st.l[j]);
      st.ex[0][j] = sum_over_g(st.ex[0][j]);
      st.ex[1][j] = sum_over_g(st.ex[1][j]);
    }
    // PV: acc holds sum(P' (code - mid)) * 2^(BITS*pos) (int_chunk took the offsets out): undo the code
    // shift, add back mid * sum(p * scale_v) and sum(p * zero_v).
    block_partial(
        st,
        [&](int mt, int j, float v) {
          const float f = 1.0f / static_cast<float>(1 << (BITS * MagicPos<BITS, 7>::pos(mt % (16 / BITS))));
          return v * f + (mid_code<BITS>() * st.ex[1][j] + st.ex[0][j]);
        },
        a, bh, split, cs, warp, g, t);
  }
}

// BF16 baseline: k, v [BH][cap][kHD]; blockIdx.x = split.
__global__ void __launch_bounds__(kWarps * 32) bf16_decode_kernel(const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
                                                                  int64_t cap, DecodeArgs a) {
  __shared__ __align__(16) uint16_t ps_all[kWarps][16 * 8];
  __shared__ CombineSmem cs;
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t bh = blockIdx.y;
  const int b = static_cast<int>(bh / a.Hkv), h = static_cast<int>(bh % a.Hkv);
  const int64_t L = min64(max(0, a.lens[b]), cap);
  const uint16_t* qrow = a.q + (static_cast<int64_t>(b) * a.Hq + h * a.G + min(g, a.G - 1)) * kHD;
  uint32_t qb[8][2];
  load_q_bf16(qrow, g < a.G, t, qb);
  WarpState st;
  state_init(st);
  const uint16_t* kb = k + bh * cap * kHD;
  const uint16_t* vb = v + bh * cap * kHD;
  const int64_t start = blockIdx.x * a.split_len, end = min(L, start + a.split_len);
  for (int64_t base = start + warp * kBf16Chunk; base < end; base += kWarps * kBf16Chunk) {
    const int n = static_cast<int>(min64(kBf16Chunk, end - base));
    bf16_tile(st, kb, vb, [&](int i) { return base + i; }, n, qb, a.sl2, ps_all[warp], g, t);
  }
  block_partial_bf16(st, a, bh, blockIdx.x, cs, warp, g, t);
}

}  // namespace

// Host-side dispatch helpers (the one place where bits are dispatched).
oscar_status check_cache(const oscar_cov_cache* c, const char* fn, oscar_error* err, CacheView& v) {
  if (!c) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
  if (c->head_dim != kHD)
    return api::fail(err, OSCAR_ERR_UNSUPPORTED, "%s: head_dim=%d unsupported (only 128 is compiled)", fn, c->head_dim);
  if (c->bits != 2 && c->bits != 4)
    return api::fail(err, OSCAR_ERR_UNSUPPORTED, "%s: bits=%d unsupported (2 or 4)", fn, c->bits);
  if (c->batch <= 0 || c->num_kv_heads <= 0)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch=%d num_kv_heads=%d must be positive", fn, c->batch, c->num_kv_heads);
  if (c->sink < 0 || c->recent <= 0 || c->body_capacity < 0)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: sink=%d recent=%d body_capacity=%lld invalid (sink >= 0, recent > 0)",
                     fn, c->sink, c->recent, (long long)c->body_capacity);
  const void* ptrs[8] = {c->k_sink, c->v_sink, c->k_recent, c->v_recent, c->k_codes, c->v_codes, c->k_params, c->v_params};
  const char* names[8] = {"k_sink", "v_sink", "k_recent", "v_recent", "k_codes", "v_codes", "k_params", "v_params"};
  for (int i = 0; i < 8; ++i) {
    const bool needed = (i < 2 && c->sink > 0) || (i >= 2 && i < 4) || (i >= 4 && c->body_capacity > 0);
    if (needed && !ptrs[i]) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: cache->%s is NULL", fn, names[i]);
    if (ptrs[i] && !api::aligned(ptrs[i], 16))
      return api::fail(err, OSCAR_ERR_MISALIGNED, "%s: cache->%s %p is not 16-byte aligned", fn, names[i], ptrs[i]);
  }
  v.B = c->batch; v.Hkv = c->num_kv_heads; v.S = c->sink; v.W = c->recent; v.cap = c->body_capacity;
  v.clip_k = c->clip_k; v.clip_v = c->clip_v;
  v.ks = static_cast<uint16_t*>(c->k_sink); v.vs = static_cast<uint16_t*>(c->v_sink);
  v.kr = static_cast<uint16_t*>(c->k_recent); v.vr = static_cast<uint16_t*>(c->v_recent);
  v.kc = static_cast<uint8_t*>(c->k_codes); v.vc = static_cast<uint8_t*>(c->v_codes);
  v.kp = static_cast<uint32_t*>(c->k_params); v.vp = static_cast<uint32_t*>(c->v_params);
  return OSCAR_OK;
}


int decode_parts(int batch, int kv_heads, int32_t max_len, bool quantized, int S, int W, int& nsplit, int64_t& split_len,
                 int& nwin) {
  const int64_t bh = static_cast<int64_t>(batch) * kv_heads;
  if (quantized) {
    const int64_t sw = static_cast<int64_t>(S) + W, win = max_len < sw ? max_len : sw;
    plan_quant(bh, body_max(max_len, S, W), win, kQuantGranule, nsplit, split_len, nwin);
    return nsplit + nwin;
  }
  nwin = 0;
  plan_splits(bh, max_len, kBf16Chunk * kWarps * 4, nsplit, split_len);
  return nsplit;
}
oscar_status launch_prefill(const CacheView& v, int bits, const uint16_t* k, const uint16_t* vv, const int32_t* lens,
                            int32_t max_len, cudaStream_t s, oscar_error* err) {
  const int64_t rows = static_cast<int64_t>(v.B) * v.Hkv * max_len;
  const int64_t want = (rows + 15) / 16;
  const unsigned blocks = static_cast<unsigned>(want < 16LL * sm_count() ? want : 16LL * sm_count());
  if (bits == 2) kv_prefill_kernel<2><<<blocks, 256, 0, s>>>(v, k, vv, lens, max_len);
  else kv_prefill_kernel<4><<<blocks, 256, 0, s>>>(v, k, vv, lens, max_len);
  return api::check_launch(err, "oscar_cov_prefill");
}

oscar_status launch_append(const CacheView& v, int bits, const uint16_t* k, const uint16_t* vv, const int32_t* lens,
                           cudaStream_t s, oscar_error* err) {
  const int64_t bh = static_cast<int64_t>(v.B) * v.Hkv;
  const unsigned blocks = static_cast<unsigned>((bh + 7) / 8);
  if (bits == 2) kv_append_kernel<2><<<blocks, 256, 0, s>>>(v, k, vv, lens);
  else kv_append_kernel<4><<<blocks, 256, 0, s>>>(v, k, vv, lens);
  return api::check_launch(err, "oscar_cov_append");
}

oscar_status launch_decode(const CacheView* v, int bits, const uint16_t* k, const uint16_t* vv, int64_t cap, DecodeArgs a,
                           int64_t bh, float* out, int batch, cudaStream_t s, oscar_error* err, const char* fn) {
  if (bh > 65535) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch * kv_heads = %lld exceeds 65535", fn, (long long)bh);
  if (v) {
    const dim3 grid(a.nsplit + a.nwin, static_cast<unsigned>(bh));
    // set on every call (no global state; a cheap host-side attribute write)
    if (bits == 2) OSCAR_CUDA_TRY(cudaFuncSetAttribute(kv_decode_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(decode_smem_bytes<2>())), err, fn);
    else OSCAR_CUDA_TRY(cudaFuncSetAttribute(kv_decode_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(decode_smem_bytes<4>())), err, fn);
    if (bits == 2) kv_decode_kernel<2><<<grid, kWarps * 32, decode_smem_bytes<2>(), s>>>(*v, a);
    else kv_decode_kernel<4><<<grid, kWarps * 32, decode_smem_bytes<4>(), s>>>(*v, a);
  } else {
    const dim3 grid(a.nsplit, static_cast<unsigned>(bh));
    bf16_decode_kernel<<<grid, kWarps * 32, 0, s>>>(k, vv, cap, a);
  }
  oscar_status st = api::check_launch(err, fn);
  if (st != OSCAR_OK) return st;
  return launch_merge(a, batch, out, s, err, fn);
}

}  // namespace oscar::kernels

using namespace oscar;

extern "C" int64_t oscar_cov_capacity(const oscar_cov_cache* c) {
  return c ? static_cast<int64_t>(c->sink) + c->body_capacity + c->recent : 0;
}

extern "C" oscar_status oscar_cov_prefill(const oscar_cov_cache* cache, const void* k, const void* v, const int32_t* seq_lens,
                                         int32_t max_len, void* stream, oscar_error* err) {
  const char* fn = "oscar_cov_prefill";
  kernels::CacheView cv;
  oscar_status st = kernels::check_cache(cache, fn, err, cv);
  if (st != OSCAR_OK) return st;
  if ((st = kernels::check_write_args(fn, "k, v", k, v, seq_lens, err)) != OSCAR_OK) return st;
  if (max_len < 0) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: max_len=%d is negative", fn, max_len);
  if (max_len > oscar_cov_capacity(cache))
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: max_len=%d exceeds the cache capacity %lld", fn, max_len,
                     (long long)oscar_cov_capacity(cache));
  if (max_len == 0) return OSCAR_OK;
  if (static_cast<int64_t>(cache->batch) * cache->num_kv_heads * max_len >= (int64_t(1) << 32))
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch * kv_heads * max_len must be below 2^32", fn);
  return kernels::launch_prefill(cv, cache->bits, static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v), seq_lens,
                                 max_len, static_cast<cudaStream_t>(stream), err);
}

extern "C" oscar_status oscar_cov_append(const oscar_cov_cache* cache, const void* k_new, const void* v_new,
                                        const int32_t* seq_lens, int32_t max_seq_len, void* stream, oscar_error* err) {
  const char* fn = "oscar_cov_append";
  kernels::CacheView cv;
  oscar_status st = kernels::check_cache(cache, fn, err, cv);
  if (st != OSCAR_OK) return st;
  if ((st = kernels::check_write_args(fn, "k_new, v_new", k_new, v_new, seq_lens, err)) != OSCAR_OK) return st;
  if ((st = kernels::check_append_len(fn, max_seq_len, oscar_cov_capacity(cache), err)) != OSCAR_OK) return st;
  return kernels::launch_append(cv, cache->bits, static_cast<const uint16_t*>(k_new), static_cast<const uint16_t*>(v_new),
                                seq_lens, static_cast<cudaStream_t>(stream), err);
}

extern "C" size_t oscar_decode_workspace_bytes(int32_t batch, int32_t num_q_heads, int32_t num_kv_heads, int32_t head_dim,
                                                  int32_t max_seq_len, int32_t quantized) {
  (void)num_q_heads;
  (void)head_dim;
  if (batch <= 0 || num_kv_heads <= 0 || max_seq_len < 0) return 0;
  int ns, nw;
  int64_t len;
  const int np = quantized ? kernels::quant_parts_bound(batch, num_kv_heads, max_seq_len)
                           : kernels::decode_parts(batch, num_kv_heads, max_seq_len, false, 0, 0, ns, len, nw);
  return kernels::decode_workspace(static_cast<int64_t>(batch) * num_kv_heads, np);
}


extern "C" oscar_status oscar_cov_decode(const oscar_cov_cache* cache, const void* q, int32_t num_q_heads, const int32_t* seq_lens,
                                        int32_t max_seq_len, float softmax_scale, float* out, void* workspace,
                                        size_t workspace_bytes, void* stream, oscar_error* err) {
  const char* fn = "oscar_cov_decode";
  kernels::CacheView cv;
  oscar_status st = kernels::check_cache(cache, fn, err, cv);
  if (st != OSCAR_OK) return st;
  st = kernels::check_decode_args(fn, q, num_q_heads, cache->num_kv_heads, seq_lens, max_seq_len, oscar_cov_capacity(cache), out,
                                  workspace, err);
  if (st != OSCAR_OK) return st;
  kernels::DecodeArgs a;
  a.np = kernels::decode_parts(cache->batch, cache->num_kv_heads, max_seq_len, true, cache->sink, cache->recent, a.nsplit, a.split_len,
                              a.nwin);
  const int64_t bh = static_cast<int64_t>(cache->batch) * cache->num_kv_heads;
  st = kernels::finish_decode_args(a, fn, q, seq_lens, num_q_heads, cache->num_kv_heads, bh, softmax_scale, workspace, workspace_bytes, err);
  if (st != OSCAR_OK) return st;
  return kernels::launch_decode(&cv, cache->bits, nullptr, nullptr, 0, a, bh, out, cache->batch, static_cast<cudaStream_t>(stream),
                                err, fn);
}

extern "C" oscar_status oscar_bf16_decode(const void* k, const void* v, int32_t batch, int32_t num_kv_heads, int64_t capacity,
                                          int32_t head_dim, const void* q, int32_t num_q_heads, const int32_t* seq_lens,
                                          int32_t max_seq_len, float softmax_scale, float* out, void* workspace,
                                          size_t workspace_bytes, void* stream, oscar_error* err) {
  const char* fn = "oscar_bf16_decode";
  if (head_dim != kernels::kHD)
    return api::fail(err, OSCAR_ERR_UNSUPPORTED, "%s: head_dim=%d unsupported (only 128 is compiled)", fn, head_dim);
  if (!k || !v) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: k or v is NULL", fn);
  if (!api::aligned(k, 16) || !api::aligned(v, 16)) return api::fail(err, OSCAR_ERR_MISALIGNED, "%s: k/v must be 16-byte aligned", fn);
  if (batch <= 0 || capacity < 0)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch=%d capacity=%lld invalid", fn, batch, (long long)capacity);
  oscar_status st = kernels::check_decode_args(fn, q, num_q_heads, num_kv_heads, seq_lens, max_seq_len, capacity, out, workspace, err);
  if (st != OSCAR_OK) return st;
  kernels::DecodeArgs a;
  a.np = kernels::decode_parts(batch, num_kv_heads, max_seq_len, false, 0, 0, a.nsplit, a.split_len, a.nwin);
  const int64_t bh = static_cast<int64_t>(batch) * num_kv_heads;
  st = kernels::finish_decode_args(a, fn, q, seq_lens, num_q_heads, num_kv_heads, bh, softmax_scale, workspace, workspace_bytes, err);
  if (st != OSCAR_OK) return st;
  return kernels::launch_decode(nullptr, 16, static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v), capacity, a, bh,
                                out, batch, static_cast<cudaStream_t>(stream), err, fn);
}
