// cov/cov_api.cu: the oscar-cov C entry points (oscar_kv.h): argument checks, the dispatch table over
// decode/shapes.h, the split plan and the merge; and the decode workspace size of every format.
#include "api_util.h"
#include "cov/cov_kernels.h"
#include "decode/checks.h"
#include "decode/merge.h"
#include "decode/quantized_decode.h"
#include "decode/rotate_q.h"
#include "decode/shapes.h"
#include "decode/split_plan.h"
#include "oscar/cov_format.h"
#include "oscar_kv.h"

namespace oscar::kernels {

const CovKernels* cov_kernels(int head_dim, int bits) {
#define OSCAR_COV_ENTRY(HD, BITS) \
  {HD, BITS, &cov_prefill<HD, BITS>, &cov_append<HD, BITS>, &cov_decode<HD, BITS>, &cov_paged_write<HD, BITS>},
  static constexpr CovKernels table[] = {OSCAR_KV_SHAPES(OSCAR_COV_ENTRY)};
#undef OSCAR_COV_ENTRY
  for (const CovKernels& e : table)
    if (e.head_dim == head_dim && e.bits == bits) return &e;
  return nullptr;
}

oscar_status check_cov_rule(float clip_k, float clip_v, int32_t clip_mode, int32_t rounding, int head_dim, const char* fn, oscar_error* err,
                            CovView& v) {
  if (!(clip_k > 0.0f && clip_k <= 1.0f) || !(clip_v > 0.0f && clip_v <= 1.0f))
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: cache->clip_k=%g clip_v=%g must be in (0, 1]", fn, clip_k, clip_v);
  if (clip_mode != OSCAR_CLIP_RATIO && clip_mode != OSCAR_CLIP_QUANTILE)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: cache->clip_mode=%d is neither OSCAR_CLIP_RATIO (0) nor OSCAR_CLIP_QUANTILE (1)", fn,
                     clip_mode);
  if (rounding != OSCAR_ROUND_HALF_EVEN && rounding != OSCAR_ROUND_HALF_AWAY)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: cache->rounding=%d is neither OSCAR_ROUND_HALF_EVEN (0) nor OSCAR_ROUND_HALF_AWAY (1)",
                     fn, rounding);
  const bool quantile = clip_mode == OSCAR_CLIP_QUANTILE;
  v.clip_k = quantile ? 1.0f : clip_k;
  v.clip_v = quantile ? 1.0f : clip_v;
  v.quantile_k = quantile ? quantile_clip_index(clip_k, head_dim) : -1;
  v.quantile_v = quantile ? quantile_clip_index(clip_v, head_dim) : -1;
  v.rounding = static_cast<Rounding>(rounding);
  return OSCAR_OK;
}

namespace {

oscar_status check_cache(const oscar_cov_cache* c, const char* fn, oscar_error* err, CovView& v, const CovKernels*& ops) {
  if (!c) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
  ops = cov_kernels(c->head_dim, c->bits);
  if (!ops)
    return api::fail(err, OSCAR_ERR_UNSUPPORTED, "%s: head_dim=%d bits=%d unsupported (compiled: " OSCAR_KV_SHAPES_TEXT ")", fn,
                     c->head_dim, c->bits);
  if (c->batch <= 0 || c->num_kv_heads <= 0)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch=%d num_kv_heads=%d must be positive", fn, c->batch, c->num_kv_heads);
  if (c->sink < 0 || c->recent <= 0 || c->body_capacity < 0)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: sink=%d recent=%d body_capacity=%lld invalid (sink >= 0, recent > 0)",
                     fn, c->sink, c->recent, (long long)c->body_capacity);
  const void* ptrs[8] = {c->k_sink, c->v_sink, c->k_recent, c->v_recent, c->k_codes, c->v_codes, c->k_params, c->v_params};
  const char* names[8] = {"k_sink", "v_sink", "k_recent", "v_recent", "k_codes", "v_codes", "k_params", "v_params"};
  for (int i = 0; i < 8; ++i) {
    const bool needed = (i < 2 && c->sink > 0) || (i >= 2 && i < 4) || (i >= 4 && c->body_capacity > 0);
    if (needed && !ptrs[i]) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: cache->%s is NULL", fn, names[i]);
    if (ptrs[i] && !api::aligned(ptrs[i], 16))
      return api::fail(err, OSCAR_ERR_MISALIGNED, "%s: cache->%s %p is not 16-byte aligned", fn, names[i], ptrs[i]);
  }
  if (c->arrivals && !api::aligned(c->arrivals, 4))
    return api::fail(err, OSCAR_ERR_MISALIGNED, "%s: cache->arrivals %p is not 4-byte aligned", fn, static_cast<const void*>(c->arrivals));
  oscar_status st = check_cov_rule(c->clip_k, c->clip_v, c->clip_mode, c->rounding, c->head_dim, fn, err, v);
  if (st != OSCAR_OK) return st;
  v.B = c->batch; v.Hkv = c->num_kv_heads; v.S = c->sink; v.W = c->recent; v.cap = c->body_capacity;
  v.ks = static_cast<uint16_t*>(c->k_sink); v.vs = static_cast<uint16_t*>(c->v_sink);
  v.kr = static_cast<uint16_t*>(c->k_recent); v.vr = static_cast<uint16_t*>(c->v_recent);
  v.kc = static_cast<uint8_t*>(c->k_codes); v.vc = static_cast<uint8_t*>(c->v_codes);
  v.kp = static_cast<uint32_t*>(c->k_params); v.vp = static_cast<uint32_t*>(c->v_params);
  return OSCAR_OK;
}

}  // namespace
}  // namespace oscar::kernels

using namespace oscar;

extern "C" int64_t oscar_cov_capacity(const oscar_cov_cache* c) {
  return c ? static_cast<int64_t>(c->sink) + c->body_capacity + c->recent : 0;
}

extern "C" oscar_status oscar_cov_prefill(const oscar_cov_cache* cache, const void* k, const void* v, const int32_t* seq_lens,
                                         int32_t max_len, void* stream, oscar_error* err) {
  return oscar_cov_prefill_rotated(cache, nullptr, k, v, seq_lens, max_len, stream, err);
}

extern "C" oscar_status oscar_cov_prefill_rotated(const oscar_cov_cache* cache, const oscar_rotation* rotation, const void* k,
                                                 const void* v, const int32_t* seq_lens, int32_t max_len, void* stream, oscar_error* err) {
  const char* fn = rotation ? "oscar_cov_prefill_rotated" : "oscar_cov_prefill";
  kernels::CovView cv;
  const kernels::CovKernels* ops = nullptr;
  oscar_status st = kernels::check_cache(cache, fn, err, cv, ops);
  if (st != OSCAR_OK) return st;
  kernels::RotArgs rot;
  if ((st = kernels::check_rotation(rotation, cache->head_dim, fn, err, rot)) != OSCAR_OK) return st;
  if ((st = kernels::check_write_args(fn, "k, v", k, v, seq_lens, err)) != OSCAR_OK) return st;
  if (max_len < 0) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: max_len=%d is negative", fn, max_len);
  if (max_len > oscar_cov_capacity(cache))
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: max_len=%d exceeds the cache capacity %lld", fn, max_len,
                     (long long)oscar_cov_capacity(cache));
  if (max_len == 0) return OSCAR_OK;
  if (static_cast<int64_t>(cache->batch) * cache->num_kv_heads * max_len >= (int64_t(1) << 32))
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch * kv_heads * max_len must be below 2^32", fn);
  return ops->prefill(cv, rot, static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v), seq_lens, max_len,
                      static_cast<cudaStream_t>(stream), err);
}

extern "C" oscar_status oscar_cov_append(const oscar_cov_cache* cache, const void* k_new, const void* v_new,
                                        const int32_t* seq_lens, int32_t max_seq_len, void* stream, oscar_error* err) {
  return oscar_cov_append_rotated(cache, nullptr, k_new, v_new, seq_lens, max_seq_len, stream, err);
}

extern "C" oscar_status oscar_cov_append_rotated(const oscar_cov_cache* cache, const oscar_rotation* rotation, const void* k_new,
                                                const void* v_new, const int32_t* seq_lens, int32_t max_seq_len, void* stream,
                                                oscar_error* err) {
  const char* fn = rotation ? "oscar_cov_append_rotated" : "oscar_cov_append";
  kernels::CovView cv;
  const kernels::CovKernels* ops = nullptr;
  oscar_status st = kernels::check_cache(cache, fn, err, cv, ops);
  if (st != OSCAR_OK) return st;
  kernels::RotArgs rot;
  if ((st = kernels::check_rotation(rotation, cache->head_dim, fn, err, rot)) != OSCAR_OK) return st;
  if ((st = kernels::check_write_args(fn, "k_new, v_new", k_new, v_new, seq_lens, err)) != OSCAR_OK) return st;
  if ((st = kernels::check_append_len(fn, max_seq_len, oscar_cov_capacity(cache), err)) != OSCAR_OK) return st;
  return ops->append(cv, rot, static_cast<const uint16_t*>(k_new), static_cast<const uint16_t*>(v_new), seq_lens,
                     static_cast<cudaStream_t>(stream), err);
}

extern "C" size_t oscar_decode_workspace_bytes(int32_t batch, int32_t num_q_heads, int32_t num_kv_heads, int32_t head_dim,
                                               int32_t max_seq_len, int32_t quantized) {
  namespace plan = kernels::plan;
  if (batch <= 0 || num_kv_heads <= 0 || num_q_heads <= 0 || num_q_heads % num_kv_heads != 0 || max_seq_len < 0 || head_dim <= 0)
    return 0;
  const int64_t bh = static_cast<int64_t>(batch) * num_kv_heads;
  const int groups = plan::query_groups(num_q_heads / num_kv_heads);
  const int64_t units = bh * groups;
  const int sms = plan::sm_count();
  const int np = quantized ? plan::quant_parts_bound(units, max_seq_len, plan::blocks_per_sm(head_dim), sms)
                           : plan::bf16_plan(units, max_seq_len, sms).parts();
  // quantized: room for the rotated queries of a *_decode_rotated call after the partials
  return plan::workspace_bytes(bh, np, 8 * groups, head_dim) + (quantized ? kernels::rotated_q_bytes(batch, num_q_heads, head_dim) : 0);
}

extern "C" oscar_status oscar_cov_decode(const oscar_cov_cache* cache, const void* q, int32_t num_q_heads, const int32_t* seq_lens,
                                        int32_t max_seq_len, float softmax_scale, float* out, void* workspace,
                                        size_t workspace_bytes, void* stream, oscar_error* err) {
  return oscar_cov_decode_rotated(cache, nullptr, q, num_q_heads, seq_lens, max_seq_len, softmax_scale, out, workspace, workspace_bytes,
                                  stream, err);
}

extern "C" oscar_status oscar_cov_decode_rotated(const oscar_cov_cache* cache, const oscar_rotation* rotation, const void* q,
                                                int32_t num_q_heads, const int32_t* seq_lens, int32_t max_seq_len, float softmax_scale,
                                                float* out, void* workspace, size_t workspace_bytes, void* stream, oscar_error* err) {
  return oscar_cov_decode_ex(cache, rotation, nullptr, q, num_q_heads, seq_lens, max_seq_len, softmax_scale, out, workspace,
                              workspace_bytes, stream, err);
}

extern "C" oscar_status oscar_cov_decode_ex(const oscar_cov_cache* cache, const oscar_rotation* rotation,
                                            const oscar_decode_logits* logits, const void* q, int32_t num_q_heads,
                                            const int32_t* seq_lens, int32_t max_seq_len, float softmax_scale, float* out,
                                            void* workspace, size_t workspace_bytes, void* stream, oscar_error* err) {
  namespace plan = kernels::plan;
  const char* fn = logits ? "oscar_cov_decode_ex" : rotation ? "oscar_cov_decode_rotated" : "oscar_cov_decode";
  kernels::CovView cv;
  const kernels::CovKernels* ops = nullptr;
  oscar_status st = kernels::check_cache(cache, fn, err, cv, ops);
  if (st != OSCAR_OK) return st;
  kernels::RotArgs rot;
  if ((st = kernels::check_rotation(rotation, cache->head_dim, fn, err, rot)) != OSCAR_OK) return st;
  st = kernels::check_decode_args(fn, q, num_q_heads, cache->num_kv_heads, seq_lens, max_seq_len, oscar_cov_capacity(cache), out,
                                  workspace, err);
  if (st != OSCAR_OK) return st;
  const int64_t bh = static_cast<int64_t>(cache->batch) * cache->num_kv_heads;
  const int64_t units = bh * plan::query_groups(num_q_heads / cache->num_kv_heads);
  const int64_t sw = static_cast<int64_t>(cache->sink) + cache->recent, win = max_seq_len < sw ? max_seq_len : sw;
  const plan::Plan p = plan::quant_plan(units, covfmt::body_tokens(max_seq_len, cache->sink, cache->recent), win, plan::kQuantGranule,
                                        plan::blocks_per_sm(cache->head_dim), plan::sm_count());
  const auto grid = [&](const kernels::DecodeArgs& a, cudaStream_t s, oscar_error* e) { return ops->decode(cv, a, s, e); };
  return kernels::run_quantized_decode(p, rot, logits, fn, q, seq_lens, num_q_heads, cache->num_kv_heads, cache->batch, cache->head_dim,
                                       softmax_scale, out, workspace, workspace_bytes, cache->arrivals, static_cast<cudaStream_t>(stream), err, grid);
}

extern "C" int oscar_cov_shape_supported(int32_t head_dim, int32_t bits) { return kernels::cov_kernels(head_dim, bits) ? 1 : 0; }
extern "C" int oscar_max_query_group(void) { return kernels::kMaxQueryGroup; }
