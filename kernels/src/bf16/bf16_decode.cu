// bf16/bf16_decode.cu: the like-for-like BF16 baseline decode (oscar_bf16_decode): k, v bf16
// [B*Hkv][capacity][head_dim], the same warp structure, split plan and merge as the quantized formats.
#include "api_util.h"
#include "decode/bf16_tile.cuh"
#include "decode/checks.h"
#include "decode/merge.h"
#include "decode/partials.cuh"
#include "decode/shapes.h"
#include "oscar_kv.h"

namespace oscar::kernels {
namespace {

constexpr int kBf16Chunk = 16;

// blockIdx.x = split, blockIdx.y = b * Hkv + h, blockIdx.z = query group.
template <int HD>
__global__ void __launch_bounds__(kWarps * 32) bf16_decode_kernel(const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
                                                                  int64_t cap, DecodeArgs a) {
  __shared__ __align__(16) uint16_t ps_all[kWarps][16 * 8];
  __shared__ CombineSmem<HD> cs;
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t bh = blockIdx.y;
  const int b = static_cast<int>(bh / a.Hkv), h = static_cast<int>(bh % a.Hkv);
  const QueryGroup qg = query_group(a);
  const int64_t L = min64(max(0, a.lens[b]), cap);
  uint32_t qb[Tiles<HD>::MT][2];
  load_q_bf16<HD>(query_row<HD>(a, b, h, qg, g), g < qg.nq, t, qb);
  WarpState<HD> st;
  state_init(st);
  const uint16_t* kb = k + bh * cap * HD;
  const uint16_t* vb = v + bh * cap * HD;
  const int64_t start = blockIdx.x * a.split_len, end = min64(L, start + a.split_len);
  for (int64_t base = start + warp * kBf16Chunk; base < end; base += kWarps * kBf16Chunk) {
    const int n = static_cast<int>(min64(kBf16Chunk, end - base));
    bf16_tile<HD>(st, kb, vb, [&](int i) { return base + i; }, n, qb, a.sl2, a.cap2, ps_all[warp], g, t);
  }
  block_partial_bf16<HD>(st, a, qg, bh, blockIdx.x, cs, warp, g, t);
}

template <int HD>
void launch(const uint16_t* k, const uint16_t* v, int64_t cap, const DecodeArgs& a, int64_t bh, cudaStream_t s) {
  const dim3 grid(a.nsplit, static_cast<unsigned>(bh), a.QS / kQSlots);
  bf16_decode_kernel<HD><<<grid, kWarps * 32, 0, s>>>(k, v, cap, a);
}

}  // namespace
}  // namespace oscar::kernels

using namespace oscar;

extern "C" oscar_status oscar_bf16_decode(const void* k, const void* v, int32_t batch, int32_t num_kv_heads, int64_t capacity,
                                          int32_t head_dim, const void* q, int32_t num_q_heads, const int32_t* seq_lens,
                                          int32_t max_seq_len, float softmax_scale, float* out, void* workspace,
                                          size_t workspace_bytes, void* stream, oscar_error* err) {
  const char* fn = "oscar_bf16_decode";
  bool compiled = false;
#define OSCAR_BF16_HD(HD) compiled = compiled || head_dim == HD;
  OSCAR_KV_HEAD_DIMS(OSCAR_BF16_HD)
#undef OSCAR_BF16_HD
  if (!compiled)
    return api::fail(err, OSCAR_ERR_UNSUPPORTED, "%s: head_dim=%d unsupported (64, 128 or 256)", fn, head_dim);
  if (!k || !v) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: k or v is NULL", fn);
  if (!api::aligned(k, 16) || !api::aligned(v, 16)) return api::fail(err, OSCAR_ERR_MISALIGNED, "%s: k/v must be 16-byte aligned", fn);
  if (batch <= 0 || num_kv_heads <= 0 || capacity < 0)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch=%d num_kv_heads=%d capacity=%lld invalid", fn, batch, num_kv_heads,
                     (long long)capacity);
  oscar_status st = kernels::check_decode_args(fn, q, num_q_heads, num_kv_heads, seq_lens, max_seq_len, capacity, out, workspace, err);
  if (st != OSCAR_OK) return st;
  const int64_t bh = static_cast<int64_t>(batch) * num_kv_heads;
  const int units = static_cast<int>(bh * kernels::plan::query_groups(num_q_heads / num_kv_heads));
  const kernels::plan::Plan p = kernels::plan::bf16_plan(units, max_seq_len, kernels::plan::sm_count());
  kernels::DecodeArgs a;
  st = kernels::plan_decode_args(a, p, fn, q, seq_lens, num_q_heads, num_kv_heads, bh, head_dim, softmax_scale, workspace,
                                 workspace_bytes, err);
  if (st != OSCAR_OK) return st;
  const auto* kk = static_cast<const uint16_t*>(k);
  const auto* vv = static_cast<const uint16_t*>(v);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (head_dim) {
#define OSCAR_BF16_CASE(HD) \
  case HD: kernels::launch<HD>(kk, vv, capacity, a, bh, s); break;
    OSCAR_KV_HEAD_DIMS(OSCAR_BF16_CASE)
#undef OSCAR_BF16_CASE
  }
  st = api::check_launch(err, fn);
  if (st != OSCAR_OK) return st;
  return kernels::launch_merge(a, head_dim, batch, out, s, err, fn);
}
