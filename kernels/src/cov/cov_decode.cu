// cov/cov_decode.cu: oscar-cov split-KV decode attention over INT2/INT4 bodies with BF16 sink/recent
// windows, for every (head_dim, bits) of decode/shapes.h (the merge is decode/merge.cu).
//
// Design (one warp = one online-softmax state for up to 8 query heads of one KV head, so every K/V byte is
// loaded once per KV head and query group of 8; head_dim HD, MT = HD / 16):
//  * S^T = K Q^T on tensor cores (mma.m16n8k16: 16 tokens x 8 query slots x 16 channels, MT k-steps). For
//    the packed body the A fragment is built straight from the codes: ((w >> b*i) & mask) | 0x6400 gives
//    fp16 (1024 + code) pairs (codes_f16x2: the 1024 bias is removed after the MMA, shifted positions are
//    undone by a pre-scaled query). Lane t reads the contiguous codes of channels [HD/4 t, HD/4 (t + 1));
//    the query fragment uses the same channel permutation, so the dot product is unchanged.
//    score = (scale_k * dot(q, codes) + zero_k * sum(q)) * softmax_scale * log2(e).
//  * O^T = V^T P'^T, P' = p * scale_v (bf16), plus Z = sum p * zero_v added to every channel; the V^T
//    fragment pairs two tokens of one channel via PRMT, then the same magic-number dequant (bf16, 128 + code).
//    P' goes through 256 bytes of shared memory per warp to change fragment layout. The accumulators are
//    kept centred on the mid code chunk by chunk (see int_chunk).
//  * BF16 sink/recent tokens use bf16 MMAs on the stored rows (decode/bf16_tile.cuh).
//  * Warps are combined exactly in shared memory, each block writes one partial (decode/partials.cuh).
//  * Body loads: each warp streams its chunks (codes + scale/zero, contiguous in memory) into its own
//    shared-memory ring with cp.async, kStages chunks ahead.
//  * Grid: (splits + nwin) x (batch * kv_heads) x (query groups of 8); splits >= nsplit share the BF16
//    windows, the others equal slices of the body (decode/split_plan.h).
//  * Paged caches (oscar_cov_paged): the same kernel with the chunk addresses taken through the block table and the
//    windows through the sequence's window slot (issue_body_chunk): the same arithmetic, hence the same bits.
//  * Instruction levers (decode/levers.h, all on): one LOP3 per code pair, ex2.approx for the softmax, a score as
//    one FMA (the accumulator starts at -qbias), masking only in a split's last chunk, lazy rescale (warp vote),
//    and for query groups of at most 4 heads dense query packing (int_chunk_dense: no padded scores).
#include "api_util.h"
#include "cov/cov_kernels.h"
#include "decode/bf16_tile.cuh"
#include "decode/decode_grid.cuh"
#include "decode/partials.cuh"
#include "decode/shapes.h"
#include "decode/split_plan.h"
#include "oscar/cov_format.h"

namespace oscar::kernels {
namespace {

#ifndef OSCAR_KV_STAGES
#define OSCAR_KV_STAGES 3
#endif
constexpr int kStages = OSCAR_KV_STAGES;  // cp.async stages per warp (each one chunk of codes + params)
constexpr bool kLazy = OSCAR_LEVER_LAZY != 0;  // decode/levers.h

// One pipeline stage of a warp: CH rows of K codes, CH rows of V codes, CH K params, CH V params.
template <int HD, int BITS>
struct IntStage {
  static constexpr int CH = BITS == 2 ? 64 : 32;  // tokens per warp chunk
  static constexpr int CB = HD * BITS / 8;        // bytes per token row
  static constexpr int BYTES = CH * (2 * CB + 8);
  static constexpr int V_CODES = CH * CB, K_PARAMS = 2 * CH * CB, V_PARAMS = K_PARAMS + CH * 4;  // byte offsets of the arrays
  static_assert(CB % 16 == 0, "rows of whole 16-byte pieces");
  static constexpr int KW = HD * BITS / 128;  // words per lane per token for QK (channels HD/4 t ..)
  static constexpr int VB = HD * BITS / 64;   // bytes per lane per token for PV (channels HD/8 g ..)
  static constexpr int VW = VB >= 4 ? VB / 4 : 1;
  static constexpr int PW = 16 / BITS;        // code pairs per word
};

// Issues the copies of body tokens [base, base + n) (n in [1, CH]) into a stage; rows >= n repeat row
// n - 1 (their scores are masked), so every later fragment read stays in bounds and finite.
template <int HD, int BITS>
__device__ __forceinline__ void issue_chunk(uint8_t* stg, const uint8_t* __restrict__ kc, const uint8_t* __restrict__ vc,
                                            const uint32_t* __restrict__ kp, const uint32_t* __restrict__ vp, int64_t base,
                                            int n, int lane) {
  using S = IntStage<HD, BITS>;
  constexpr int R16 = S::CB / 16;  // 16-byte pieces per row
#pragma unroll
  for (int p = lane; p < S::CH * R16; p += 32) {
    const int r = min(p / R16, n - 1), c = p % R16;
    cp_async16(stg + p * 16, kc + (base + r) * S::CB + c * 16);
    cp_async16(stg + S::V_CODES + p * 16, vc + (base + r) * S::CB + c * 16);
  }
#pragma unroll
  for (int p = lane; p < S::CH; p += 32) {
    const int r = min(p, n - 1);
    cp_async4(stg + S::K_PARAMS + p * 4, kp + base + r);
    cp_async4(stg + S::V_PARAMS + p * 4, vp + base + r);
  }
}

// The copies of body chunk [base, base + n) of (sequence b, KV head h): from the contiguous arrays, or (PAGED) from
// the page of position S + base (a chunk never crosses a page: S, P and base are multiples of the chunk).
template <int HD, int BITS, bool PAGED>
__device__ __forceinline__ void issue_body_chunk(uint8_t* stg, const CovView& c, int b, int h, int64_t bh, int64_t base, int n, int lane) {
  using S = IntStage<HD, BITS>;
  if constexpr (PAGED) {
    const int pos = c.S + static_cast<int>(base);
    const int64_t page = c.block_table[static_cast<int64_t>(b) * c.bt_stride + pos / c.P];
    const int off = pos % c.P;
    const uint8_t* reg = c.pages + page * c.page_stride + static_cast<int64_t>(h) * c.P * (2 * S::CB + 8);
    const uint32_t* kp = reinterpret_cast<const uint32_t*>(reg + 2 * static_cast<int64_t>(c.P) * S::CB);
    issue_chunk<HD, BITS>(stg, reg, reg + static_cast<int64_t>(c.P) * S::CB, kp, kp + c.P, off, n, lane);
  } else {
    issue_chunk<HD, BITS>(stg, c.kc + bh * c.cap * S::CB, c.vc + bh * c.cap * S::CB, c.kp + bh * c.cap, c.vp + bh * c.cap, base, n, lane);
  }
}

// 2^(BITS pos) of the value codes at lane channel offset sigma (bf16 magic positions).
template <int HD, int BITS>
__host__ __device__ constexpr float vpos_factor(int mt, int rh) {
  return static_cast<float>(1 << (BITS * MagicPos<BITS, 7>::pos(v_pair_code<BITS, HD>(mt, rh))));
}

// The value rows of sub-tile u a lane reads for its PV A fragments: tokens 16u + 2t, +1, +8, +9, channels [CPT g, ..).
template <int HD, int BITS, int VW>
__device__ __forceinline__ void load_v_rows(const uint8_t* vc, int u, int g, int t, uint32_t (&vw)[4][VW]) {
  constexpr int CB = IntStage<HD, BITS>::CB, VB = IntStage<HD, BITS>::VB;
#pragma unroll
  for (int r = 0; r < 4; ++r) load_words<VW, (VB < 4)>(vc + (16 * u + 2 * t + (r & 1) + 8 * (r >> 1)) * CB + g * VB, vw[r]);
}
// O^T += V^T P'^T over one 16-token sub-tile: the value A fragments are 128 + code * 2^(BITS pos) (bf16 magic).
template <int HD, int BITS, int VW>
__device__ __forceinline__ void pv_subtile(WarpState<HD>& st, const uint32_t (&vw)[4][VW], const uint32_t (&b)[2]) {
  uint32_t lo[2][VW], hi[2][VW];
  pair_tokens<VW>(vw, lo, hi);
#pragma unroll
  for (int mt = 0; mt < Tiles<HD>::MT; ++mt) {
    uint32_t a[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) a[k] = codes_bf16x2<BITS>(v_pair_word<BITS, VW, HD>(lo, hi, mt, k), v_pair_code<BITS, HD>(mt, k));
    mma_bf16(st.acc[mt], a, b);
  }
}
// Keeps the accumulators centred: takes a chunk's magic and mid-code offset (128 + mid * 2^(BITS*pos)) * sum(P')
// (pc) out of them. An accumulator that grows by that offset over a long split loses the output to the tensor cores'
// fp32 accumulation (relative error 0.5-0.7 at 32K tokens per split on zero-mean values, BENCHMARKS.md); the epilogue
// adds mid * sum(p * scale_v) back from ex[1] (exact weights).
template <int HD, int BITS>
__device__ __forceinline__ void center_acc(WarpState<HD>& st, const float (&pc)[4]) {
#pragma unroll
  for (int mt = 0; mt < Tiles<HD>::MT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) st.acc[mt][i] = fmaf(-(128.0f + mid_code<BITS>() * vpos_factor<HD, BITS>(mt, i >> 1)), pc[i], st.acc[mt][i]);
}

// Packed-body chunk from a shared-memory stage: n valid tokens (n in [1, CH]).
template <int HD, int BITS>
__device__ __forceinline__ void int_chunk(WarpState<HD>& st, const uint8_t* stg, int n, const uint32_t (&qf)[Tiles<HD>::MT][2],
                                          const float (&qsum)[2], const float (&qbias)[2], float sl2, float cap2, uint16_t* ps, int g,
                                          int t) {
  using S = IntStage<HD, BITS>;
  constexpr int MT = Tiles<HD>::MT, SUB = S::CH / 16, CB = S::CB, KW = S::KW, VW = S::VW, PW = S::PW;
  const uint8_t *kc = stg, *vc = stg + S::V_CODES;
  const uint32_t *kp = reinterpret_cast<const uint32_t*>(stg + S::K_PARAMS), *vp = reinterpret_cast<const uint32_t*>(stg + S::V_PARAMS);
  // Scores.
  float s[SUB][4];
#pragma unroll
  for (int u = 0; u < SUB; ++u) {
    uint32_t kw[2][KW], kpar[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = 16 * u + g + 8 * r;
      load_words<KW>(kc + i * CB + t * KW * 4, kw[r]);
      kpar[r] = kp[i];
    }
#if OSCAR_LEVER_SCORE
    // two independent MMA chains; the first starts at -qbias (the magic 1024's share), so that the score is one FMA
    float c[4] = {-qbias[0], -qbias[1], -qbias[0], -qbias[1]}, c2[4] = {0.f, 0.f, 0.f, 0.f};
#else
    float c[4] = {0.f, 0.f, 0.f, 0.f}, c2[4] = {0.f, 0.f, 0.f, 0.f};
#endif
#pragma unroll
    for (int ks = 0; ks < MT; ++ks) {
      const int q0 = 2 * ks, q1 = 2 * ks + 1;
      const uint32_t a[4] = {codes_f16x2<BITS>(kw[0][q0 / PW], q0 % PW), codes_f16x2<BITS>(kw[1][q0 / PW], q0 % PW),
                             codes_f16x2<BITS>(kw[0][q1 / PW], q1 % PW), codes_f16x2<BITS>(kw[1][q1 / PW], q1 % PW)};
      if (ks & 1) mma_f16(c2, a, qf[ks]);
      else mma_f16(c, a, qf[ks]);
    }
#if OSCAR_LEVER_SCORE
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // score = scale_k sl2 (q.codes - qbias) + zero_k (sl2 sum q), in log2 units
      const float ksc = half_lo(kpar[r]) * sl2, kz = half_hi(kpar[r]);
#pragma unroll
      for (int j = 0; j < 2; ++j) s[u][2 * r + j] = fmaf(ksc, c[2 * r + j] + c2[2 * r + j], kz * qsum[j]);
    }
#else
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float ksc = half_lo(kpar[r]), kz = half_hi(kpar[r]);
      const bool valid = 16 * u + g + 8 * r < n;
#pragma unroll
      for (int j = 0; j < 2; ++j)
        s[u][2 * r + j] = valid ? (ksc * (c[2 * r + j] + c2[2 * r + j] - qbias[j]) + kz * qsum[j]) * sl2 : -INFINITY;
    }
#endif
  }
#if OSCAR_LEVER_SCORE
  if (n < S::CH) {  // only a split's last chunk can be partial: mask its missing rows
#pragma unroll
    for (int u = 0; u < SUB; ++u)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (16 * u + g + 8 * (i >> 1) >= n) s[u][i] = -INFINITY;
  }
#endif
  softmax_step<SUB, kLazy>(st, s, cap2);
  // P V. The value A fragments are 128 + code * 2^(BITS*pos); pc sums this chunk's P' (an MMA with ones).
  float pc[4] = {0.f, 0.f, 0.f, 0.f};
  const uint32_t ones[4] = {0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u};  // bf16 1.0
#pragma unroll
  for (int u = 0; u < SUB; ++u) {
    uint32_t vw[4][VW], vpar[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) vpar[r] = vp[16 * u + g + 8 * r];
    load_v_rows<HD, BITS, VW>(vc, u, g, t, vw);
    float pp[4];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // ex[1] sums p * scale_v in fp32, not the rounded P': the epilogue adds kMid * ex[1] + ex[0], so the
      // codes see P' only through (code - kMid) and the weights' rounding stays off the mean code.
      const float vsc = half_lo(vpar[r]), vz = half_hi(vpar[r]);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        st.ex[0][j] += s[u][2 * r + j] * vz;
#if OSCAR_LEVER_SCORE
        pp[2 * r + j] = s[u][2 * r + j] * vsc;  // rounded to bf16 once, by p_to_bfrag
#else
        pp[2 * r + j] = __bfloat162float(__float2bfloat16_rn(s[u][2 * r + j] * vsc));
#endif
        st.ex[1][j] += s[u][2 * r + j] * vsc;
      }
    }
    uint32_t b[2];
    p_to_bfrag(ps, g, t, pp[0], pp[1], pp[2], pp[3], b);
    mma_bf16(pc, ones, b);
    pv_subtile<HD, BITS, VW>(st, vw, b);
  }
  center_acc<HD, BITS>(st, pc);
}

// Dense query packing (GQA <= 4, DENSE): query slots 0-3 of the MMA's N read the first 16-token sub-tile of a pair
// and slots 4-7 the second: the A fragment's k 0-7 hold one channel pair of the first sub-tile's tokens, k 8-15 the
// same pair of the second's, and the query fragments are block-diagonal (qd[p] = {q, 0} in lanes g < 4, {0, q} in
// lanes g >= 4: one MMA per channel pair and sub-tile pair, as many MMAs and LOP3s as before). So every score a lane
// holds is real: lane (g, t) holds tokens g, g + 8 of sub-tile 2 u2 + (t >> 1) for query slots 2 (t & 1), +1, and the
// softmax does half the work of the padded layout. P' goes through 512 bytes of shared memory per warp (slots 4-7
// stay zero), the value MMAs are unchanged (padding columns zero).
template <int HD, int BITS>
__device__ __forceinline__ void int_chunk_dense(WarpState<HD>& st, const uint8_t* stg, int n, const uint32_t (&qd)[2 * Tiles<HD>::MT][2],
                                                const float (&qsum)[2], const float (&qbias)[2], float sl2, float cap2, uint16_t* ps, int g,
                                                int t) {
  using S = IntStage<HD, BITS>;
  constexpr int MT = Tiles<HD>::MT, PAIRS = S::CH / 32, CB = S::CB, KW = S::KW, VW = S::VW, PW = S::PW;
  const uint8_t *kc = stg, *vc = stg + S::V_CODES;
  const uint32_t *kp = reinterpret_cast<const uint32_t*>(stg + S::K_PARAMS), *vp = reinterpret_cast<const uint32_t*>(stg + S::V_PARAMS);
  const int hs = t >> 1;  // the sub-tile of a pair whose scores this lane holds
  float s[PAIRS][4];
#pragma unroll
  for (int u2 = 0; u2 < PAIRS; ++u2) {
    uint32_t kw[2][2][KW];
#pragma unroll
    for (int sb = 0; sb < 2; ++sb)
#pragma unroll
      for (int r = 0; r < 2; ++r) load_words<KW>(kc + (32 * u2 + 16 * sb + g + 8 * r) * CB + t * KW * 4, kw[sb][r]);
    float c[4] = {-qbias[0], -qbias[1], -qbias[0], -qbias[1]}, c2[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int p = 0; p < 2 * MT; ++p) {
      const uint32_t a[4] = {codes_f16x2<BITS>(kw[0][0][p / PW], p % PW), codes_f16x2<BITS>(kw[0][1][p / PW], p % PW),
                             codes_f16x2<BITS>(kw[1][0][p / PW], p % PW), codes_f16x2<BITS>(kw[1][1][p / PW], p % PW)};
      if (p & 1) mma_f16(c2, a, qd[p]);
      else mma_f16(c, a, qd[p]);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint32_t kpar = kp[32 * u2 + 16 * hs + g + 8 * r];
      const float ksc = half_lo(kpar) * sl2, kz = half_hi(kpar);
#pragma unroll
      for (int j = 0; j < 2; ++j) s[u2][2 * r + j] = fmaf(ksc, c[2 * r + j] + c2[2 * r + j], kz * qsum[j]);
    }
  }
  if (n < S::CH) {
#pragma unroll
    for (int u2 = 0; u2 < PAIRS; ++u2)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (32 * u2 + 16 * hs + g + 8 * (i >> 1) >= n) s[u2][i] = -INFINITY;
  }
  softmax_step<PAIRS, kLazy, true>(st, s, cap2);
  float pc[4] = {0.f, 0.f, 0.f, 0.f};
  const uint32_t ones[4] = {0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u};
  uint32_t* ps32 = reinterpret_cast<uint32_t*>(ps);
#pragma unroll
  for (int u2 = 0; u2 < PAIRS; ++u2) {
    __syncwarp();  // the previous pair's B reads are done
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint32_t vpar = vp[32 * u2 + 16 * hs + g + 8 * r];
      const float vsc = half_lo(vpar), vz = half_hi(vpar);
      float pp[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        st.ex[0][j] += s[u2][2 * r + j] * vz;
        pp[j] = s[u2][2 * r + j] * vsc;
        st.ex[1][j] += pp[j];
      }
      ps32[(16 * hs + g + 8 * r) * 4 + (t & 1)] = pack_bf16(pp[0], pp[1]);  // P'[token][slots 2 (t & 1), +1]
    }
    __syncwarp();
#pragma unroll
    for (int sb = 0; sb < 2; ++sb) {
      const uint16_t* pt = ps + 16 * sb * 8;
      uint32_t b[2];
      b[0] = static_cast<uint32_t>(pt[(2 * t) * 8 + g]) | (static_cast<uint32_t>(pt[(2 * t + 1) * 8 + g]) << 16);
      b[1] = static_cast<uint32_t>(pt[(2 * t + 8) * 8 + g]) | (static_cast<uint32_t>(pt[(2 * t + 9) * 8 + g]) << 16);
      mma_bf16(pc, ones, b);
      uint32_t vw[4][VW];
      load_v_rows<HD, BITS, VW>(vc, 2 * u2 + sb, g, t, vw);
      pv_subtile<HD, BITS, VW>(st, vw, b);
    }
  }
  center_acc<HD, BITS>(st, pc);
}

// Query fragments of the packed path (fp16): pair index p of lane t maps to channels
// ch0 = HD/4 t + (p / PW) CW + p % PW and ch0 + PW (the codes' order within the lane's words).
template <int HD, int BITS>
__device__ __forceinline__ void load_q_int(const uint16_t* qrow, bool live, int t, uint32_t (&qf)[Tiles<HD>::MT][2], float& qpart,
                                           float& qbias) {
  constexpr int PW = 16 / BITS, CW = 32 / BITS;
  qpart = 0.f;
  qbias = 0.f;
#pragma unroll
  for (int ks = 0; ks < Tiles<HD>::MT; ++ks)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int p = 2 * ks + h;
      const int ch0 = (HD / 4) * t + (p / PW) * CW + p % PW, ch1 = ch0 + PW;
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

template <int HD, int BITS>
constexpr size_t decode_smem_bytes() {
  constexpr size_t stages = static_cast<size_t>(kWarps) * kStages * IntStage<HD, BITS>::BYTES;
  return stages > sizeof(CombineSmem<HD>) ? stages : sizeof(CombineSmem<HD>);
}

// blockIdx.x = split (>= nsplit: the BF16 sink + recent windows), blockIdx.y = b * Hkv + h, blockIdx.z = query group.
// DENSE: dense query packing (int_chunk_dense), for query groups of at most 4 heads.
// PAGED: the body from the pages and the windows from the sequence's window slot (CovView's paged fields).
template <int HD, int BITS, bool DENSE, bool PAGED>
__global__ void __launch_bounds__(kWarps * 32, plan::blocks_per_sm(HD)) decode_kernel(CovView c, DecodeArgs a) {
  constexpr int MT = Tiles<HD>::MT;
  __shared__ __align__(16) uint16_t ps_all[kWarps][(DENSE ? 32 : 16) * 8];
  extern __shared__ __align__(16) uint8_t dyn_smem[];  // per-warp cp.async stages, then (aliased) CombineSmem
  CombineSmem<HD>& cs = *reinterpret_cast<CombineSmem<HD>*>(dyn_smem);
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");  // let the merge grid get resident early
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t bh = blockIdx.y;
  const int b = static_cast<int>(bh / c.Hkv), h = static_cast<int>(bh % c.Hkv);
  const int split = blockIdx.x;
  const QueryGroup qg = query_group(a);
  const int64_t L = max(0, a.lens[b]);
  const int64_t nb = covfmt::body_tokens(L, c.S, c.W);
  const uint16_t* qrow = query_row<HD>(a, b, h, qg, g);  // (the BF16 windows and the padded layout: slot g)
  const bool qlive = g < qg.nq;
  uint16_t* ps = ps_all[warp];
  WarpState<HD> st;
  state_init(st);
  if (split >= a.nsplit) {
    uint32_t qb[MT][2];
    load_q_bf16<HD>(qrow, qlive, t, qb);
    const int64_t ns = min64(L, c.S);
    const int64_t nbf = L - nb;  // sink + recent tokens
    const int64_t wbh = PAGED ? static_cast<int64_t>(c.wslot[b]) * c.Hkv + h : bh;  // the windows' (slot, head)
    const uint16_t* ks = c.ks + wbh * c.S * HD;
    const uint16_t* vs = c.vs + wbh * c.S * HD;
    const uint16_t* kr = c.kr + wbh * c.W * HD;
    const uint16_t* vr = c.vr + wbh * c.W * HD;
    for (int64_t base = (split - a.nsplit) * (kWarps * 16) + warp * 16; base < nbf; base += a.nwin * (kWarps * 16)) {
      const int n = static_cast<int>(min64(16, nbf - base));
      if (base + n <= ns) {
        bf16_tile<HD, kLazy>(st, ks, vs, [&](int i) { return base + i; }, n, qb, a.sl2, a.cap2, ps, g, t);
      } else if (base >= ns) {
        const int64_t t0 = c.S + nb + (base - ns);  // absolute token of logical index base
        bf16_tile<HD, kLazy>(st, kr, vr, [&](int i) { return (t0 + i - c.S) % c.W; }, n, qb, a.sl2, a.cap2, ps, g, t);
      } else {  // tile straddles sink and recent (only when sink is not a multiple of 16)
        const int nsk = static_cast<int>(ns - base);
        bf16_tile<HD, kLazy>(st, ks, vs, [&](int i) { return base + min(i, nsk - 1); }, nsk, qb, a.sl2, a.cap2, ps, g, t);
        const int64_t t0 = c.S + nb;
        if (n > nsk) bf16_tile<HD, kLazy>(st, kr, vr, [&](int i) { return (t0 + i - c.S) % c.W; }, n - nsk, qb, a.sl2, a.cap2, ps, g, t);
      }
    }
    __syncthreads();
    block_partial_bf16<HD>(st, a, qg, bh, split, cs, warp, g, t);
    return;
  }
  // DENSE: column g of the query fragments is query slot g & 3 (block-diagonal, see int_chunk_dense); a lane's
  // scores are of slots 2 (t & 1) + j
  uint32_t qf[MT][2];
  float qpart, qb;
  load_q_int<HD, BITS>(DENSE ? query_row<HD>(a, b, h, qg, g & 3) : qrow, DENSE ? (g & 3) < qg.nq : qlive, t, qf, qpart, qb);
  qpart += __shfl_xor_sync(0xffffffffu, qpart, 1);
  qpart += __shfl_xor_sync(0xffffffffu, qpart, 2);  // sum(q) of query slot g
  qb += __shfl_xor_sync(0xffffffffu, qb, 1);
  qb += __shfl_xor_sync(0xffffffffu, qb, 2);
  const float qsc = OSCAR_LEVER_SCORE ? a.sl2 : 1.0f;  // SCORE: sl2 sum(q)
  const int qs0 = DENSE ? 2 * (t & 1) : 2 * t;  // the lane's first score slot
  const float qsum[2] = {qsc * __shfl_sync(0xffffffffu, qpart, qs0 * 4), qsc * __shfl_sync(0xffffffffu, qpart, (qs0 + 1) * 4)};
  const float qbias[2] = {__shfl_sync(0xffffffffu, qb, qs0 * 4), __shfl_sync(0xffffffffu, qb, (qs0 + 1) * 4)};
  uint32_t qd[DENSE ? 2 * MT : 1][2];
  if constexpr (DENSE) {
    const bool upper = g >= 4;
#pragma unroll
    for (int p = 0; p < 2 * MT; ++p) {
      qd[p][0] = upper ? 0u : qf[p / 2][p % 2];
      qd[p][1] = upper ? qf[p / 2][p % 2] : 0u;
    }
    reinterpret_cast<uint4*>(ps)[lane] = make_uint4(0u, 0u, 0u, 0u);  // 512 bytes: slots 4-7 stay zero
    __syncwarp();
  }
  using S = IntStage<HD, BITS>;
  uint8_t* wst = dyn_smem + warp * (kStages * S::BYTES);
  const int64_t start = split * a.split_len, end = min64(nb, start + a.split_len);
  constexpr int64_t step = kWarps * S::CH;
  int64_t nxt = start + warp * S::CH;  // next chunk to issue
#pragma unroll
  for (int sidx = 0; sidx < kStages - 1; ++sidx) {
    if (nxt < end) issue_body_chunk<HD, BITS, PAGED>(wst + sidx * S::BYTES, c, b, h, bh, nxt, static_cast<int>(min64(S::CH, end - nxt)), lane);
    cp_async_commit();
    nxt += step;
  }
  int stage = 0;
  for (int64_t base = start + warp * S::CH; base < end; base += step) {
    int is = stage + kStages - 1;
    if (is >= kStages) is -= kStages;
    if (nxt < end) issue_body_chunk<HD, BITS, PAGED>(wst + is * S::BYTES, c, b, h, bh, nxt, static_cast<int>(min64(S::CH, end - nxt)), lane);
    cp_async_commit();
    nxt += step;
    cp_async_wait<kStages - 1>();
    __syncwarp();
    if constexpr (DENSE)
      int_chunk_dense<HD, BITS>(st, wst + stage * S::BYTES, static_cast<int>(min64(S::CH, end - base)), qd, qsum, qbias, a.sl2, a.cap2, ps,
                                g, t);
    else
      int_chunk<HD, BITS>(st, wst + stage * S::BYTES, static_cast<int>(min64(S::CH, end - base)), qf, qsum, qbias, a.sl2, a.cap2, ps, g, t);
    __syncwarp();
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages are reused as CombineSmem
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    st.l[j] = sum_over_g(st.l[j]);
    st.ex[0][j] = sum_over_g(st.ex[0][j]);
    st.ex[1][j] = sum_over_g(st.ex[1][j]);
    if (DENSE) {  // lanes t and t ^ 2 summed other tokens of the same slots; lanes t < 2 then hold slots 2t + j
      st.l[j] += __shfl_xor_sync(0xffffffffu, st.l[j], 2);
      st.ex[0][j] += __shfl_xor_sync(0xffffffffu, st.ex[0][j], 2);
      st.ex[1][j] += __shfl_xor_sync(0xffffffffu, st.ex[1][j], 2);
    }
  }
  // PV: acc holds sum(P' (code - mid)) * 2^(BITS*pos) (int_chunk took the offsets out): undo the code
  // shift, add back mid * sum(p * scale_v) and sum(p * zero_v).
  block_partial<HD>(
      st,
      [&](int mt, int rh, int j, float v) {
        return v * (1.0f / vpos_factor<HD, BITS>(mt, rh)) + (mid_code<BITS>() * st.ex[1][j] + st.ex[0][j]);
      },
      a, qg, bh, split, cs, warp, g, t);
}

}  // namespace

template <int HD, int BITS>
oscar_status cov_decode(const CovView& c, const DecodeArgs& a, const Launch& l) {
  const bool dense = OSCAR_LEVER_DENSE && a.G <= 4;  // query groups of at most 4 heads: dense query packing
  auto* kern = c.pages ? (dense ? decode_kernel<HD, BITS, true, true> : decode_kernel<HD, BITS, false, true>)
                       : (dense ? decode_kernel<HD, BITS, true, false> : decode_kernel<HD, BITS, false, false>);
  return launch_decode_grid(kern, decode_smem_bytes<HD, BITS>(), c, a, l);
}

#define OSCAR_COV_DECODE_INSTANCE(HD, BITS) template oscar_status cov_decode<HD, BITS>(const CovView&, const DecodeArgs&, const Launch&);
OSCAR_KV_SHAPES(OSCAR_COV_DECODE_INSTANCE)

}  // namespace oscar::kernels
