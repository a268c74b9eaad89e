// decode/rotate_rows.cuh: dense-matrix rotation of a few rows at a time (the query before a decode, the new token
// of an append, the merged output after a decode), y_j = fma chain over i ascending of x_i M[i][j] from 0 (or of
// x_i M[j][i] for the transposed rotation o = o' R^T): oscar/rotate_math.h's rule, bit-exact with the register path.
// One warp per (run of kRowsPerBlock consecutive rows, 32-column slice): the slice of the matrix (head_dim x 32
// floats) and the row are staged in shared memory with every load in flight at once, then lane c runs column c's
// chain; the slice is loaded again only when the next row's matrix differs (a GQA group's query heads, a layer's
// shared matrix or one KV head's tokens in a row order that keeps them together read it once). The register path
// (each row's lanes reading the whole matrix in dependent rounds) waited on L2/DRAM latency 8-16 times per row: ~12 us
// per call at batch 1 for the query, ~30 us for the output. Device-only, internal linkage.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "decode/mma.cuh"
#include "oscar/float_formats.h"

namespace oscar::kernels {
namespace {

// Consecutive rows per block: a GQA group of 4 query heads under one KV head's matrix, or 4 tokens of one KV head.
constexpr int kRowsPerBlock = 4;

// Rows: a functor with  int64_t count() const;  const void* src(int64_t r) const (bf16 or float row, InF);
// const float* matrix(int64_t r) const (HD x HD, row-major);  void* dst(int64_t r) const (nullptr: skip the row;
// bf16 rounded or float, OutF).  TRANSPOSE: use M^T (o = o' R^T).
template <int HD, bool InF, bool OutF, bool TRANSPOSE, class Rows>
__global__ void __launch_bounds__(32) rotate_rows_kernel(Rows rows) {
  constexpr int SL = 32;                     // columns per block
  __shared__ float tile[HD][SL + 1];         // tile[i][c] = M[i][col0 + c] (or M[col0 + c][i] transposed)
  __shared__ float x[HD];
  const int lane = threadIdx.x;
  const int col0 = blockIdx.x * SL;
  const int64_t count = rows.count();
  const float* loaded = nullptr;  // the matrix whose slice the tile holds
  const int64_t step = static_cast<int64_t>(gridDim.y) * kRowsPerBlock;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * kRowsPerBlock; r0 < count; r0 += step) {
    for (int64_t r = r0; r < r0 + kRowsPerBlock && r < count; ++r) {
      void* dst = rows.dst(r);
      if (dst == nullptr) continue;  // whole block
      const float* M = rows.matrix(r);
      // the row: HD values, as floats
#pragma unroll
      for (int i = lane; i < HD; i += 32) {
        if constexpr (InF) x[i] = static_cast<const float*>(rows.src(r))[i];
        else x[i] = bf16_bits_to_float(static_cast<const uint16_t*>(rows.src(r))[i]);
      }
      // the slice: HD x 32 floats, 64 loads in flight per lane at a time (block-uniform: M is the same for every lane)
      constexpr int BATCH = HD < 64 ? HD : 64;
      if (M != loaded) {
        loaded = M;
#pragma unroll
        for (int k0 = 0; k0 < HD; k0 += BATCH) {
          float v[BATCH];
#pragma unroll
          for (int k = 0; k < BATCH; ++k) {
            if constexpr (!TRANSPOSE) v[k] = __ldg(M + static_cast<int64_t>(k0 + k) * HD + col0 + lane);  // row k0+k, one line
            else v[k] = __ldg(M + static_cast<int64_t>(col0) * HD + (k0 + k) * 32 + lane);  // rows col0.., coalesced
          }
#pragma unroll
          for (int k = 0; k < BATCH; ++k) {
            if constexpr (!TRANSPOSE) {
              tile[k0 + k][lane] = v[k];
            } else {  // element e = (k0 + k) * 32 + lane of the 32 x HD block is M[col0 + e / HD][e % HD]
              const int e = (k0 + k) * 32 + lane;
              tile[e % HD][e / HD] = v[k];
            }
          }
        }
      }
      __syncwarp();
      float acc = 0.f;
#pragma unroll 16
      for (int i = 0; i < HD; ++i) acc = fmaf(x[i], tile[i][lane], acc);
      if constexpr (OutF) static_cast<float*>(dst)[col0 + lane] = acc;
      else static_cast<uint16_t*>(dst)[col0 + lane] = static_cast<uint16_t>(__float_as_uint(round_to_bf16(acc)) >> 16);
      __syncwarp();  // the next row reuses x and tile
    }
  }
}

template <int HD, bool InF, bool OutF, bool TRANSPOSE, class Rows>
void launch_rotate_rows(const Rows& rows, int64_t count, cudaStream_t s) {
  if (count <= 0) return;
  const int64_t runs = (count + kRowsPerBlock - 1) / kRowsPerBlock;
  const unsigned ys = static_cast<unsigned>(runs < 65535 ? runs : 65535);
  rotate_rows_kernel<HD, InF, OutF, TRANSPOSE><<<dim3(HD / 32, ys), 32, 0, s>>>(rows);
}

}  // namespace
}  // namespace oscar::kernels
