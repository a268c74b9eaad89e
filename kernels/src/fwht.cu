// fwht.cu: in-place fast Walsh-Hadamard transform, one warp per row, templated on head_dim and on the
// stored element (float32, or bf16 bits widened to float, transformed in float, rounded back to nearest
// even). Lane l holds elements [l*P, l*P+P) with P = HD/32: strides < P are butterflies in registers,
// strides >= P exchange with lane l ^ (stride/P) by shuffle (decode/rotate.cuh's fwht_lanes, shared with the in-kernel
// rotations). Same operation order as fwht_math.h.
#include <cuda_runtime.h>
#include "api_util.h"
#include "decode/rotate.cuh"
#include "oscar/float_formats.h"
#include "oscar/fwht_math.h"
#include "oscar_kernels.h"

namespace oscar::kernels {

__device__ __forceinline__ float load_elem(const float* p) { return *p; }
__device__ __forceinline__ float load_elem(const uint16_t* p) { return bf16_bits_to_float(*p); }
__device__ __forceinline__ void store_elem(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_elem(uint16_t* p, float v) { *p = float_to_bf16_bits(v); }

template <int HD, class T>
__global__ void fwht_rows_kernel(T* __restrict__ data, int64_t rows, bool normalize) {
  constexpr int P = HD / 32;
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (row >= rows) return;
  T* x = data + row * HD + lane * P;
  float v[P];
#pragma unroll
  for (int i = 0; i < P; ++i) v[i] = load_elem(x + i);
  fwht_lanes<P, 32>(v, lane, 0xffffffffu);
  if (normalize) {
    const float c = fwht_scale(HD);
#pragma unroll
    for (int i = 0; i < P; ++i) v[i] *= c;
  }
#pragma unroll
  for (int i = 0; i < P; ++i) store_elem(x + i, v[i]);
}

template <int HD, class T>
static oscar_status launch_fwht(T* data, int64_t rows, bool normalize, cudaStream_t stream, const char* fn,
                                oscar_error* err) {
  constexpr int kWarps = 8;
  const int64_t blocks = (rows + kWarps - 1) / kWarps;
  if (blocks > 0x7fffffff) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: rows=%lld is too many", fn, (long long)rows);
  fwht_rows_kernel<HD, T><<<static_cast<unsigned>(blocks), kWarps * 32, 0, stream>>>(data, rows, normalize);
  return api::check_launch(err, fn);
}

// Argument checks and the one place where head_dim is dispatched to a compiled kernel.
template <class T>
static oscar_status fwht_rows(const char* fn, T* data, int64_t rows, int32_t head_dim, int32_t normalize, void* stream,
                              oscar_error* err) {
  if (rows < 0) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: rows=%lld is negative", fn, (long long)rows);
  if (rows == 0) return OSCAR_OK;
  if (!data) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: data is NULL", fn);
  if (!api::aligned(data, 16))
    return api::fail(err, OSCAR_ERR_MISALIGNED, "%s: data %p is not 16-byte aligned", fn, static_cast<const void*>(data));
  const auto s = static_cast<cudaStream_t>(stream);
  const bool norm = normalize != 0;
  switch (head_dim) {
    case 32: return launch_fwht<32>(data, rows, norm, s, fn, err);
    case 64: return launch_fwht<64>(data, rows, norm, s, fn, err);
    case 128: return launch_fwht<128>(data, rows, norm, s, fn, err);
    case 256: return launch_fwht<256>(data, rows, norm, s, fn, err);
    case 512: return launch_fwht<512>(data, rows, norm, s, fn, err);
    default:
      return api::fail(err, OSCAR_ERR_UNSUPPORTED, "%s: head_dim=%d unsupported (a power of two in [32, 512] is required)", fn,
                       head_dim);
  }
}

}  // namespace oscar::kernels

extern "C" oscar_status oscar_fwht_f32(float* data, int64_t rows, int32_t head_dim, int32_t normalize,
                                       void* stream, oscar_error* err) {
  return oscar::kernels::fwht_rows("oscar_fwht_f32", data, rows, head_dim, normalize, stream, err);
}

extern "C" oscar_status oscar_fwht_bf16(void* data, int64_t rows, int32_t head_dim, int32_t normalize,
                                        void* stream, oscar_error* err) {
  return oscar::kernels::fwht_rows("oscar_fwht_bf16", static_cast<uint16_t*>(data), rows, head_dim, normalize, stream, err);
}
