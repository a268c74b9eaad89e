// decode/rotate.cuh: in-kernel rotation of a bf16 row held by HD/8 consecutive lanes, 8 channels per lane
// (lane li of the row owns channels 8 li .. 8 li + 7), by the rule of oscar/rotate_math.h: the normalized
// Walsh-Hadamard transform (butterflies in registers and shuffles, in fwht_inplace's order) or a dense matrix R
// (fma chain over the input channels ascending); the result is rounded to bf16. Device-only, internal linkage.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "decode/args.h"
#include "decode/mma.cuh"
#include "oscar/float_formats.h"
#include "oscar/fwht_math.h"

namespace oscar::kernels {
namespace {

// The lanes of this lane's row: HD/8 consecutive lanes (the mask of its row group within the warp).
template <int HD>
__device__ __forceinline__ unsigned row_lanes_mask(int lane) {
  constexpr int LR = HD / 8;
  if constexpr (LR == 32) return 0xffffffffu;
  else return ((1u << LR) - 1u) << (lane & ~(LR - 1));
}

// The unnormalized Walsh-Hadamard butterflies of a row held as P consecutive values per lane by LANES consecutive lanes
// (lane li of the row holds elements [li P, li P + P)), in fwht_inplace's order: strides < P in registers, strides >= P
// with lane li ^ (stride / P) by shuffle within the row's lanes (mask).
template <int P, int LANES>
__device__ __forceinline__ void fwht_lanes(float (&x)[P], int li, unsigned mask) {
#pragma unroll
  for (int s = 1; s < P; s <<= 1)
#pragma unroll
    for (int i = 0; i < P; i += 2 * s)
#pragma unroll
      for (int j = i; j < i + s; ++j) {
        const float a = x[j], b = x[j + s];
        x[j] = a + b;
        x[j + s] = a - b;
      }
#pragma unroll
  for (int ls = 1; ls < LANES; ls <<= 1) {
    const bool upper = (li & ls) != 0;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const float other = __shfl_xor_sync(mask, x[i], ls, LANES);
      x[i] = upper ? (other - x[i]) : (x[i] + other);
    }
  }
}

// x: this lane's 8 channels of the row; kind 1 Hadamard, 2 matrix R (this head's); mask: the row's lanes.
template <int HD>
__device__ __forceinline__ void rotate_row8(float (&x)[8], int kind, const float* __restrict__ R, int li, unsigned mask) {
  constexpr int LR = HD / 8;
  if (kind == 1) {
    fwht_lanes<8, LR>(x, li, mask);
    const float c = fwht_scale(HD);
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] *= c;
  } else if (kind == 2) {
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll 2  // two source lanes' matrix rows in flight (the loads wait on L2, often on DRAM)
    for (int src = 0; src < LR; ++src) {
      float xs[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) xs[k] = __shfl_sync(mask, x[k], src, LR);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float4* r = reinterpret_cast<const float4*>(R + static_cast<int64_t>(src * 8 + k) * HD + li * 8);
        const float4 a = __ldg(r), b = __ldg(r + 1);
        acc[0] = fmaf(xs[k], a.x, acc[0]); acc[1] = fmaf(xs[k], a.y, acc[1]);
        acc[2] = fmaf(xs[k], a.z, acc[2]); acc[3] = fmaf(xs[k], a.w, acc[3]);
        acc[4] = fmaf(xs[k], b.x, acc[4]); acc[5] = fmaf(xs[k], b.y, acc[5]);
        acc[6] = fmaf(xs[k], b.z, acc[6]); acc[7] = fmaf(xs[k], b.w, acc[7]);
      }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = acc[i];
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = round_to_bf16(x[i]);
}

// 8 floats that are bf16 values -> their packed bits.
__device__ __forceinline__ uint4 pack8_bf16(const float (&x)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) w[i] = (__float_as_uint(x[2 * i]) >> 16) | (__float_as_uint(x[2 * i + 1]) & 0xffff0000u);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// This lane's 8 bf16 channels w of a row of KV head h, rotated by its key (value = false) or value rotation.
template <int HD>
__device__ __forceinline__ uint4 rotate_piece(uint4 w, const RotArgs& rot, bool value, int h, int li, unsigned mask) {
  float x[8];
  bf16x8_to_float(w, x);
  rotate_row8<HD>(x, rot.kind, rot.kind == 2 ? head_matrix(value ? rot.value : rot.key, rot.per_head, h, HD) : nullptr, li, mask);
  return pack8_bf16(x);
}

}  // namespace
}  // namespace oscar::kernels
