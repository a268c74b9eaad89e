// omni/omni_api.cu: the oscar-omni C entry points (oscar_kv.h): argument checks, the dispatch table over
// decode/shapes.h, the split plan and the merge.
#include "api_util.h"
#include "decode/checks.h"
#include "decode/merge.h"
#include "decode/quantized_decode.h"
#include "decode/rotate_q.h"
#include "decode/shapes.h"
#include "decode/split_plan.h"
#include "omni/omni_kernels.h"
#include "oscar/omni_format.h"
#include "oscar_kv.h"

namespace oscar::kernels {

const OmniKernels* omni_kernels(int head_dim, int bits) {
#define OSCAR_OMNI_ENTRY(HD, BITS) {HD, BITS, &omni_prefill<HD, BITS>, &omni_append<HD, BITS>, &omni_decode<HD, BITS>},
  static constexpr OmniKernels table[] = {OSCAR_KV_SHAPES(OSCAR_OMNI_ENTRY)};
#undef OSCAR_OMNI_ENTRY
  for (const OmniKernels& e : table)
    if (e.head_dim == head_dim && e.bits == bits) return &e;
  return nullptr;
}

namespace {

using omnifmt::kKeyBlock;
using omnifmt::kResidual;

oscar_status check_omni(const oscar_omni_cache* c, const char* fn, oscar_error* err, OmniView& v, const OmniKernels*& ops) {
  if (!c) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
  ops = omni_kernels(c->head_dim, c->bits);
  if (!ops)
    return api::fail(err, OSCAR_ERR_UNSUPPORTED, "%s: head_dim=%d bits=%d unsupported (compiled: " OSCAR_KV_SHAPES_TEXT ")", fn,
                     c->head_dim, c->bits);
  if (c->batch <= 0 || c->num_kv_heads <= 0)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch=%d num_kv_heads=%d must be positive", fn, c->batch, c->num_kv_heads);
  if (c->body_capacity < 0 || c->body_capacity % kResidual != 0)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: body_capacity=%lld must be a non-negative multiple of %d", fn,
                     (long long)c->body_capacity, kResidual);
  const void* ptrs[7] = {c->k_res, c->v_res, c->k_codes, c->v_codes, c->k_params, c->v_params, c->k_norms};
  const char* names[7] = {"k_res", "v_res", "k_codes", "v_codes", "k_params", "v_params", "k_norms"};
  for (int i = 0; i < 7; ++i) {
    const bool needed = i < 2 || c->body_capacity > 0;
    if (needed && !ptrs[i]) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: cache->%s is NULL", fn, names[i]);
    if (ptrs[i] && !api::aligned(ptrs[i], 16))
      return api::fail(err, OSCAR_ERR_MISALIGNED, "%s: cache->%s %p is not 16-byte aligned", fn, names[i], ptrs[i]);
  }
  if (c->arrivals && !api::aligned(c->arrivals, 4))
    return api::fail(err, OSCAR_ERR_MISALIGNED, "%s: cache->arrivals %p is not 4-byte aligned", fn, static_cast<const void*>(c->arrivals));
  v.B = c->batch; v.Hkv = c->num_kv_heads; v.cap = c->body_capacity;
  v.kr = static_cast<uint16_t*>(c->k_res); v.vr = static_cast<uint16_t*>(c->v_res);
  v.kc = static_cast<uint8_t*>(c->k_codes); v.vc = static_cast<uint8_t*>(c->v_codes);
  v.kp = static_cast<uint32_t*>(c->k_params); v.vp = static_cast<uint32_t*>(c->v_params);
  v.kn = static_cast<uint16_t*>(c->k_norms);
  return OSCAR_OK;
}

}  // namespace
}  // namespace oscar::kernels

using namespace oscar;

extern "C" int oscar_omni_shape_supported(int32_t head_dim, int32_t bits) { return kernels::omni_kernels(head_dim, bits) ? 1 : 0; }

extern "C" int64_t oscar_omni_capacity(const oscar_omni_cache* c) { return c ? c->body_capacity + kernels::kResidual - 1 : 0; }

extern "C" oscar_status oscar_omni_prefill(const oscar_omni_cache* cache, const void* k, const void* v, const int32_t* seq_lens,
                                           int32_t max_len, void* stream, oscar_error* err) {
  return oscar_omni_prefill_rotated(cache, nullptr, k, v, seq_lens, max_len, stream, err);
}

extern "C" oscar_status oscar_omni_prefill_rotated(const oscar_omni_cache* cache, const oscar_rotation* rotation, const void* k,
                                                  const void* v, const int32_t* seq_lens, int32_t max_len, void* stream,
                                                  oscar_error* err) {
  const char* fn = rotation ? "oscar_omni_prefill_rotated" : "oscar_omni_prefill";
  kernels::OmniView cv;
  const kernels::OmniKernels* ops = nullptr;
  oscar_status st = kernels::check_omni(cache, fn, err, cv, ops);
  if (st != OSCAR_OK) return st;
  kernels::RotArgs rot;
  if ((st = kernels::check_rotation(rotation, cache->head_dim, fn, err, rot)) != OSCAR_OK) return st;
  if ((st = kernels::check_write_args(fn, "k, v", k, v, seq_lens, err)) != OSCAR_OK) return st;
  if (max_len < 0 || max_len > oscar_omni_capacity(cache))
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: max_len=%d outside [0, capacity %lld]", fn, max_len,
                     (long long)oscar_omni_capacity(cache));
  if (max_len == 0) return OSCAR_OK;
  const int64_t blocks = static_cast<int64_t>(cache->batch) * ((max_len + kernels::kKeyBlock - 1) / kernels::kKeyBlock);
  if (blocks >= (int64_t(1) << 31)) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch * max_len too large", fn);
  return ops->prefill(cv, rot, static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v), seq_lens, max_len,
                      static_cast<cudaStream_t>(stream), err);
}

extern "C" oscar_status oscar_omni_append(const oscar_omni_cache* cache, const void* k_new, const void* v_new,
                                          const int32_t* seq_lens, int32_t max_seq_len, void* stream, oscar_error* err) {
  return oscar_omni_append_rotated(cache, nullptr, k_new, v_new, seq_lens, max_seq_len, stream, err);
}

extern "C" oscar_status oscar_omni_append_rotated(const oscar_omni_cache* cache, const oscar_rotation* rotation, const void* k_new,
                                                 const void* v_new, const int32_t* seq_lens, int32_t max_seq_len, void* stream,
                                                 oscar_error* err) {
  const char* fn = rotation ? "oscar_omni_append_rotated" : "oscar_omni_append";
  kernels::OmniView cv;
  const kernels::OmniKernels* ops = nullptr;
  oscar_status st = kernels::check_omni(cache, fn, err, cv, ops);
  if (st != OSCAR_OK) return st;
  kernels::RotArgs rot;
  if ((st = kernels::check_rotation(rotation, cache->head_dim, fn, err, rot)) != OSCAR_OK) return st;
  if ((st = kernels::check_write_args(fn, "k_new, v_new", k_new, v_new, seq_lens, err)) != OSCAR_OK) return st;
  if ((st = kernels::check_append_len(fn, max_seq_len, oscar_omni_capacity(cache), err)) != OSCAR_OK) return st;
  return ops->append(cv, rot, static_cast<const uint16_t*>(k_new), static_cast<const uint16_t*>(v_new), seq_lens,
                     static_cast<cudaStream_t>(stream), err);
}

extern "C" oscar_status oscar_omni_decode(const oscar_omni_cache* cache, const void* q, int32_t num_q_heads, const int32_t* seq_lens,
                                          int32_t max_seq_len, float softmax_scale, float* out, void* workspace,
                                          size_t workspace_bytes, void* stream, oscar_error* err) {
  return oscar_omni_decode_rotated(cache, nullptr, q, num_q_heads, seq_lens, max_seq_len, softmax_scale, out, workspace, workspace_bytes,
                                   stream, err);
}

extern "C" oscar_status oscar_omni_decode_rotated(const oscar_omni_cache* cache, const oscar_rotation* rotation, const void* q,
                                                 int32_t num_q_heads, const int32_t* seq_lens, int32_t max_seq_len, float softmax_scale,
                                                 float* out, void* workspace, size_t workspace_bytes, void* stream, oscar_error* err) {
  return oscar_omni_decode_ex(cache, rotation, nullptr, q, num_q_heads, seq_lens, max_seq_len, softmax_scale, out, workspace,
                              workspace_bytes, stream, err);
}

extern "C" oscar_status oscar_omni_decode_ex(const oscar_omni_cache* cache, const oscar_rotation* rotation,
                                            const oscar_decode_logits* logits, const void* q, int32_t num_q_heads,
                                            const int32_t* seq_lens, int32_t max_seq_len, float softmax_scale, float* out,
                                            void* workspace, size_t workspace_bytes, void* stream, oscar_error* err) {
  namespace plan = kernels::plan;
  const char* fn = logits ? "oscar_omni_decode_ex" : rotation ? "oscar_omni_decode_rotated" : "oscar_omni_decode";
  kernels::OmniView cv;
  const kernels::OmniKernels* ops = nullptr;
  oscar_status st = kernels::check_omni(cache, fn, err, cv, ops);
  if (st != OSCAR_OK) return st;
  kernels::RotArgs rot;
  if ((st = kernels::check_rotation(rotation, cache->head_dim, fn, err, rot)) != OSCAR_OK) return st;
  st = kernels::check_decode_args(fn, q, num_q_heads, cache->num_kv_heads, seq_lens, max_seq_len, oscar_omni_capacity(cache), out,
                                  workspace, err);
  if (st != OSCAR_OK) return st;
  const int64_t bh = static_cast<int64_t>(cache->batch) * cache->num_kv_heads;
  const int64_t units = bh * plan::query_groups(num_q_heads / cache->num_kv_heads);
  const int64_t win = max_seq_len < kernels::kResidual - 1 ? max_seq_len : kernels::kResidual - 1;
  const plan::Plan p = plan::quant_plan(units, omnifmt::body_tokens(max_seq_len), win, plan::kOmniGranule,
                                        plan::blocks_per_sm(cache->head_dim), plan::sm_count());
  const auto grid = [&](const kernels::DecodeArgs& a, cudaStream_t s, oscar_error* e) { return ops->decode(cv, a, s, e); };
  return kernels::run_quantized_decode(p, rot, logits, fn, q, seq_lens, num_q_heads, cache->num_kv_heads, cache->batch, cache->head_dim,
                                       softmax_scale, out, workspace, workspace_bytes, cache->arrivals, static_cast<cudaStream_t>(stream), err, grid);
}
