// cov/cov_paged_api.cu: the paged oscar-cov C entry points (oscar_kv.h: oscar_cov_paged_*): the shape rules and the
// layout of oscar/cov_paged_format.h, the cache and batch checks, and the contiguous format's kernels run in paged mode
// (CovView's paged fields) through the shared decode path of api/entries.h.
#include "api/entries.h"
#include "api_util.h"
#include "cov/cov_kernels.h"
#include "decode/split_plan.h"
#include "oscar/cov_format.h"
#include "oscar/cov_paged_format.h"
#include "oscar_kv.h"

namespace oscar::kernels {
namespace {

// The shape rules of a paged cache and of its layout: a compiled (head_dim, bits), KV heads, windows and page size.
oscar_status check_paged_shape(int32_t page_tokens, int32_t kv_heads, int32_t head_dim, int32_t bits, int32_t sink, int32_t recent,
                               const char* fn, oscar_error* err) {
  if (!cov_kernels(head_dim, bits))
    return api::fail(err, OSCAR_ERR_UNSUPPORTED, "%s: head_dim=%d bits=%d unsupported (compiled: " OSCAR_KV_SHAPES_TEXT ")", fn, head_dim,
                     bits);
  if (kv_heads <= 0) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: num_kv_heads=%d must be positive", fn, kv_heads);
  if (sink < 0 || sink % covpaged::kPageMultiple != 0 || recent <= 0)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: sink=%d recent=%d invalid (sink a multiple of %d, recent > 0)", fn, sink, recent,
                     covpaged::kPageMultiple);
  if (page_tokens <= 0 || page_tokens % covpaged::kPageMultiple != 0)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: page_tokens=%d must be a positive multiple of %d", fn, page_tokens,
                     covpaged::kPageMultiple);
  return OSCAR_OK;
}

oscar_status check_paged(const oscar_cov_paged* c, const char* fn, oscar_error* err, CovView& v, const CovKernels*& ops) {
  if (!c) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
  oscar_status st = check_paged_shape(c->page_tokens, c->num_kv_heads, c->head_dim, c->bits, c->sink, c->recent, fn, err);
  if (st != OSCAR_OK) return st;
  ops = cov_kernels(c->head_dim, c->bits);
  const int64_t need = covpaged::page_bytes(c->page_tokens, c->num_kv_heads, c->head_dim, c->bits);
  if (c->page_stride < need || c->page_stride % 16 != 0)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: page_stride=%lld must be a multiple of 16 of at least the page's %lld bytes", fn,
                     (long long)c->page_stride, (long long)need);
  if (c->num_pages <= 0 || c->num_window_slots <= 0)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: num_pages=%lld num_window_slots=%d must be positive", fn, (long long)c->num_pages,
                     c->num_window_slots);
  const bool sink = c->sink > 0;
  st = check_arrays({{c->pages, "pages", true}, {c->k_sink, "k_sink", sink}, {c->v_sink, "v_sink", sink}, {c->k_recent, "k_recent", true},
                     {c->v_recent, "v_recent", true}},
                    fn, err);
  if (st != OSCAR_OK) return st;
  v = CovView{};
  if ((st = check_cov_rule(c->clip_k, c->clip_v, c->clip_mode, c->rounding, c->head_dim, fn, err, v)) != OSCAR_OK) return st;
  v.Hkv = c->num_kv_heads; v.S = c->sink; v.W = c->recent; v.cap = 0;
  v.ks = static_cast<uint16_t*>(c->k_sink); v.vs = static_cast<uint16_t*>(c->v_sink);
  v.kr = static_cast<uint16_t*>(c->k_recent); v.vr = static_cast<uint16_t*>(c->v_recent);
  v.pages = static_cast<uint8_t*>(c->pages);
  v.page_stride = c->page_stride;
  v.P = c->page_tokens;
  return OSCAR_OK;
}

oscar_status check_batch(const oscar_paged_batch* b, bool writes, const char* fn, oscar_error* err, CovView& v) {
  if (!b) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch is NULL", fn);
  if (b->num_seqs <= 0 || b->num_seqs > 65535)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch->num_seqs=%d must be in [1, 65535]", fn, b->num_seqs);
  if (!b->seq_lens || !b->window_slot || (writes && !b->query_start_loc) || (!writes && !b->block_table))
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch->seq_lens, window_slot, %s is NULL", fn,
                     writes ? "query_start_loc" : "block_table");
  const void* ptrs[4] = {b->seq_lens, b->query_start_loc, b->block_table, b->window_slot};
  for (const void* p : ptrs)
    if (p && !api::aligned(p, 4)) return api::fail(err, OSCAR_ERR_MISALIGNED, "%s: the batch's int32 arrays must be 4-byte aligned", fn);
  if (!writes && b->block_table_stride <= 0)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch->block_table_stride=%d must be positive", fn, b->block_table_stride);
  if (!writes && (b->split_tokens < 0 || b->split_tokens % plan::kQuantGranule != 0))
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch->split_tokens=%d must be 0 or a positive multiple of %d", fn,
                     b->split_tokens, plan::kQuantGranule);
  v.B = b->num_seqs;
  v.block_table = b->block_table;
  v.bt_stride = b->block_table_stride;
  v.wslot = b->window_slot;
  return OSCAR_OK;
}

// The decode plan: the planner's (format_plan: depends on the units), or with split_tokens > 0 a fixed one (splits of
// split_tokens body tokens, one window block) that depends on max_seq_len alone: batch-invariant outputs.
plan::Plan paged_plan(int64_t units, int32_t max_seq_len, int sink, int recent, int head_dim, int32_t split_tokens) {
  const int64_t body = covfmt::body_tokens(max_seq_len, sink, recent);
  if (split_tokens > 0) {
    plan::Plan p;
    p.split_len = split_tokens;
    p.nsplit = static_cast<int>(body > 0 ? plan::ceil_div(body, split_tokens) : 1);
    p.nwin = 1;
    return p;
  }
  const int64_t sw = static_cast<int64_t>(sink) + recent, win = max_seq_len < sw ? max_seq_len : sw;
  return format_plan(units, body, win, plan::kQuantGranule, head_dim);
}

// A paged write or decode after the checks of its cache and batch: the view and the table entry.
struct CheckedPaged {
  Launch l;
  CovView view;
  const CovKernels* ops = nullptr;
  oscar_status check(const oscar_cov_paged* cache, const oscar_paged_batch* batch, bool writes) {
    const oscar_status st = check_paged(cache, l.fn, l.err, view, ops);
    return st != OSCAR_OK ? st : check_batch(batch, writes, l.fn, l.err, view);
  }
};

// The step's token rows: k, v, their strides and the slot mapping.
oscar_status check_rows(const oscar_cov_paged& c, const void* k, const void* v, int64_t k_stride, int64_t v_stride, int32_t num_tokens,
                        const int64_t* slots, const char* fn, oscar_error* err) {
  if (!k || !v || !slots) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: k, v or slot_mapping is NULL", fn);
  if (!api::aligned(k, 16) || !api::aligned(v, 16) || !api::aligned(slots, 8))
    return api::fail(err, OSCAR_ERR_MISALIGNED, "%s: k and v must be 16-byte aligned, slot_mapping 8-byte aligned", fn);
  const int64_t row = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  if (k_stride < row || v_stride < row || k_stride % 8 != 0 || v_stride % 8 != 0)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: k_token_stride=%lld v_token_stride=%lld must be multiples of 8 of at least %lld", fn,
                     (long long)k_stride, (long long)v_stride, (long long)row);
  if (static_cast<int64_t>(num_tokens) * c.num_kv_heads >= (int64_t(1) << 31))
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: num_tokens * num_kv_heads must be below 2^31", fn);
  return OSCAR_OK;
}

}  // namespace
}  // namespace oscar::kernels

using namespace oscar;

extern "C" oscar_status oscar_cov_paged_layout_of(int32_t page_tokens, int32_t num_kv_heads, int32_t head_dim, int32_t bits, int32_t sink,
                                                  int32_t recent, oscar_cov_paged_layout* layout, oscar_error* err) {
  namespace cp = covpaged;
  const char* fn = "oscar_cov_paged_layout_of";
  if (!layout) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: layout is NULL", fn);
  const oscar_status st = kernels::check_paged_shape(page_tokens, num_kv_heads, head_dim, bits, sink, recent, fn, err);
  if (st != OSCAR_OK) return st;
  oscar_cov_paged_layout l{};
  l.code_bytes = cp::code_bytes(head_dim, bits);
  l.param_bytes = covfmt::kParamBytes;
  l.token_bytes = covfmt::body_bytes_per_token(head_dim, bits);
  l.region_bytes = cp::region_bytes(page_tokens, head_dim, bits);
  l.page_bytes = cp::page_bytes(page_tokens, num_kv_heads, head_dim, bits);
  l.k_codes_offset = cp::k_codes_offset();
  l.v_codes_offset = cp::v_codes_offset(page_tokens, head_dim, bits);
  l.k_params_offset = cp::k_params_offset(page_tokens, head_dim, bits);
  l.v_params_offset = cp::v_params_offset(page_tokens, head_dim, bits);
  l.bf16_token_bytes = covfmt::bf16_bytes_per_token(head_dim);
  l.window_slot_bytes = cp::window_slot_bytes(num_kv_heads, head_dim, sink, recent);
  *layout = l;
  return OSCAR_OK;
}

extern "C" size_t oscar_cov_paged_workspace_bytes(int32_t num_seqs, int32_t num_q_heads, int32_t num_kv_heads, int32_t head_dim,
                                                  int32_t max_seq_len, int32_t split_tokens) {
  namespace plan = kernels::plan;
  if (split_tokens <= 0) return oscar_decode_workspace_bytes(num_seqs, num_q_heads, num_kv_heads, head_dim, max_seq_len, 1);
  if (num_seqs <= 0 || num_kv_heads <= 0 || num_q_heads <= 0 || num_q_heads % num_kv_heads != 0 || max_seq_len < 0 || head_dim <= 0 ||
      split_tokens % plan::kQuantGranule != 0)
    return 0;
  const int64_t bh = static_cast<int64_t>(num_seqs) * num_kv_heads;
  const int groups = plan::query_groups(num_q_heads / num_kv_heads);
  const plan::Plan p = kernels::paged_plan(bh * groups, max_seq_len, 0, 0, head_dim, split_tokens);  // no windows: the most splits
  // room for the rotated queries of a rotated decode after the partials, as oscar_decode_workspace_bytes leaves
  return plan::workspace_bytes(bh, p.parts(), 8 * groups, head_dim) + kernels::rotated_q_bytes(num_seqs, num_q_heads, head_dim);
}

extern "C" void oscar_cov_paged_default_rule(oscar_cov_paged* c) {
  if (!c) return;
  c->clip_k = covfmt::kClipK;
  c->clip_v = covfmt::kClipV;
  c->clip_mode = static_cast<int32_t>(covfmt::default_clip_mode(c->bits));  // as oscar_cov_cache_create sets them
  c->rounding = static_cast<int32_t>(covfmt::kRounding);
}

extern "C" oscar_status oscar_cov_paged_write(const oscar_cov_paged* cache, const oscar_write_options* options,
                                              const oscar_paged_batch* batch, const void* k, const void* v, int64_t k_token_stride,
                                              int64_t v_token_stride, int32_t num_tokens, const int64_t* slot_mapping, void* stream,
                                              oscar_error* err) {
  kernels::CheckedPaged x{{static_cast<cudaStream_t>(stream), err, "oscar_cov_paged_write"}};
  kernels::RotArgs rot;
  oscar_status st = x.check(cache, batch, true);
  if (st != OSCAR_OK || (st = kernels::check_write_options(options, x.l.fn, err, rot)) != OSCAR_OK) return st;
  if (num_tokens < 0) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: num_tokens=%d is negative", x.l.fn, num_tokens);
  if (num_tokens == 0) return OSCAR_OK;
  st = kernels::check_rows(*cache, k, v, k_token_stride, v_token_stride, num_tokens, slot_mapping, x.l.fn, err);
  if (st != OSCAR_OK) return st;
  const kernels::PagedWriteArgs w{static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v), k_token_stride, v_token_stride,
                                  num_tokens, batch->num_seqs, batch->seq_lens, batch->query_start_loc, slot_mapping};
  return x.ops->paged_write(x.view, rot, w, x.l);
}

extern "C" oscar_status oscar_cov_paged_decode(const oscar_cov_paged* cache, const oscar_decode_options* options,
                                               const oscar_paged_batch* batch, const void* q, int32_t num_q_heads, int32_t max_seq_len,
                                               float softmax_scale, float* out, void* workspace, size_t workspace_bytes, void* stream,
                                               oscar_error* err) {
  kernels::CheckedPaged x{{static_cast<cudaStream_t>(stream), err, "oscar_cov_paged_decode"}};
  kernels::DecodeMods m;
  oscar_status st = x.check(cache, batch, false);
  if (st != OSCAR_OK || (st = kernels::check_decode_options(options, x.l.fn, err, m)) != OSCAR_OK) return st;
  const kernels::DecodeCall c{q, num_q_heads, batch->seq_lens, max_seq_len, softmax_scale, out, workspace, workspace_bytes};
  const kernels::DecodeTarget t{batch->num_seqs, cache->num_kv_heads, cache->head_dim,
                                static_cast<int64_t>(batch->block_table_stride) * cache->page_tokens, nullptr};
  const auto make_plan = [&](int64_t units) {
    return kernels::paged_plan(units, max_seq_len, cache->sink, cache->recent, cache->head_dim, batch->split_tokens);
  };
  return kernels::run_decode(c, m, t, x.l, make_plan, [&](const kernels::DecodeArgs& a) { return x.ops->decode(x.view, a, x.l); });
}
