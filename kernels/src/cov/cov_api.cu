// cov/cov_api.cu: the oscar-cov C entry points (oscar_kv.h): the format's dispatch table over decode/shapes.h, its
// cache check and row rule, and what the shared path of api/entries.h asks of a format (CovFormat).
#include "api/entries.h"
#include "api_util.h"
#include "cov/cov_kernels.h"
#include "decode/shapes.h"
#include "oscar/cov_format.h"
#include "oscar_kv.h"

namespace oscar::kernels {

const CovKernels* cov_kernels(int head_dim, int bits) {
#define OSCAR_COV_ENTRY(HD, BITS) \
  {{HD, BITS, &cov_prefill<HD, BITS>, &cov_append<HD, BITS>, &cov_decode<HD, BITS>}, &cov_paged_write<HD, BITS>},
  static constexpr CovKernels table[] = {OSCAR_KV_SHAPES(OSCAR_COV_ENTRY)};
#undef OSCAR_COV_ENTRY
  return find_shape(table, head_dim, bits);
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

struct CovFormat : FormatBase<oscar_cov_cache, CovView, CovKernels, cov_kernels, plan::kQuantGranule> {
  static constexpr EntryNames kNames{"oscar_cov_prefill", "oscar_cov_append", "oscar_cov_decode"};

  static oscar_status check(const Cache* c, const char* fn, oscar_error* err, View& v, const Kernels*& ops) {
    oscar_status st = check_compiled(c, lookup, fn, err, ops);
    if (st != OSCAR_OK || (st = check_batch_heads(c->batch, c->num_kv_heads, fn, err)) != OSCAR_OK) return st;
    if (c->sink < 0 || c->recent <= 0 || c->body_capacity < 0)
      return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: sink=%d recent=%d body_capacity=%lld invalid (sink >= 0, recent > 0)", fn,
                       c->sink, c->recent, (long long)c->body_capacity);
    const bool sink = c->sink > 0, body = c->body_capacity > 0;
    st = check_arrays({{c->k_sink, "k_sink", sink}, {c->v_sink, "v_sink", sink}, {c->k_recent, "k_recent", true},
                       {c->v_recent, "v_recent", true}, {c->k_codes, "k_codes", body}, {c->v_codes, "v_codes", body},
                       {c->k_params, "k_params", body}, {c->v_params, "v_params", body}},
                      fn, err);
    if (st != OSCAR_OK || (st = check_arrivals(c->arrivals, fn, err)) != OSCAR_OK) return st;
    if ((st = check_cov_rule(c->clip_k, c->clip_v, c->clip_mode, c->rounding, c->head_dim, fn, err, v)) != OSCAR_OK) return st;
    v.B = c->batch; v.Hkv = c->num_kv_heads; v.S = c->sink; v.W = c->recent; v.cap = c->body_capacity;
    v.ks = static_cast<uint16_t*>(c->k_sink); v.vs = static_cast<uint16_t*>(c->v_sink);
    v.kr = static_cast<uint16_t*>(c->k_recent); v.vr = static_cast<uint16_t*>(c->v_recent);
    v.kc = static_cast<uint8_t*>(c->k_codes); v.vc = static_cast<uint8_t*>(c->v_codes);
    v.kp = static_cast<uint32_t*>(c->k_params); v.vp = static_cast<uint32_t*>(c->v_params);
    return OSCAR_OK;
  }
  static int64_t capacity(const Cache& c) { return static_cast<int64_t>(c.sink) + c.body_capacity + c.recent; }
  static int64_t body_tokens(const Cache& c, int32_t len) { return covfmt::body_tokens(len, c.sink, c.recent); }
  static int64_t window_tokens(const Cache& c) { return static_cast<int64_t>(c.sink) + c.recent; }
  // the prefill kernel's rows (sequence, KV head, token), indexed in 32 bits
  static int64_t prefill_blocks(const Cache& c, int32_t max_len) { return static_cast<int64_t>(c.batch) * c.num_kv_heads * max_len; }
  static constexpr int64_t kPrefillBlockLimit = int64_t(1) << 32;
};

}  // namespace
}  // namespace oscar::kernels

OSCAR_KV_FORMAT_ENTRY_POINTS(cov, oscar::kernels::CovFormat)
