// decode/merge.cu: the split merge (decode/merge.h): one block of head_dim threads per (sequence, query head),
// o = sum_p 2^(m_p - M) o_p / (2^(s_h - M) + sum_p 2^(m_p - M) l_p) (log2 domain; s_h = sink logit of query head h
// in log2 units when DecodeArgs::sinks is set, else no such term); a head with no token gets 0.
#include "api_util.h"
#include "decode/merge.h"
#include "decode/rotate_rows.cuh"
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
  if (a.sinks && M != -INFINITY) {  // the sink joins the denominator only (no token: no output, so none is needed)
    const float sink = a.sinks[hq] * kLog2e;
    M = fmaxf(M, sink);
    den = exp2f(sink - M);
  }
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
  // Un-rotation by R_V (oscar/rotate_math.h): Hadamard butterflies in fwht_inplace's order on the row in shared
  // memory here; a dense R_V in a kernel of its own (the fma chain o_j = sum_i o'_i R_V[j][i], i ascending).
  const int j = threadIdx.x;
  if (a.rot.kind == 1) {
    __shared__ float row[HD];
    row[j] = o;
    __syncthreads();
    for (int s = 1; s < HD; s <<= 1) {
      if ((j & s) == 0) {
        const float x = row[j], y = row[j + s];
        row[j] = x + y;
        row[j + s] = x - y;
      }
      __syncthreads();
    }
    out[bq * HD + j] = row[j] * fwht_scale(HD);
  } else {  // dense R_V: o' goes to this slot's first partial (only thread j reads column j); rotate_rows_kernel follows
    a.part_o[(bh * a.np * stride + qs) * HD + j] = o;
  }
}

// The merged rows of a dense R_V: row r = (sequence, query head), o' in its slot's first partial.
struct MergedRows {
  const float* part_o;
  float* out;
  const float* value;
  int64_t rows;
  int Hq, Hkv, G, np, QS, per_head, hd;
  __device__ int64_t count() const { return rows; }
  __device__ const void* src(int64_t r) const {
    const int64_t b = r / Hq;
    const int hq = static_cast<int>(r % Hq);
    const int64_t bh = b * Hkv + hq / G;
    return part_o + (bh * np * QS + hq % G) * hd;
  }
  __device__ const float* matrix(int64_t r) const { return head_matrix(value, per_head, static_cast<int>(r % Hq) / G, hd); }
  __device__ void* dst(int64_t r) const { return out + r * hd; }
};

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
  if (!a.arrivals) cudaLaunchKernelEx(&cfg, merge_kernel<HD>, a, out);  // else the decode grid merged (decode/unit_merge.cuh)
  if (a.rot.kind == 2) {
    const int64_t rows = static_cast<int64_t>(batch) * a.Hq;
    const MergedRows mr{a.part_o, out, a.rot.value, rows, a.Hq, a.Hkv, a.G, a.np, a.QS, a.rot.per_head, HD};
    launch_rotate_rows<HD, true, true, true>(mr, rows, s);
  }
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
