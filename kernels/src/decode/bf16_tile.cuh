// decode/bf16_tile.cuh: 16 BF16 tokens through one warp's online softmax (the oscar-cov sink/recent
// windows, the oscar-omni residual block and the whole BF16 baseline), and the bf16 query fragments it
// uses: in k-step ks lane t takes channels HD/4 t + 4 ks .. + 3 (a permutation of the dot product that
// makes each lane's key fragment one contiguous run of its row). Device-only, internal linkage.
#pragma once
#include "decode/warp_state.cuh"

namespace oscar::kernels {
namespace {

template <int HD>
__device__ __forceinline__ void load_q_bf16(const uint16_t* qrow, bool live, int t, uint32_t (&qb)[Tiles<HD>::MT][2]) {
#pragma unroll
  for (int ks = 0; ks < Tiles<HD>::MT; ++ks)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int ch = (HD / 4) * t + 4 * ks + 2 * h;
      qb[ks][h] = live ? (static_cast<uint32_t>(qrow[ch]) | (static_cast<uint32_t>(qrow[ch + 1]) << 16)) : 0u;
    }
}

// BF16 tile: 16 logical tokens [base, base + n) (n in [1, 16]); row(i) gives the row index of logical
// token i into kb/vb (rows of HD bf16). LAZY: softmax_step's lazy rescale (the state's owner allows P > 1).
template <int HD, bool LAZY = false, class RowFn>
__device__ __forceinline__ void bf16_tile(WarpState<HD>& st, const uint16_t* __restrict__ kb, const uint16_t* __restrict__ vb,
                                          RowFn row, int n, const uint32_t (&qb)[Tiles<HD>::MT][2], float sl2, float cap2, uint16_t* ps,
                                          int g, int t) {
  constexpr int MT = Tiles<HD>::MT, KX = HD / 32, VX = HD / 64;  // uint4 per lane: key (HD/4 channels), value (HD/8)
  uint4 kx[2][KX], vx[4][VX];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint4* src = reinterpret_cast<const uint4*>(kb + row(min(g + 8 * r, n - 1)) * HD) + t * KX;
#pragma unroll
    for (int i = 0; i < KX; ++i) kx[r][i] = src[i];
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const uint4* src = reinterpret_cast<const uint4*>(vb + row(min(2 * t + (r & 1) + 8 * (r >> 1), n - 1)) * HD) + g * VX;
#pragma unroll
    for (int i = 0; i < VX; ++i) vx[r][i] = src[i];
  }
  float c[4] = {0.f, 0.f, 0.f, 0.f};
  const uint32_t* k0 = reinterpret_cast<const uint32_t*>(&kx[0][0]);
  const uint32_t* k1 = reinterpret_cast<const uint32_t*>(&kx[1][0]);
#pragma unroll
  for (int ks = 0; ks < MT; ++ks) {
    const uint32_t a[4] = {k0[2 * ks], k1[2 * ks], k0[2 * ks + 1], k1[2 * ks + 1]};
    mma_bf16(c, a, qb[ks]);
  }
  float s[1][4];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int j = 0; j < 2; ++j) s[0][2 * r + j] = (g + 8 * r < n) ? c[2 * r + j] * sl2 : -INFINITY;
  softmax_step<1, LAZY>(st, s, cap2);
  uint32_t b[2];
  p_to_bfrag(ps, g, t, s[0][0], s[0][1], s[0][2], s[0][3], b);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    uint32_t a[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int pr = k >> 1, sigma = v_sigma<HD>(mt, k);
      const uint32_t* wa = reinterpret_cast<const uint32_t*>(&vx[2 * pr][0]);
      const uint32_t* wb = reinterpret_cast<const uint32_t*>(&vx[2 * pr + 1][0]);
      a[k] = prmt(wa[sigma / 2], wb[sigma / 2], (sigma & 1) ? 0x7632 : 0x5410);
    }
    mma_bf16(st.acc[mt], a, b);
  }
}

}  // namespace
}  // namespace oscar::kernels
