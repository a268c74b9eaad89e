// decode/unit_merge.cuh: the split merge folded into the decode grid (DecodeArgs::arrivals set): after writing its
// partial, every block of a unit (sequence, KV head, query group) counts its arrival on the unit's counter; the last
// of the unit's np blocks merges the unit's partials into out with merge_kernel's arithmetic in merge_kernel's order
// (same bits) and resets the counter, so that the counters are zero again after every decode. A dense R_V is left to
// the rotation kernel that follows (o' parked in the slot's first partial, as the merge kernel does). Device-only.
#pragma once
#include <cuda/atomic>

#include "decode/args.h"
#include "decode/levers.h"
#include "decode/split_plan.h"
#include "decode/warp_state.cuh"
#include "oscar/fwht_math.h"

namespace oscar::kernels {
namespace {

// Floats of shared memory the merge needs (weights and sums of every part of 8 slots, their denominators).
constexpr int kUnitMergeFloats = 2 * kQSlots * plan::kFusedMaxParts + kQSlots;

// Called by every thread of a block of unit (bh, blockIdx.z) after its partial writes; the unit's query slots are
// q0 .. q0 + nq - 1. `scratch`: kUnitMergeFloats floats of shared memory the block no longer needs.
template <int HD>
__device__ __forceinline__ void merge_unit_if_last(const DecodeArgs& a, int q0, int nq, int64_t bh, float* scratch) {
  __shared__ int last;
  // The block's partial writes happen before its arrival (the barrier, then thread 0's release); the last block's
  // acquire then makes every block's partials visible to all its threads (the barrier after it).
  if (!OSCAR_LEVER_FENCE) __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    cuda::atomic_ref<unsigned, cuda::thread_scope_device> count(a.arrivals[bh * gridDim.z + blockIdx.z]);
    const unsigned prev = OSCAR_LEVER_FENCE ? count.fetch_add(1u, cuda::memory_order_acq_rel) : atomicAdd(&a.arrivals[bh * gridDim.z + blockIdx.z], 1u);
    last = prev + 1 == static_cast<unsigned>(a.np);
    if (last) count.store(0u, cuda::memory_order_relaxed);  // every block of the unit has counted: ready for the next decode
  }
  __syncthreads();
  if (!last) return;
  if (!OSCAR_LEVER_FENCE) __threadfence();
  const int np = a.np, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t QS = a.QS, p0 = bh * np * QS + q0;  // partial index of (part p, slot qs): p0 + p * QS + qs
  float* wt = scratch;                                 // [kQSlots][kFusedMaxParts]: 2^(m_p - M)
  float* ls = scratch + kQSlots * plan::kFusedMaxParts;  // [kQSlots][kFusedMaxParts]: l_p
  float* den = ls + kQSlots * plan::kFusedMaxParts;    // [kQSlots]
  static_assert(plan::kFusedMaxParts % 32 == 0, "parts per lane");
  const int hq0 = static_cast<int>(bh % a.Hkv) * a.G + q0;
  // Every load of a phase is issued before its first use: a round trip to L2 costs about as much as the whole merge's
  // arithmetic, and one block does the unit's merge (the merge kernel spreads it over HD threads per query head).
  constexpr int PL = plan::kFusedMaxParts / 32;  // parts per lane
  for (int qs = warp; qs < nq; qs += kWarps) {
    float m[PL], l[PL];
#pragma unroll
    for (int j = 0; j < PL; ++j) {
      const int p = lane + 32 * j;
      const float2 ml = p < np ? __ldcg(reinterpret_cast<const float2*>(a.part_ml) + p0 + p * QS + qs) : make_float2(-INFINITY, 0.f);
      m[j] = ml.x;
      l[j] = ml.y;
    }
    float M = m[0];
#pragma unroll
    for (int j = 1; j < PL; ++j) M = fmaxf(M, m[j]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    float d = 0.f;
    if (a.sinks && M != -INFINITY) {  // the sink joins the denominator only
      const float sink = a.sinks[hq0 + qs] * kLog2e;
      M = fmaxf(M, sink);
      d = exp2f(sink - M);
    }
#pragma unroll
    for (int j = 0; j < PL; ++j) {
      const int p = lane + 32 * j;
      if (p < np) {
        wt[qs * plan::kFusedMaxParts + p] = M != -INFINITY ? exp2f(m[j] - M) : 0.f;
        ls[qs * plan::kFusedMaxParts + p] = l[j];
      }
    }
    __syncwarp();
    if (lane == 0) {
      if (M != -INFINITY) {
#pragma unroll 8
        for (int p = 0; p < np; ++p) d += wt[qs * plan::kFusedMaxParts + p] * ls[qs * plan::kFusedMaxParts + p];
      }
      den[qs] = d;
    }
  }
  __syncthreads();
  // Outputs by 4 channels: sum over the parts in ascending order (the merge kernel's), 16 parts' loads in flight.
  constexpr int C4 = HD / 4;
  const int64_t pstride = QS * C4;  // float4s from one part to the next
  const int ngroups = nq * C4;
  float4 res[kQSlots * C4 / (kWarps * 32) > 0 ? kQSlots * C4 / (kWarps * 32) : 1];
#pragma unroll
  for (int r = 0; r * kWarps * 32 < kQSlots * C4; ++r) {
    const int gi = threadIdx.x + r * kWarps * 32;
    if (gi >= ngroups) break;
    const int qs = gi / C4, c4 = gi % C4;
    const float* w = wt + qs * plan::kFusedMaxParts;
    const float4* src = reinterpret_cast<const float4*>(a.part_o + (p0 + qs) * HD) + c4;
    float4 n = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 16
    for (int p = 0; p < np; ++p) {
      const float4 x = __ldcg(src + p * pstride);
      const float wp = w[p];
      n.x += wp * x.x;
      n.y += wp * x.y;
      n.z += wp * x.z;
      n.w += wp * x.w;
    }
    const float dq = den[qs];
    res[r] = dq > 0.f ? make_float4(n.x / dq, n.y / dq, n.z / dq, n.w / dq) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  __syncthreads();  // every partial read: slot rows may be parked over part 0 below; scratch reused as rows
  float4* row = reinterpret_cast<float4*>(scratch);  // [nq][C4] (Hadamard)
  const int64_t orow = (bh / a.Hkv) * a.Hq + hq0;    // out row of slot 0
#pragma unroll
  for (int r = 0; r * kWarps * 32 < kQSlots * C4; ++r) {
    const int gi = threadIdx.x + r * kWarps * 32;
    if (gi >= ngroups) break;
    const int qs = gi / C4, c4 = gi % C4;
    if (a.rot.kind == 0) reinterpret_cast<float4*>(a.out + (orow + qs) * HD)[c4] = res[r];
    else if (a.rot.kind == 1) row[gi] = res[r];
    else reinterpret_cast<float4*>(a.part_o + (p0 + qs) * HD)[c4] = res[r];  // dense R_V: rotate_rows_kernel follows
  }
  if (a.rot.kind != 1) return;
  float* rowf = scratch;
  const int nout = nq * HD;
  __syncthreads();
  for (int s = 1; s < HD; s <<= 1) {  // fwht_inplace's butterflies, every slot's row at once
    for (int idx = threadIdx.x; idx < nout; idx += kWarps * 32) {
      const int jj = idx % HD;
      if ((jj & s) == 0) {
        const float x = rowf[idx], y = rowf[idx + s];
        rowf[idx] = x + y;
        rowf[idx + s] = x - y;
      }
    }
    __syncthreads();
  }
  for (int idx = threadIdx.x; idx < nout; idx += kWarps * 32) a.out[orow * HD + idx] = rowf[idx] * fwht_scale(HD);
}

}  // namespace
}  // namespace oscar::kernels
