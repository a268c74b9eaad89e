// decode/checks.h: argument checks shared by the C entry points of both formats and the BF16 baseline
// (host only): bf16 inputs of prefill/append, the append bound, decode shapes/pointers/lengths, and the
// per-call fields of a planned decode step (after checking the caller's workspace against the plan).
#pragma once
#include "api_util.h"
#include "decode/args.h"
#include "decode/split_plan.h"
#include "oscar_kv.h"

namespace oscar::kernels {

constexpr int kMaxQueryGroup = 16;  // query heads per KV head the decode entry points accept
constexpr int kUnitsPerKvHead = (kMaxQueryGroup + 7) / 8;  // query groups (grid z) of one KV head at most: a cache's arrival counters per (sequence, KV head)

// `what`: "k, v" or "k_new, v_new".
inline oscar_status check_write_args(const char* fn, const char* what, const void* k, const void* v, const int32_t* lens, oscar_error* err) {
  if (!k || !v || !lens) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: %s or seq_lens is NULL", fn, what);
  if (!api::aligned(k, 16) || !api::aligned(v, 16) || !api::aligned(lens, 4))
    return api::fail(err, OSCAR_ERR_MISALIGNED, "%s: %s must be 16-byte aligned and seq_lens 4-byte aligned", fn, what);
  return OSCAR_OK;
}
inline oscar_status check_append_len(const char* fn, int32_t max_seq_len, int64_t capacity, oscar_error* err) {
  if (max_seq_len < 0 || static_cast<int64_t>(max_seq_len) + 1 > capacity)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: max_seq_len=%d: appending would exceed the capacity %lld", fn, max_seq_len,
                     (long long)capacity);
  return OSCAR_OK;
}
inline oscar_status check_decode_args(const char* fn, const void* q, int32_t hq, int32_t hkv, const int32_t* lens, int32_t max_len,
                                      int64_t capacity, float* out, void* ws, oscar_error* err) {
  if (!q || !lens || !out || !ws) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: q, seq_lens, out or workspace is NULL", fn);
  if (!api::aligned(q, 16) || !api::aligned(out, 16) || !api::aligned(ws, 16) || !api::aligned(lens, 4))
    return api::fail(err, OSCAR_ERR_MISALIGNED, "%s: q/out/workspace must be 16-byte aligned", fn);
  if (hq <= 0 || hkv <= 0 || hq % hkv != 0 || hq / hkv > kMaxQueryGroup)
    return api::fail(err, OSCAR_ERR_UNSUPPORTED,
                     "%s: num_q_heads=%d num_kv_heads=%d unsupported (a multiple, at most %d query heads per KV head)", fn, hq, hkv,
                     kMaxQueryGroup);
  if (max_len < 0) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: max_seq_len=%d is negative", fn, max_len);
  if (max_len > capacity)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: max_seq_len=%d exceeds the cache capacity %lld", fn, max_len, (long long)capacity);
  return OSCAR_OK;
}

// Fills a decode step's arguments from its plan after checking the workspace (partials + extra_bytes) and the grid's limits.
inline oscar_status plan_decode_args(DecodeArgs& a, const plan::Plan& p, const char* fn, const void* q, const int32_t* lens, int32_t hq,
                                     int32_t hkv, int64_t bh, int head_dim, float softmax_scale, void* workspace, size_t workspace_bytes,
                                     oscar_error* err, size_t extra_bytes = 0) {
  if (bh > 65535) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch * kv_heads = %lld exceeds 65535", fn, (long long)bh);
  a.G = hq / hkv;
  a.QS = 8 * plan::query_groups(a.G);
  a.nsplit = p.nsplit; a.nwin = p.nwin; a.np = p.parts(); a.split_len = p.split_len;
  const size_t need = plan::workspace_bytes(bh, a.np, a.QS, head_dim) + extra_bytes;  // extra: rotated queries at the tail
  if (workspace_bytes < need)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: workspace_bytes=%zu < %zu needed (oscar_decode_workspace_bytes)", fn,
                     workspace_bytes, need);
  a.q = static_cast<const uint16_t*>(q);
  a.lens = lens;
  a.Hq = hq; a.Hkv = hkv;
  a.sl2 = softmax_scale * kLog2e;
  a.part_o = static_cast<float*>(workspace);
  a.part_ml = a.part_o + static_cast<size_t>(bh) * a.np * a.QS * head_dim;
  return OSCAR_OK;
}

}  // namespace oscar::kernels
