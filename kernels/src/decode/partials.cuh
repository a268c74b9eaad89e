// decode/partials.cuh: the per-call arguments of a split-KV decode step and the exact combine of a block's
// warps into one partial (o, m, l) per (sequence, KV head, split, query slot); the merge (decode/merge.cu)
// reduces the partials of one query head. Device-only, internal linkage.
#pragma once
#include "decode/args.h"
#include "decode/unit_merge.cuh"
#include "decode/warp_state.cuh"

namespace oscar::kernels {
namespace {

template <int HD>
struct CombineSmem {
  float o[kWarps][kQSlots][HD];
  float m[kWarps][kQSlots], l[kWarps][kQSlots];
};

// The block's query slots: group qg = blockIdx.z holds query heads q0 .. q0 + nq - 1 of the KV head.
struct QueryGroup {
  int q0, nq;
};
__device__ __forceinline__ QueryGroup query_group(const DecodeArgs& a) {
  const int q0 = kQSlots * static_cast<int>(blockIdx.z);
  const int left = a.G - q0;
  return {q0, left < kQSlots ? left : kQSlots};
}
// The query row slot g of this block reads (a clamped row for unused slots; their results are dropped).
template <int HD>
__device__ __forceinline__ const uint16_t* query_row(const DecodeArgs& a, int b, int h, const QueryGroup& qg, int g) {
  return a.q + (static_cast<int64_t>(b) * a.Hq + h * a.G + qg.q0 + min(g, qg.nq - 1)) * HD;
}

// Combines the block's warps exactly and writes one partial per (split, query slot); with DecodeArgs::arrivals set,
// the unit's last block then merges the unit (decode/unit_merge.cuh). `fin(mt, rh, j, acc)`
// turns the thread's accumulator value of m-tile mt, row half rh, query slot 2t + j into the output channel
// value (PV bias / channel scale / zero point of the format); st.l must be summed over g by the caller.
template <int HD, class Fin>
__device__ __forceinline__ void block_partial(const WarpState<HD>& st, Fin fin, const DecodeArgs& a, const QueryGroup& qg,
                                              int64_t bh, int part, CombineSmem<HD>& sm, int warp, int g, int t) {
  constexpr int MT = Tiles<HD>::MT, CPT = Tiles<HD>::CPT;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int qs = 2 * t + j;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      sm.o[warp][qs][CPT * g + mt] = fin(mt, 0, j, st.acc[mt][j]);
      sm.o[warp][qs][CPT * g + MT + mt] = fin(mt, 1, j, st.acc[mt][2 + j]);
    }
    if (g == 0) { sm.m[warp][qs] = st.m[j]; sm.l[warp][qs] = st.l[j]; }
  }
  __syncthreads();
  for (int ch = threadIdx.x; ch < HD; ch += kWarps * 32) {
    for (int qs = 0; qs < qg.nq; ++qs) {
      float M = -INFINITY;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm.m[w][qs]);
      float o = 0.f, l = 0.f;
      if (M != -INFINITY) {
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
          const float e = exp2f(sm.m[w][qs] - M);
          o += e * sm.o[w][qs][ch];
          l += e * sm.l[w][qs];
        }
      }
      const int64_t i = (bh * a.np + part) * a.QS + qg.q0 + qs;
      a.part_o[i * HD + ch] = o;
      if (ch == 0) { a.part_ml[i * 2] = M; a.part_ml[i * 2 + 1] = l; }
    }
  }
  static_assert(sizeof(CombineSmem<HD>) >= kUnitMergeFloats * sizeof(float), "the in-grid merge's scratch aliases CombineSmem");
  if (a.arrivals) merge_unit_if_last<HD>(a, qg.q0, qg.nq, bh, reinterpret_cast<float*>(&sm));
}

// Partial of a block that only saw BF16 tiles (no format-specific terms).
template <int HD>
__device__ __forceinline__ void block_partial_bf16(WarpState<HD> st, const DecodeArgs& a, const QueryGroup& qg, int64_t bh, int part,
                                                   CombineSmem<HD>& sm, int warp, int g, int t) {
  st.l[0] = sum_over_g(st.l[0]);
  st.l[1] = sum_over_g(st.l[1]);
  block_partial<HD>(st, [](int, int, int, float v) { return v; }, a, qg, bh, part, sm, warp, g, t);
}

}  // namespace
}  // namespace oscar::kernels
