// decode/warp_state.cuh: one warp's online-softmax state over a head_dim-HD output and the fragment
// shuffles every decode kernel shares. Channel layout of the P V accumulators (MT = HD / 16 m-tiles):
// lane (g, t) (g = lane / 4, t = lane % 4) holds, in m-tile mt, output channels CPT g + mt (row g) and
// CPT g + MT + mt (row g + 8), CPT = HD / 8, for query slots 2t and 2t + 1; so a thread's value codes
// are the contiguous channels [CPT g, CPT g + CPT) of a token row. Device-only, internal linkage.
#pragma once
#include "decode/args.h"
#include "decode/mma.cuh"

#include <cmath>

namespace oscar::kernels {
namespace {

constexpr int kWarps = 4;    // warps per decode block
constexpr int kQSlots = 8;   // query slots per block (mma N); larger GQA groups use more blocks (grid z)

template <int HD>
struct Tiles {
  static_assert(HD == 64 || HD == 128 || HD == 256, "head_dim 64, 128 or 256");
  static constexpr int MT = HD / 16;   // PV m-tiles = QK k-steps
  static constexpr int CPT = HD / 8;   // output channels per lane row g
  static constexpr int NEX = 2;  // WarpState::ex rows
};

template <int HD>
struct WarpState {
  float acc[Tiles<HD>::MT][4];  // [m-tile][c0..c3]: (row g, q 2t), (row g, q 2t+1), (row g+8, q 2t), (row g+8, q 2t+1)
  float m[2], l[2];
  float ex[Tiles<HD>::NEX][2];  // per-format sums rescaled with the state (oscar-cov: zero-point sum, P' sum; oscar-omni: the
                                // zero-point sum of the lane's value group); rows a kernel never reads are dead code
  float off[2];    // oscar-omni: the mid-code offset taken out of acc chunk by chunk
};

template <int HD>
__device__ __forceinline__ void state_init(WarpState<HD>& st) {
#pragma unroll
  for (int mt = 0; mt < Tiles<HD>::MT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) st.acc[mt][i] = 0.f;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    st.m[j] = -INFINITY;
    st.l[j] = 0.f;
#pragma unroll
    for (int e = 0; e < Tiles<HD>::NEX; ++e) st.ex[e][j] = 0.f;
    st.off[j] = 0.f;
  }
}

// Soft-capping in log2 units: cap2 tanh(s / cap2) with tanh(y) = 1 - 2 / (e^{2y} + 1) (ex2.approx: absolute
// error ~1e-7 cap2, where the hardware tanh.approx would move scores by ~5e-4 cap2); a masked -inf stays -inf.
__device__ __forceinline__ float softcap_log2(float s, float cap2) {
  const float e = exp2f(fminf(s * (2.f * kLog2e / cap2), 64.f));  // tanh = 1 - 2^-63 and below past 64
  return s == -INFINITY ? s : cap2 * (1.f - __fdividef(2.f, e + 1.f));
}

// 2^x in one MUFU instruction (ex2.approx.ftz.f32) for the softmax's x = score - running max: x <= 0, or
// x <= kLazyRescale under the lazy rescale, or -inf (-> +0). Its relative error is at most 2^-22 over that range
// (PTX ISA), below the fp32 rounding of the sums it enters; results under 2^-126 flush to 0, a probability
// below 1e-38 next to the maximum's 2^0 (exp2f spends 3 more instructions per call on the denormal range).
__device__ __forceinline__ float exp2_ftz(float x) {
#if OSCAR_LEVER_EX2
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  return exp2f(x);
#endif
}

// Lazy rescale (log2 units): the running max m is moved, and the state rescaled, only when a tile's max exceeds
// it by more than this (a warp vote: one uniform branch), as FlashAttention-4 does; otherwise the tile's
// probabilities are taken against the old m, so they may reach 2^kLazyRescale = 256 (the P' weights and the fp32
// sums hold that). Exact in real arithmetic: everything of the state is relative to the same m.
constexpr float kLazyRescale = 8.0f;

// s[u][i] in log2 units (masked = -inf, at least one finite): soft-cap them when cap2 > 0 (DecodeArgs::cap2),
// rescale the state to the new max (LAZY: only when it grows by more than kLazyRescale) and turn s into
// probabilities.
// PAIRED (dense query packing, oscar-cov): lanes t and t ^ 2 hold the same query slots for other tokens, so the
// tile max is reduced over them too and both keep the same running max.
template <int SUB, bool LAZY = false, bool PAIRED = false, int HD>
__device__ __forceinline__ void softmax_step(WarpState<HD>& st, float (&s)[SUB][4], float cap2) {
  if (cap2 > 0.f) {
#pragma unroll
    for (int u = 0; u < SUB; ++u)
#pragma unroll
      for (int i = 0; i < 4; ++i) s[u][i] = softcap_log2(s[u][i], cap2);
  }
  float mx[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    mx[j] = -INFINITY;
#pragma unroll
    for (int u = 0; u < SUB; ++u) mx[j] = fmaxf(mx[j], fmaxf(s[u][j], s[u][2 + j]));
    mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], 4));
    mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], 8));
    mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], 16));
    if (PAIRED) mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], 2));
  }
  const bool grow = !LAZY || __any_sync(0xffffffffu, mx[0] > st.m[0] + kLazyRescale || mx[1] > st.m[1] + kLazyRescale);
  if (grow) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float mnew = fmaxf(st.m[j], mx[j]);
      const float alpha = exp2_ftz(st.m[j] - mnew);  // m = -inf -> 0
      st.m[j] = mnew;
      st.l[j] *= alpha;
#pragma unroll
      for (int e = 0; e < Tiles<HD>::NEX; ++e) st.ex[e][j] *= alpha;
      st.off[j] *= alpha;
#pragma unroll
      for (int mt = 0; mt < Tiles<HD>::MT; ++mt) { st.acc[mt][j] *= alpha; st.acc[mt][2 + j] *= alpha; }
    }
  }
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int u = 0; u < SUB; ++u) {
      s[u][j] = exp2_ftz(s[u][j] - st.m[j]);
      s[u][2 + j] = exp2_ftz(s[u][2 + j] - st.m[j]);
      st.l[j] += s[u][j] + s[u][2 + j];
    }
}

// P' (C layout, tokens g / g+8, queries 2t, 2t+1) -> B fragment (tokens 2t.. / 2t+8.., query g), as bf16
// pairs (F16 = false) or fp16 pairs (F16 = true).
template <bool F16 = false>
__device__ __forceinline__ void p_to_bfrag(uint16_t* ps, int g, int t, float p00, float p01, float p10, float p11,
                                           uint32_t (&b)[2]) {
  __syncwarp();
  uint32_t* row = reinterpret_cast<uint32_t*>(ps);
  row[g * 4 + t] = F16 ? pack_f16(p00, p01) : pack_bf16(p00, p01);        // ps[g][2t], ps[g][2t+1]
  row[(g + 8) * 4 + t] = F16 ? pack_f16(p10, p11) : pack_bf16(p10, p11);  // ps[g+8][2t..]
  __syncwarp();
  b[0] = static_cast<uint32_t>(ps[(2 * t) * 8 + g]) | (static_cast<uint32_t>(ps[(2 * t + 1) * 8 + g]) << 16);
  b[1] = static_cast<uint32_t>(ps[(2 * t + 8) * 8 + g]) | (static_cast<uint32_t>(ps[(2 * t + 9) * 8 + g]) << 16);
}

// PV A fragments from packed value codes. A thread holds, for its four tokens 2t, 2t+1, 2t+8, 2t+9 of a
// 16-token tile (rows r = 0..3 of vw), VW words of codes of its channels [CPT g, CPT g + CPT); pairing the
// tokens (2t, 2t+1) and (2t+8, 2t+9) per 16-bit half gives words whose halves hold one channel of two tokens.
template <int VW>
__device__ __forceinline__ void pair_tokens(const uint32_t (&vw)[4][VW], uint32_t (&lo)[2][VW], uint32_t (&hi)[2][VW]) {
#pragma unroll
  for (int pr = 0; pr < 2; ++pr)
#pragma unroll
    for (int w = 0; w < VW; ++w) {
      lo[pr][w] = prmt(vw[2 * pr][w], vw[2 * pr + 1][w], 0x5410);
      hi[pr][w] = prmt(vw[2 * pr][w], vw[2 * pr + 1][w], 0x7632);
    }
}
// The lane's channel offset sigma in [0, CPT) of A register k of m-tile mt (row half k & 1).
template <int HD>
__host__ __device__ constexpr int v_sigma(int mt, int k) { return mt + Tiles<HD>::MT * (k & 1); }
// Register k of m-tile mt's A fragment (token pair k >> 1): the paired word holding it, and the code index
// within that word's 16-bit halves (the argument of codes_bf16x2 / codes_f16x2).
template <int BITS, int VW, int HD>
__device__ __forceinline__ uint32_t v_pair_word(const uint32_t (&lo)[2][VW], const uint32_t (&hi)[2][VW], int mt, int k) {
  constexpr int PW = 16 / BITS, CW = 32 / BITS;
  const int pr = k >> 1, sigma = v_sigma<HD>(mt, k);
  const int w = sigma / CW, cidx = sigma % CW;
  return cidx / PW ? hi[pr][w] : lo[pr][w];
}
template <int BITS, int HD>
__host__ __device__ constexpr int v_pair_code(int mt, int k) { return v_sigma<HD>(mt, k) % (32 / BITS) % (16 / BITS); }

// Sum over the 8 lanes g of a quad position t (the token rows of a warp's fragments).
__device__ __forceinline__ float sum_over_g(float x) {
#pragma unroll
  for (int o = 4; o < 32; o <<= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

}  // namespace
}  // namespace oscar::kernels
