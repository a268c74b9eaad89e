// decode/merge.cu: the split merge (decode/merge.h): one block of head_dim threads per (sequence, query head),
// o = sum_p 2^(m_p - M) o_p / sum_p 2^(m_p - M) l_p (log2 domain); a head with no token gets 0.
#include "api_util.h"
#include "decode/merge.h"
#include "decode/shapes.h"
#include "oscar/fwht_math.h"

#include <cmath>

namespace oscar::kernels {
namespace {

template <int HD>
__global__ void __launch_bounds__(HD) merge_kernel(DecodeArgs a, float* __restrict__ out) {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");  // the decode grid has finished, its writes are visible
  __shared__ float red[HD / 32];
  const int64_t bq = blockIdx.x;
  const int b = static_cast<int>(bq / a.Hq), hq = static_cast<int>(bq % a.Hq);
  const int64_t bh = static_cast<int64_t>(b) * a.Hkv + hq / a.G;
  const int qs = hq % a.G;
  const int64_t stride = static_cast<int64_t>(a.QS);  // parts p of this slot: index (bh * np + p) * QS + qs
  const float* ml = a.part_ml + (bh * a.np * stride + qs) * 2;
  const float* po = a.part_o + (bh * a.np * stride + qs) * HD + threadIdx.x;
  float M = -INFINITY;
  for (int p = threadIdx.x; p < a.np; p += HD) M = fmaxf(M, ml[p * stride * 2]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = M;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < HD / 32; ++w) M = fmaxf(M, red[w]);
  float num = 0.f, den = 0.f;
  if (M != -INFINITY) {
#pragma unroll 16
    for (int p = 0; p < a.np; ++p) {
      const float w = exp2f(ml[p * stride * 2] - M);
      den += w * ml[p * stride * 2 + 1];
      num += w * po[static_cast<int64_t>(p) * stride * HD];
    }
  }
  const float o = den > 0.f ? num / den : 0.f;
  if (a.rot.kind == 0) {
    out[bq * HD + threadIdx.x] = o;
    return;
  }
  // Un-rotation by R_V (oscar/rotate_math.h): the row in shared memory, then Hadamard butterflies in
  // fwht_inplace's order or the fma chain o_j = sum_i o'_i R_V[j][i] (i ascending).
  __shared__ float row[HD];
  const int j = threadIdx.x;
  row[j] = o;
  __syncthreads();
  if (a.rot.kind == 1) {
    for (int s = 1; s < HD; s <<= 1) {
      if ((j & s) == 0) {
        const float x = row[j], y = row[j + s];
        row[j] = x + y;
        row[j + s] = x - y;
      }
      __syncthreads();
    }
    out[bq * HD + j] = row[j] * fwht_scale(HD);
  } else {
    const float* R = a.rot.value + (a.rot.per_head ? static_cast<int64_t>(hq / a.G) * HD * HD : 0) + static_cast<int64_t>(j) * HD;
    float acc = 0.f;
    for (int i = 0; i < HD; ++i) acc = fmaf(row[i], __ldg(R + i), acc);
    out[bq * HD + j] = acc;
  }
}

template <int HD>
oscar_status launch(const DecodeArgs& a, int batch, float* out, cudaStream_t s, oscar_error* err, const char* fn) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(static_cast<int64_t>(batch) * a.Hq));
  cfg.blockDim = dim3(HD);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaLaunchKernelEx(&cfg, merge_kernel<HD>, a, out);
  return api::check_launch(err, fn);
}

}  // namespace

oscar_status launch_merge(const DecodeArgs& a, int head_dim, int batch, float* out, cudaStream_t s, oscar_error* err, const char* fn) {
  switch (head_dim) {
#define OSCAR_MERGE_CASE(HD) \
  case HD: return launch<HD>(a, batch, out, s, err, fn);
    OSCAR_KV_HEAD_DIMS(OSCAR_MERGE_CASE)
#undef OSCAR_MERGE_CASE
    default: return api::fail(err, OSCAR_ERR_UNSUPPORTED, "%s: head_dim=%d has no merge kernel (64, 128 or 256)", fn, head_dim);
  }
}

}  // namespace oscar::kernels
