// decode/rotate_q.cu: query rotation before a rotated decode (decode/rotate_q.h) and the check of an options' oscar_rotation.
#include "api_util.h"
#include "decode/mma.cuh"
#include "decode/rotate.cuh"
#include "decode/rotate_q.h"
#include "decode/rotate_rows.cuh"
#include "decode/shapes.h"
#include "oscar_kv.h"

namespace oscar::kernels {
namespace {

template <int HD>
__global__ void __launch_bounds__(32) rotate_q_kernel(RotArgs rot, const uint16_t* __restrict__ q, uint16_t* __restrict__ dst,
                                                       int64_t rows, int Hq, int G) {
  constexpr int LR = HD / 8;
  const int lane = threadIdx.x & 31, li = lane & (LR - 1);
  const unsigned mask = row_lanes_mask<HD>(lane);
  int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / LR;
  if (row >= rows) return;  // whole row group
  const int hkv = static_cast<int>(row % Hq) / G;
  reinterpret_cast<uint4*>(dst + row * HD)[li] = rotate_piece<HD>(reinterpret_cast<const uint4*>(q + row * HD)[li], rot, false, hkv, li, mask);
}

// The query rows of a matrix rotation: row r = (sequence, query head), R_K of its KV head.
struct QueryRows {
  const uint16_t* q;
  uint16_t* out;
  const float* key;
  int64_t rows;
  int Hq, G, per_head, hd;
  __device__ int64_t count() const { return rows; }
  __device__ const void* src(int64_t r) const { return q + r * hd; }
  __device__ const float* matrix(int64_t r) const { return head_matrix(key, per_head, static_cast<int>(r % Hq) / G, hd); }
  __device__ void* dst(int64_t r) const { return out + r * hd; }
};

}  // namespace

oscar_status launch_rotate_q(const RotArgs& rot, const uint16_t* q, uint16_t* dst, int64_t rows, int Hq, int G, int head_dim,
                             cudaStream_t s, oscar_error* err, const char* fn) {
  if (rot.kind == 2) {  // dense R_K: one warp per (row, 32-column slice), the slice staged (decode/rotate_rows.cuh)
    const QueryRows qr{q, dst, rot.key, rows, Hq, G, rot.per_head, head_dim};
    switch (head_dim) {
#define OSCAR_ROTATE_QM_CASE(HD) \
  case HD: launch_rotate_rows<HD, false, false, false>(qr, rows, s); break;
      OSCAR_KV_HEAD_DIMS(OSCAR_ROTATE_QM_CASE)
#undef OSCAR_ROTATE_QM_CASE
      default: return api::fail(err, OSCAR_ERR_UNSUPPORTED, "%s: head_dim=%d has no rotation kernel (64, 128 or 256)", fn, head_dim);
    }
    return api::check_launch(err, fn);
  }
  // Hadamard: butterflies in registers; one warp per block so that the rows spread over the SMs.
  const int64_t threads = rows * (head_dim / 8);
  const unsigned blocks = static_cast<unsigned>((threads + 31) / 32);
  switch (head_dim) {
#define OSCAR_ROTATE_Q_CASE(HD) \
  case HD: rotate_q_kernel<HD><<<blocks, 32, 0, s>>>(rot, q, dst, rows, Hq, G); break;
    OSCAR_KV_HEAD_DIMS(OSCAR_ROTATE_Q_CASE)
#undef OSCAR_ROTATE_Q_CASE
    default: return api::fail(err, OSCAR_ERR_UNSUPPORTED, "%s: head_dim=%d has no rotation kernel (64, 128 or 256)", fn, head_dim);
  }
  return api::check_launch(err, fn);
}

oscar_status check_rotation(const oscar_rotation* r, const char* fn, oscar_error* err, RotArgs& out) {
  out = RotArgs{};
  if (!r || r->kind == OSCAR_ROTATION_NONE) return OSCAR_OK;
  if (r->kind != OSCAR_ROTATION_HADAMARD && r->kind != OSCAR_ROTATION_MATRIX)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: options->rotation.kind=%d unknown (0 none, 1 Hadamard, 2 matrix)", fn, r->kind);
  if (r->kind == OSCAR_ROTATION_MATRIX) {
    if (!r->key || !r->value)
      return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: options->rotation.key or options->rotation.value is NULL", fn);
    if (!api::aligned(r->key, 16) || !api::aligned(r->value, 16))
      return api::fail(err, OSCAR_ERR_MISALIGNED, "%s: options->rotation.key/value must be 16-byte aligned", fn);
    if (r->per_head != 0 && r->per_head != 1)
      return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: options->rotation.per_head=%d must be 0 or 1", fn, r->per_head);
  }
  out.kind = r->kind;
  out.per_head = r->kind == OSCAR_ROTATION_MATRIX ? r->per_head : 0;
  out.key = r->key;
  out.value = r->value;
  return OSCAR_OK;
}

}  // namespace oscar::kernels
