// api/entries.h: the one check -> plan -> run path of the quantized entry points of oscar_kv.h, shared by both formats
// (cov/cov_api.cu, omni/omni_api.cu) and the paged cache (cov/cov_paged_api.cu). Host only.
//
// A format supplies a traits struct F (a FormatBase below) with what differs between the formats:
//   Cache, View, Kernels, kGranule, lookup
//                                   its C struct, device view, dispatch table entry (api/format_kernels.h), body split
//                                   granule and dispatch table
//   kNames                          the names of its C entry points (EntryNames: every message starts with one)
//   check(cache, fn, err, view, ops)
//                                   its cache check (pointers, sizes, rule) into the view and the table entry
//   capacity(cache)                 the tokens one sequence can hold
//   body_tokens(cache, L), window_tokens(cache)
//                                   how many of L tokens a decode reads from the packed body and the most it reads from the
//                                   BF16 windows (with kGranule, the split plan's inputs)
//   prefill_blocks(cache, max_len), kPrefillBlockLimit
//                                   the blocks (or rows) its prefill grid indexes, and the bound they must stay below
// and the path does the rest: the options (rotation, logit modifiers), k/v/q/out/workspace/seq_lens, the lengths
// against the capacity, the split plan, the query rotation, the decode grid and the merge.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <initializer_list>

#include "api/format_kernels.h"
#include "api_util.h"
#include "decode/checks.h"
#include "decode/merge.h"
#include "decode/rotate_q.h"
#include "decode/shapes.h"
#include "decode/split_plan.h"
#include "oscar_kv.h"

namespace oscar::kernels {

// ---- Checks every cache shares.

// A cache given, and its (head_dim, bits) compiled: ops = its dispatch table entry.
template <class Cache, class Entry>
oscar_status check_compiled(const Cache* c, const Entry* (*lookup)(int, int), const char* fn, oscar_error* err, const Entry*& ops) {
  if (!c) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
  ops = lookup(c->head_dim, c->bits);
  if (!ops)
    return api::fail(err, OSCAR_ERR_UNSUPPORTED, "%s: head_dim=%d bits=%d unsupported (compiled: " OSCAR_KV_SHAPES_TEXT ")", fn,
                     c->head_dim, c->bits);
  return OSCAR_OK;
}

inline oscar_status check_batch_heads(int32_t batch, int32_t kv_heads, const char* fn, oscar_error* err) {
  if (batch <= 0 || kv_heads <= 0)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch=%d num_kv_heads=%d must be positive", fn, batch, kv_heads);
  return OSCAR_OK;
}

// One device array of a cache: needed ones must be set, and every set one 16-byte aligned.
struct CacheArray {
  const void* p;
  const char* name;
  bool needed;
};
inline oscar_status check_arrays(std::initializer_list<CacheArray> arrays, const char* fn, oscar_error* err) {
  for (const CacheArray& a : arrays) {
    if (a.needed && !a.p) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: cache->%s is NULL", fn, a.name);
    if (a.p && !api::aligned(a.p, 16))
      return api::fail(err, OSCAR_ERR_MISALIGNED, "%s: cache->%s %p is not 16-byte aligned", fn, a.name, a.p);
  }
  return OSCAR_OK;
}
inline oscar_status check_arrivals(const uint32_t* arrivals, const char* fn, oscar_error* err) {
  if (arrivals && !api::aligned(arrivals, 4))
    return api::fail(err, OSCAR_ERR_MISALIGNED, "%s: cache->arrivals %p is not 4-byte aligned", fn, static_cast<const void*>(arrivals));
  return OSCAR_OK;
}

// ---- The options.

inline oscar_status check_write_options(const oscar_write_options* o, const char* fn, oscar_error* err, RotArgs& rot) {
  return check_rotation(o ? &o->rotation : nullptr, fn, err, rot);
}

// A decode's checked options: the rotation and the logit modifiers in the kernels' units.
struct DecodeMods {
  RotArgs rot;
  float cap2 = 0.f;              // DecodeArgs::cap2
  const float* sinks = nullptr;  // DecodeArgs::sinks
};
inline oscar_status check_decode_options(const oscar_decode_options* o, const char* fn, oscar_error* err, DecodeMods& m) {
  m = DecodeMods{};
  const oscar_status st = check_rotation(o ? &o->rotation : nullptr, fn, err, m.rot);
  if (st != OSCAR_OK || !o) return st;
  if (!(o->softcap >= 0.f) || o->softcap == INFINITY)  // NaN fails the first test
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: options->softcap=%g must be finite and >= 0 (0 = no soft-capping)", fn,
                     static_cast<double>(o->softcap));
  if (o->sinks && !api::aligned(o->sinks, 4)) return api::fail(err, OSCAR_ERR_MISALIGNED, "%s: options->sinks must be 4-byte aligned", fn);
  m.cap2 = o->softcap * kLog2e;
  m.sinks = o->sinks;
  return OSCAR_OK;
}

// ---- Decode.

// The caller's arguments of one decode.
struct DecodeCall {
  const void* q;
  int32_t hq;
  const int32_t* lens;
  int32_t max_seq_len;
  float scale;
  float* out;
  void* workspace;
  size_t workspace_bytes;
};
// What the format's checks say about the cache the decode reads.
struct DecodeTarget {
  int batch, hkv, head_dim;
  int64_t capacity;    // tokens a sequence can hold
  uint32_t* arrivals;  // the cache's decode arrival counters, or null
};

// The split plan of a quantized format: body splits and window blocks of all units in about one wave.
inline plan::Plan format_plan(int64_t units, int64_t body, int64_t window, int granule, int head_dim) {
  return plan::quant_plan(units, body, window, granule, plan::blocks_per_sm(head_dim), plan::sm_count());
}

// Checks the call, plans it (make_plan(units)), rotates the query into the workspace's tail under a rotation, launches
// the format's decode grid (grid(args)) and merges the splits (in the grid when the cache has arrival counters and the
// parts fit the in-grid merge: one launch).
template <class PlanFn, class Grid>
oscar_status run_decode(const DecodeCall& c, const DecodeMods& m, const DecodeTarget& t, const Launch& l, PlanFn make_plan, Grid grid) {
  oscar_status st = check_decode_args(l.fn, c.q, c.hq, t.hkv, c.lens, c.max_seq_len, t.capacity, c.out, c.workspace, l.err);
  if (st != OSCAR_OK) return st;
  const int64_t bh = static_cast<int64_t>(t.batch) * t.hkv;
  const plan::Plan p = make_plan(bh * plan::query_groups(c.hq / t.hkv));
  DecodeArgs a;
  const size_t qrot = m.rot.kind ? rotated_q_bytes(t.batch, c.hq, t.head_dim) : 0;
  st = plan_decode_args(a, p, l.fn, c.q, c.lens, c.hq, t.hkv, bh, t.head_dim, c.scale, c.workspace, c.workspace_bytes, l.err, qrot);
  if (st != OSCAR_OK) return st;
  a.cap2 = m.cap2;
  a.sinks = m.sinks;
  if (m.rot.kind) {
    auto* qr = reinterpret_cast<uint16_t*>(static_cast<char*>(c.workspace) + (c.workspace_bytes - qrot) / 16 * 16);
    st = launch_rotate_q(m.rot, a.q, qr, static_cast<int64_t>(t.batch) * c.hq, c.hq, a.G, t.head_dim, l.stream, l.err, l.fn);
    if (st != OSCAR_OK) return st;
    a.q = qr;
    a.rot = m.rot;
  }
  if (t.arrivals && a.np <= plan::kFusedMaxParts) {
    a.arrivals = t.arrivals;
    a.out = c.out;
  }
  if ((st = grid(a)) != OSCAR_OK) return st;
  return launch_merge(a, t.head_dim, t.batch, c.out, l.stream, l.err, l.fn);
}

// ---- The entry points of a contiguous format F (see the top of this file).

// The names of a format's entry points (every message starts with one).
struct EntryNames {
  const char* prefill;
  const char* append;
  const char* decode;
};

// What a format's traits declare alike: its C struct, device view, dispatch table (entry type and lookup) and body split
// granule.
template <class C, class V, class K, const K* (*Lookup)(int, int), int Granule>
struct FormatBase {
  using Cache = C;
  using View = V;
  using Kernels = K;
  static constexpr auto lookup = Lookup;
  static constexpr int kGranule = Granule;
};

// A prefill or an append after its checks (the cache, the options, k, v and seq_lens): the view, the table entry and the
// write's arguments.
template <class F>
struct CheckedWrite {
  Launch l;
  typename F::View view;
  const typename F::Kernels* ops = nullptr;
  WriteArgs w;
  // what: "k, v" or "k_new, v_new".
  oscar_status check(const typename F::Cache* cache, const oscar_write_options* o, const char* what, const void* k, const void* v,
                     const int32_t* lens) {
    oscar_status st = F::check(cache, l.fn, l.err, view, ops);
    if (st != OSCAR_OK || (st = check_write_options(o, l.fn, l.err, w.rot)) != OSCAR_OK) return st;
    if ((st = check_write_args(l.fn, what, k, v, lens, l.err)) != OSCAR_OK) return st;
    w.k = static_cast<const uint16_t*>(k);
    w.v = static_cast<const uint16_t*>(v);
    w.lens = lens;
    return OSCAR_OK;
  }
};

template <class F>
oscar_status prefill(const typename F::Cache* cache, const oscar_write_options* o, const void* k, const void* v, const int32_t* lens,
                     int32_t max_len, void* stream, oscar_error* err) {
  CheckedWrite<F> x{{static_cast<cudaStream_t>(stream), err, F::kNames.prefill}};
  oscar_status st = x.check(cache, o, "k, v", k, v, lens);
  if (st != OSCAR_OK) return st;
  if (max_len < 0) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: max_len=%d is negative", x.l.fn, max_len);
  if (max_len > F::capacity(*cache))
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: max_len=%d exceeds the cache capacity %lld", x.l.fn, max_len,
                     (long long)F::capacity(*cache));
  if (max_len == 0) return OSCAR_OK;
  if (F::prefill_blocks(*cache, max_len) >= F::kPrefillBlockLimit)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch=%d num_kv_heads=%d max_len=%d: the prefill grid would exceed %lld blocks",
                     x.l.fn, cache->batch, cache->num_kv_heads, max_len, (long long)F::kPrefillBlockLimit);
  x.w.max_len = max_len;
  return x.ops->prefill(x.view, x.w, x.l);
}

template <class F>
oscar_status append(const typename F::Cache* cache, const oscar_write_options* o, const void* k_new, const void* v_new, const int32_t* lens,
                    int32_t max_seq_len, void* stream, oscar_error* err) {
  CheckedWrite<F> x{{static_cast<cudaStream_t>(stream), err, F::kNames.append}};
  oscar_status st = x.check(cache, o, "k_new, v_new", k_new, v_new, lens);
  if (st != OSCAR_OK || (st = check_append_len(x.l.fn, max_seq_len, F::capacity(*cache), err)) != OSCAR_OK) return st;
  return x.ops->append(x.view, x.w, x.l);
}

template <class F>
oscar_status decode(const typename F::Cache* cache, const oscar_decode_options* o, const DecodeCall& c, void* stream, oscar_error* err) {
  const Launch l{static_cast<cudaStream_t>(stream), err, F::kNames.decode};
  typename F::View view;
  const typename F::Kernels* ops = nullptr;
  DecodeMods m;
  oscar_status st = F::check(cache, l.fn, err, view, ops);
  if (st != OSCAR_OK || (st = check_decode_options(o, l.fn, err, m)) != OSCAR_OK) return st;
  const DecodeTarget t{cache->batch, cache->num_kv_heads, cache->head_dim, F::capacity(*cache), cache->arrivals};
  const int64_t window = c.max_seq_len < F::window_tokens(*cache) ? c.max_seq_len : F::window_tokens(*cache);
  const auto make_plan = [&](int64_t units) {
    return format_plan(units, F::body_tokens(*cache, c.max_seq_len), window, F::kGranule, cache->head_dim);
  };
  return run_decode(c, m, t, l, make_plan, [&](const DecodeArgs& a) { return ops->decode(view, a, l); });
}

}  // namespace oscar::kernels

// The C entry points oscar_<fmt>_shape_supported, oscar_<fmt>_capacity, oscar_<fmt>_prefill, oscar_<fmt>_append and
// oscar_<fmt>_decode of oscar_kv.h over the cache struct oscar_<fmt>_cache, each the shared path above with the format's
// traits F (one line in the format's *_api.cu).
#define OSCAR_KV_FORMAT_ENTRY_POINTS(fmt, F)                                                                                       \
  extern "C" int oscar_##fmt##_shape_supported(int32_t head_dim, int32_t bits) { return F::lookup(head_dim, bits) ? 1 : 0; }   \
  extern "C" int64_t oscar_##fmt##_capacity(const oscar_##fmt##_cache* c) { return c ? F::capacity(*c) : 0; }                 \
  extern "C" oscar_status oscar_##fmt##_prefill(const oscar_##fmt##_cache* cache, const oscar_write_options* options, const void* k, \
                                                const void* v, const int32_t* seq_lens, int32_t max_len, void* stream,           \
                                                oscar_error* err) {                                                             \
    return oscar::kernels::prefill<F>(cache, options, k, v, seq_lens, max_len, stream, err);                                     \
  }                                                                                                                              \
  extern "C" oscar_status oscar_##fmt##_append(const oscar_##fmt##_cache* cache, const oscar_write_options* options,             \
                                               const void* k_new, const void* v_new, const int32_t* seq_lens, int32_t max_seq_len, \
                                               void* stream, oscar_error* err) {                                                \
    return oscar::kernels::append<F>(cache, options, k_new, v_new, seq_lens, max_seq_len, stream, err);                          \
  }                                                                                                                              \
  extern "C" oscar_status oscar_##fmt##_decode(const oscar_##fmt##_cache* cache, const oscar_decode_options* options, const void* q, \
                                               int32_t num_q_heads, const int32_t* seq_lens, int32_t max_seq_len,               \
                                               float softmax_scale, float* out, void* workspace, size_t workspace_bytes,        \
                                               void* stream, oscar_error* err) {                                                \
    const oscar::kernels::DecodeCall c{q, num_q_heads, seq_lens, max_seq_len, softmax_scale, out, workspace, workspace_bytes};  \
    return oscar::kernels::decode<F>(cache, options, c, stream, err);                                                            \
  }
