// omni/omni_api.cu: the oscar-omni C entry points (oscar_kv.h): the format's dispatch table over decode/shapes.h, its
// cache check, and what the shared path of api/entries.h asks of a format (OmniFormat).
#include "api/entries.h"
#include "api_util.h"
#include "decode/shapes.h"
#include "omni/omni_kernels.h"
#include "oscar/omni_format.h"
#include "oscar_kv.h"

namespace oscar::kernels {

const OmniKernels* omni_kernels(int head_dim, int bits) {
#define OSCAR_OMNI_ENTRY(HD, BITS) {HD, BITS, &omni_prefill<HD, BITS>, &omni_append<HD, BITS>, &omni_decode<HD, BITS>},
  static constexpr OmniKernels table[] = {OSCAR_KV_SHAPES(OSCAR_OMNI_ENTRY)};
#undef OSCAR_OMNI_ENTRY
  return find_shape(table, head_dim, bits);
}

namespace {

using omnifmt::kKeyBlock;
using omnifmt::kResidual;

struct OmniFormat : FormatBase<oscar_omni_cache, OmniView, OmniKernels, omni_kernels, plan::kOmniGranule> {
  static constexpr EntryNames kNames{"oscar_omni_prefill", "oscar_omni_append", "oscar_omni_decode"};

  static oscar_status check(const Cache* c, const char* fn, oscar_error* err, View& v, const Kernels*& ops) {
    oscar_status st = check_compiled(c, lookup, fn, err, ops);
    if (st != OSCAR_OK || (st = check_batch_heads(c->batch, c->num_kv_heads, fn, err)) != OSCAR_OK) return st;
    if (c->body_capacity < 0 || c->body_capacity % kResidual != 0)
      return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: body_capacity=%lld must be a non-negative multiple of %d", fn,
                       (long long)c->body_capacity, kResidual);
    const bool body = c->body_capacity > 0;
    st = check_arrays({{c->k_res, "k_res", true}, {c->v_res, "v_res", true}, {c->k_codes, "k_codes", body}, {c->v_codes, "v_codes", body},
                       {c->k_params, "k_params", body}, {c->v_params, "v_params", body}, {c->k_norms, "k_norms", body}},
                      fn, err);
    if (st != OSCAR_OK || (st = check_arrivals(c->arrivals, fn, err)) != OSCAR_OK) return st;
    v.B = c->batch; v.Hkv = c->num_kv_heads; v.cap = c->body_capacity;
    v.kr = static_cast<uint16_t*>(c->k_res); v.vr = static_cast<uint16_t*>(c->v_res);
    v.kc = static_cast<uint8_t*>(c->k_codes); v.vc = static_cast<uint8_t*>(c->v_codes);
    v.kp = static_cast<uint32_t*>(c->k_params); v.vp = static_cast<uint32_t*>(c->v_params);
    v.kn = static_cast<uint16_t*>(c->k_norms);
    return OSCAR_OK;
  }
  static int64_t capacity(const Cache& c) { return c.body_capacity + kResidual - 1; }
  static int64_t body_tokens(const Cache&, int32_t len) { return omnifmt::body_tokens(len); }
  static int64_t window_tokens(const Cache&) { return kResidual - 1; }
  // the prefill grid's blocks: one per sequence and 32-token key block
  static int64_t prefill_blocks(const Cache& c, int32_t max_len) {
    return static_cast<int64_t>(c.batch) * ((max_len + kKeyBlock - 1) / kKeyBlock);
  }
  static constexpr int64_t kPrefillBlockLimit = int64_t(1) << 31;
};

}  // namespace
}  // namespace oscar::kernels

OSCAR_KV_FORMAT_ENTRY_POINTS(omni, oscar::kernels::OmniFormat)
