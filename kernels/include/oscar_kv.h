/* oscar_kv.h: C API of the quantized KV caches (recipe oscar-cov: oscar_cov_*, layout in
 * oscar/cov_format.h; recipe oscar-omni: oscar_omni_*, layout in oscar/omni_format.h) and of the
 * decode-attention kernels. Same contract as oscar_kernels.h: oscar_status return, message in
 * *err, device pointers from cudaMalloc, stream as void*, no global state, asynchronous on `stream`.
 * Supported: oscar-cov head_dim 64, 128 or 256 (oscar_cov_shape_supported), oscar-omni as
 * oscar_omni_shape_supported says; body bits 2 or 4; query heads a multiple of KV heads with at most 16
 * query heads per KV head (GQA). All bf16 tensors are raw uint16 bf16 bits. */
#ifndef OSCAR_KV_H
#define OSCAR_KV_H

#include <stddef.h>
#include <stdint.h>

#include "oscar_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the kernels of the format are compiled for (head_dim, bits), else 0 (their one dispatch table). */
int oscar_cov_shape_supported(int32_t head_dim, int32_t bits);
int oscar_omni_shape_supported(int32_t head_dim, int32_t bits);
/* The most query heads per KV head any decode entry point takes. */
int oscar_max_query_group(void);

/* In-kernel rotations (rule: oscar/rotate_math.h): with a rotation, prefill, append and paged writes take UNROTATED bf16
 * K/V and a decode takes an unrotated query and returns the un-rotated output; without one (kind OSCAR_ROTATION_NONE) the
 * inputs are already rotated and a decode's output is still rotated by R_V. */
typedef enum oscar_rotation_kind {
  OSCAR_ROTATION_NONE = 0,     /* inputs already rotated */
  OSCAR_ROTATION_HADAMARD = 1, /* normalized Walsh-Hadamard on keys, values and queries (oscar-omni's H) */
  OSCAR_ROTATION_MATRIX = 2    /* dense float32 R_K for keys and queries, R_V for values (oscar-cov's R) */
} oscar_rotation_kind;
typedef struct oscar_rotation {
  int32_t kind;        /* oscar_rotation_kind */
  int32_t per_head;    /* MATRIX: 1 = one matrix per KV head (query heads use their KV head's), 0 = one for all */
  const float* key;    /* MATRIX: R_K float32 [per_head ? num_kv_heads : 1][head_dim][head_dim], row-major, k' = k R_K */
  const float* value;  /* MATRIX: R_V, same shape; v' = v R_V, decode returns o = o' R_V^T */
} oscar_rotation;      /* MATRIX pointers: device memory, 16-byte aligned */

/* The options of every entry point, one struct per kind of operation. A NULL pointer, or a zero-initialized struct, is
 * the plain operation (no rotation, no logit modifier); the *_plain inline functions at the end of this header are
 * the plain calls.
 *
 * oscar_write_options: prefill, append and paged write (oscar_cov_prefill, oscar_cov_append, oscar_omni_prefill,
 * oscar_omni_append, oscar_cov_paged_write).
 *   rotation: the in-kernel rotation of the k, v rows (see oscar_rotation).
 *
 * oscar_decode_options: every quantized decode (oscar_cov_decode, oscar_omni_decode, oscar_cov_paged_decode).
 *   rotation: the in-kernel rotation of q and of the output (see oscar_rotation).
 *   softcap > 0: every score s = softmax_scale * q.k becomes softcap * tanh(s / softcap) (Gemma 2's attention soft-capping);
 *     0 = none.
 *   sinks: NULL or device float32 [num_q_heads], 4-byte aligned: one logit per query head that joins the softmax denominator
 *     with no value (gpt-oss's attention sinks): out_h = sum_j e^{s_j} v_j / (e^{sinks[h]} + sum_j e^{s_j}); 0 with no token. */
typedef struct oscar_write_options {
  oscar_rotation rotation;
} oscar_write_options;
typedef struct oscar_decode_options {
  oscar_rotation rotation;
  float softcap;
  const float* sinks;
} oscar_decode_options;

/* How an oscar-cov body row is clipped (oscar_cov_cache.clip_mode; rule: oscar/quant_rules.h):
 *   OSCAR_CLIP_QUANTILE: each token row is clamped to +-(its k-th smallest |x|), k = floor(clip * head_dim), then
 *     quantized with its min and max (OSCAR's per-row quantile clamp; oscar-cov's at 2 bits);
 *   OSCAR_CLIP_RATIO: the row's min and max are scaled by clip (oscar-cov's at 4 bits). */
typedef enum oscar_clip_mode { OSCAR_CLIP_RATIO = 0, OSCAR_CLIP_QUANTILE = 1 } oscar_clip_mode;
/* How a scaled value rounds to its code (oscar_cov_cache.rounding): half to even, or half away from zero (for the
 * non-negative (x - min) / scale of a row: OSCAR's half-up; oscar-cov's). */
typedef enum oscar_rounding { OSCAR_ROUND_HALF_EVEN = 0, OSCAR_ROUND_HALF_AWAY = 1 } oscar_rounding;

typedef struct oscar_cov_cache {
  int32_t batch, num_kv_heads, head_dim, bits; /* bits: 2 or 4 */
  int32_t sink, recent;                        /* BF16 window sizes in tokens (64, 256 for oscar-cov) */
  int64_t body_capacity;                       /* packed body tokens per (sequence, KV head) */
  float clip_k, clip_v;                        /* in (0, 1]: the quantile or ratio of keys and values (0.96, 0.92 for oscar-cov) */
  int32_t clip_mode;                           /* oscar_clip_mode (oscar-cov: OSCAR_CLIP_QUANTILE at 2 bits, else RATIO) */
  int32_t rounding;                            /* oscar_rounding (oscar-cov: OSCAR_ROUND_HALF_AWAY) */
  void* k_sink; void* v_sink;                  /* bf16 [B*Hkv][sink][head_dim] (16-byte aligned) */
  void* k_recent; void* v_recent;              /* bf16 [B*Hkv][recent][head_dim] ring */
  void* k_codes; void* v_codes;                /* uint8 [B*Hkv][body_capacity][head_dim*bits/8] */
  void* k_params; void* v_params;              /* fp16 (scale, zero) [B*Hkv][body_capacity][2] */
  uint32_t* arrivals;                          /* decode arrival counters [B*Hkv][2], zero between decodes; NULL: two launches a decode */
} oscar_cov_cache;

/* Decode arrival counters (the `arrivals` field of either cache): with them a decode is one launch, the last block of
 * each (sequence, KV head, query group) merging the splits and setting its counter back to zero; the cache allocators
 * make them (a second, zeroed cudaMalloc of 8 bytes per sequence and KV head, not counted in *_cache_bytes). A cache
 * built by hand may leave them NULL (the merge is then a second kernel) or point them at zeroed device memory of its
 * own. Decodes of one cache must then be ordered (one stream, or events): two at once would share the counters. */

/* Allocation of an oscar-cov cache for `batch` sequences of `num_kv_heads` heads, each holding up to
 * `capacity` tokens (sizes from oscar::covfmt::layout): one zeroed cudaMalloc carved into the eight
 * arrays (16-byte aligned) and the decode arrival counters, with oscar-cov's row rule (clip 0.96/0.92, quantile at 2 bits and ratio at 4, half away
 * from zero; the fields may be changed before the first prefill). *cache is filled on success; release with
 * oscar_cov_cache_destroy. oscar_cov_cache_bytes gives the bytes it would take (0 on bad shapes). */
oscar_status oscar_cov_cache_create(oscar_cov_cache* cache, int32_t batch, int32_t num_kv_heads, int32_t head_dim,
                                    int32_t bits, int32_t sink, int32_t recent, int64_t capacity, oscar_error* err);
int64_t oscar_cov_cache_bytes(int32_t batch, int32_t num_kv_heads, int32_t head_dim, int32_t bits, int32_t sink,
                              int32_t recent, int64_t capacity);
oscar_status oscar_cov_cache_destroy(oscar_cov_cache* cache, oscar_error* err);

/* Tokens one (sequence, KV head) can hold: sink + body_capacity + recent. */
int64_t oscar_cov_capacity(const oscar_cov_cache* cache);

/* Prefill: writes tokens [0, seq_lens[b]) of every sequence from k, v: bf16 [B][Hkv][max_len][head_dim].
 * seq_lens: device int32 [B], each <= max_len (larger values are clamped to max_len); max_len <= capacity. Sink/recent
 * tokens are copied, body tokens quantized (codes bit-exact with the CPU reference of oscar/quant_rules.h under the
 * cache's clip_mode and rounding). options: see oscar_write_options. */
oscar_status oscar_cov_prefill(const oscar_cov_cache* cache, const oscar_write_options* options, const void* k, const void* v,
                               const int32_t* seq_lens, int32_t max_len, void* stream, oscar_error* err);

/* Decode append: token t = seq_lens[b] of each sequence from k_new, v_new: bf16 [B][Hkv][head_dim];
 * demotes the oldest recent token into the body when the window is full. Does NOT modify seq_lens
 * (the caller increments them). max_seq_len (host): an upper bound of seq_lens; max_seq_len + 1 must
 * not exceed the capacity. options: see oscar_write_options. */
oscar_status oscar_cov_append(const oscar_cov_cache* cache, const oscar_write_options* options, const void* k_new, const void* v_new,
                              const int32_t* seq_lens, int32_t max_seq_len, void* stream, oscar_error* err);

/* Workspace bytes oscar_cov_decode / oscar_omni_decode (quantized = 1) / oscar_bf16_decode (0) need for these shapes on the
 * current device (with room for the rotated queries of a rotated decode). */
size_t oscar_decode_workspace_bytes(int32_t batch, int32_t num_q_heads, int32_t num_kv_heads,
                                       int32_t head_dim, int32_t max_seq_len, int32_t quantized);

/* Decode attention, one query per sequence: q bf16 [B][Hq][head_dim], out float32 [B][Hq][head_dim],
 * out_h = softmax(scale * q_h K^T) V over the L_b cached tokens of KV head h / (Hq/Hkv). Split-KV with an exact
 * log-sum-exp merge. options: see oscar_decode_options (without a rotation q is rotated by R_K and out still rotated by R_V). */
oscar_status oscar_cov_decode(const oscar_cov_cache* cache, const oscar_decode_options* options, const void* q, int32_t num_q_heads,
                              const int32_t* seq_lens, int32_t max_seq_len, float softmax_scale, float* out,
                              void* workspace, size_t workspace_bytes, void* stream, oscar_error* err);

/* The like-for-like BF16 baseline: k, v bf16 [B][Hkv][capacity][head_dim], same structure and merge. */
oscar_status oscar_bf16_decode(const void* k, const void* v, int32_t batch, int32_t num_kv_heads,
                               int64_t capacity, int32_t head_dim, const void* q, int32_t num_q_heads,
                               const int32_t* seq_lens, int32_t max_seq_len, float softmax_scale, float* out,
                               void* workspace, size_t workspace_bytes, void* stream, oscar_error* err);


/* ---- oscar-omni (OScaR): Hadamard-rotated K/V, per-token key norms over all KV heads, keys per channel
 * over 32-token blocks, values per token in 32-channel groups, OScaR's integer zero point, BF16 residual block of 128 tokens.
 * Layout and byte sizes: oscar/omni_format.h. Supported shapes: oscar_omni_shape_supported. */
typedef struct oscar_omni_cache {
  int32_t batch, num_kv_heads, head_dim, bits;
  int64_t body_capacity;          /* body tokens per (sequence, KV head); a multiple of 128 */
  void* k_res; void* v_res;       /* bf16 [B*Hkv][128][head_dim] residual block (16-byte aligned) */
  void* k_codes; void* v_codes;   /* uint8 [B*Hkv][body_capacity][head_dim*bits/8] */
  void* k_params;                 /* fp16 (scale, zero) [B*Hkv][body_capacity/32][head_dim] */
  void* v_params;                 /* fp16 (scale, zero) [B*Hkv][body_capacity][head_dim/32] */
  void* k_norms;                  /* fp16 [B][body_capacity] */
  uint32_t* arrivals;             /* decode arrival counters [B*Hkv][2], zero between decodes; NULL: two launches a decode */
} oscar_omni_cache;

/* Allocation of an oscar-omni cache holding up to `capacity` tokens per sequence (sizes from
 * oscar::omnifmt::layout): one zeroed cudaMalloc carved into the seven arrays (16-byte aligned) and the decode
 * arrival counters (see oscar_cov_cache_create); release
 * with oscar_omni_cache_destroy. oscar_omni_cache_bytes gives the bytes it would take (0 on bad shapes). */
oscar_status oscar_omni_cache_create(oscar_omni_cache* cache, int32_t batch, int32_t num_kv_heads, int32_t head_dim,
                                     int32_t bits, int64_t capacity, oscar_error* err);
int64_t oscar_omni_cache_bytes(int32_t batch, int32_t num_kv_heads, int32_t head_dim, int32_t bits, int64_t capacity);
oscar_status oscar_omni_cache_destroy(oscar_omni_cache* cache, oscar_error* err);

/* Tokens one sequence can hold: body_capacity + 127. */
int64_t oscar_omni_capacity(const oscar_omni_cache* cache);

/* Prefill tokens [0, seq_lens[b]) from k, v: bf16 [B][Hkv][max_len][head_dim]; the first 128*floor(L/128) tokens
 * are quantized (codes bit-exact with the CPU twin), the rest copied into the residual block. Same conventions as
 * oscar_cov_prefill. A rotated prefill or append (oscar-omni's own rotation is OSCAR_ROTATION_HADAMARD) stages one
 * 32-token block of every KV head in shared memory (num_kv_heads * head_dim * 64 bytes): OSCAR_ERR_UNSUPPORTED beyond
 * the device's per-block limit. */
oscar_status oscar_omni_prefill(const oscar_omni_cache* cache, const oscar_write_options* options, const void* k, const void* v,
                                const int32_t* seq_lens, int32_t max_len, void* stream, oscar_error* err);

/* Append token t = seq_lens[b] (k_new, v_new: bf16 [B][Hkv][head_dim]); completes and quantizes a
 * residual block when t % 128 == 127. Does not modify seq_lens; max_seq_len + 1 <= capacity. */
oscar_status oscar_omni_append(const oscar_omni_cache* cache, const oscar_write_options* options, const void* k_new,
                               const void* v_new, const int32_t* seq_lens, int32_t max_seq_len, void* stream, oscar_error* err);

/* Decode attention over the omni cache; same contract as oscar_cov_decode (without a rotation q is rotated by H and out
 * still rotated by H); workspace: oscar_decode_workspace_bytes(..., quantized = 1). */
oscar_status oscar_omni_decode(const oscar_omni_cache* cache, const oscar_decode_options* options, const void* q,
                               int32_t num_q_heads, const int32_t* seq_lens, int32_t max_seq_len, float softmax_scale, float* out,
                               void* workspace, size_t workspace_bytes, void* stream, oscar_error* err);

/* ---- Paged oscar-cov, for serving engines (layout: oscar/cov_paged_format.h; design: kernels/SERVING_ENGINES.md).
 * A pool of pages holds every token's codes, addressed by position through a block table (write-through); the BF16
 * sink and recent windows live in per-sequence window slots outside the pages. Same row rule, codes and decode
 * arithmetic as the contiguous oscar-cov cache: the same tokens give the same codes and the same decode bits. */
typedef struct oscar_cov_paged {
  int32_t num_kv_heads, head_dim, bits;       /* bits: 2 or 4; (head_dim, bits) as oscar_cov_shape_supported */
  int32_t sink, recent;                       /* window sizes: sink a multiple of 64 (or 0), recent > 0 */
  int32_t page_tokens;                        /* P: tokens per page, a positive multiple of 64 */
  int64_t num_pages;                          /* pages in the pool */
  int64_t page_stride;                        /* bytes from page i to page i + 1 (>= the layout's page_bytes; 16-byte multiple) */
  int32_t num_window_slots;                   /* window slots in k_sink .. v_recent */
  float clip_k, clip_v;                       /* as oscar_cov_cache */
  int32_t clip_mode, rounding;                /* as oscar_cov_cache */
  void* pages;                                /* uint8 [num_pages][page_stride] (16-byte aligned) */
  void* k_sink; void* v_sink;                 /* bf16 [num_window_slots][Hkv][sink][head_dim] */
  void* k_recent; void* v_recent;             /* bf16 [num_window_slots][Hkv][recent][head_dim] ring */
} oscar_cov_paged;

/* One engine step's sequences (device int32 arrays unless noted). */
typedef struct oscar_paged_batch {
  int32_t num_seqs;
  const int32_t* seq_lens;         /* [num_seqs] tokens of each sequence once this step's tokens are written */
  const int32_t* query_start_loc;  /* [num_seqs + 1] this step's tokens of sequence i are [qsl[i], qsl[i + 1]) (write) */
  const int32_t* block_table;      /* [num_seqs][block_table_stride] page ids of positions [jP, (j + 1)P) */
  int32_t block_table_stride;
  const int32_t* window_slot;      /* [num_seqs] each sequence's window slot */
  int32_t split_tokens;            /* decode: 0 = the planner's splits (they depend on num_seqs); > 0 (a multiple of 256):
                                      body splits of this many tokens and one window block whatever the batch, so that a
                                      sequence's output does not depend on the batch it is decoded in (batch-invariant) */
} oscar_paged_batch;

/* Workspace bytes oscar_cov_paged_decode needs for these shapes and split_tokens (0: as oscar_decode_workspace_bytes). */
size_t oscar_cov_paged_workspace_bytes(int32_t num_seqs, int32_t num_q_heads, int32_t num_kv_heads, int32_t head_dim,
                                       int32_t max_seq_len, int32_t split_tokens);

/* The paged layout of one shape in bytes (oscar/cov_paged_format.h), for callers that size or read pages themselves.
 * Page p of the pool starts at p * page_stride (>= page_bytes); KV head h's region of a page at h * region_bytes; in a
 * region, token slot o's K codes at k_codes_offset + o * code_bytes, its V codes at v_codes_offset + o * code_bytes, its
 * K (scale, zero) fp16 pair at k_params_offset + o * param_bytes and its V pair at v_params_offset + o * param_bytes. */
typedef struct oscar_cov_paged_layout {
  int64_t code_bytes;         /* packed codes of one token row (K or V) of one KV head: head_dim * bits / 8 */
  int64_t param_bytes;        /* fp16 (scale, zero) of one token row (K or V) of one KV head */
  int64_t token_bytes;        /* one token of one KV head in a page: K and V codes and params */
  int64_t region_bytes;       /* one KV head's region of a page: page_tokens * token_bytes */
  int64_t page_bytes;         /* one page, all KV heads: num_kv_heads * region_bytes */
  int64_t k_codes_offset, v_codes_offset, k_params_offset, v_params_offset;  /* segments of a region */
  int64_t bf16_token_bytes;   /* one token of one KV head in the BF16 windows, K and V */
  int64_t window_slot_bytes;  /* one window slot (all KV heads, sink + recent, K and V): Hkv * (sink + recent) * bf16_token_bytes */
} oscar_cov_paged_layout;
/* Fills *layout for (page_tokens, num_kv_heads, head_dim, bits, sink, recent) under the rules of oscar_cov_paged (a
 * compiled shape, page_tokens and sink multiples of 64, recent > 0); OSCAR_ERR_INVALID_ARGUMENT / UNSUPPORTED otherwise. */
oscar_status oscar_cov_paged_layout_of(int32_t page_tokens, int32_t num_kv_heads, int32_t head_dim, int32_t bits, int32_t sink,
                                       int32_t recent, oscar_cov_paged_layout* layout, oscar_error* err);
/* oscar-cov's row rule (clip 0.96 / 0.92, quantile at 2 bits, ratio at 4, half away from zero) into cache's rule fields. */
void oscar_cov_paged_default_rule(oscar_cov_paged* cache);

/* Writes this step's tokens: k, v bf16 rows of num_kv_heads * head_dim values, token i at k + i * k_token_stride
 * (elements; a multiple of 8). Token i of sequence s (qsl[s] <= i < qsl[s + 1]) has position
 * seq_lens[s] - (qsl[s + 1] - qsl[s]) + (i - qsl[s]); its codes go to page slot_mapping[i] / P at offset
 * slot_mapping[i] % P, and its BF16 rows to the sequence's window slot when it is in the sink or among the last `recent`
 * tokens; a token whose slot_mapping is negative (an engine's padding) is not written at all. Tokens at or past
 * qsl[num_seqs] must have negative slots (not checked on the device). options: see oscar_write_options. */
oscar_status oscar_cov_paged_write(const oscar_cov_paged* cache, const oscar_write_options* options, const oscar_paged_batch* batch,
                                   const void* k, const void* v, int64_t k_token_stride, int64_t v_token_stride, int32_t num_tokens,
                                   const int64_t* slot_mapping, void* stream, oscar_error* err);

/* Decode attention, one query per sequence (q bf16 [num_seqs][Hq][head_dim]) over seq_lens[s] tokens; out float32
 * [num_seqs][Hq][head_dim]. max_seq_len (host): an upper bound of seq_lens that sets the split plan (a graph-stable bound
 * such as the engine's max model length keeps one plan for every step); workspace:
 * oscar_cov_paged_workspace_bytes(num_seqs, Hq, Hkv, head_dim, max_seq_len, split_tokens). options: see
 * oscar_decode_options. */
oscar_status oscar_cov_paged_decode(const oscar_cov_paged* cache, const oscar_decode_options* options, const oscar_paged_batch* batch,
                                    const void* q, int32_t num_q_heads, int32_t max_seq_len, float softmax_scale, float* out,
                                    void* workspace, size_t workspace_bytes, void* stream, oscar_error* err);

/* ---- The plain calls: the six entry points of the two contiguous formats with options NULL (no rotation: inputs already
 * rotated; no logit modifier), same arguments otherwise:
 *   oscar_cov_prefill_plain(cache, k, v, seq_lens, max_len, stream, err)         = oscar_cov_prefill(cache, NULL, ...)
 *   oscar_cov_append_plain(cache, k_new, v_new, seq_lens, max_seq_len, stream, err) = oscar_cov_append(cache, NULL, ...)
 *   oscar_cov_decode_plain(cache, q, num_q_heads, seq_lens, max_seq_len, softmax_scale, out, workspace, workspace_bytes,
 *                          stream, err)                                            = oscar_cov_decode(cache, NULL, ...)
 *   oscar_omni_prefill_plain, oscar_omni_append_plain, oscar_omni_decode_plain: the same over oscar_omni_cache. */
#define OSCAR_KV_PLAIN_CALLS(FMT)                                                                                                    \
  static inline oscar_status oscar_##FMT##_prefill_plain(const oscar_##FMT##_cache* cache, const void* k, const void* v,            \
                                                        const int32_t* seq_lens, int32_t max_len, void* stream, oscar_error* err) {  \
    return oscar_##FMT##_prefill(cache, NULL, k, v, seq_lens, max_len, stream, err);                                                 \
  }                                                                                                                                  \
  static inline oscar_status oscar_##FMT##_append_plain(const oscar_##FMT##_cache* cache, const void* k_new, const void* v_new,     \
                                                       const int32_t* seq_lens, int32_t max_seq_len, void* stream, oscar_error* err) { \
    return oscar_##FMT##_append(cache, NULL, k_new, v_new, seq_lens, max_seq_len, stream, err);                                      \
  }                                                                                                                                  \
  static inline oscar_status oscar_##FMT##_decode_plain(const oscar_##FMT##_cache* cache, const void* q, int32_t num_q_heads,       \
                                                       const int32_t* seq_lens, int32_t max_seq_len, float softmax_scale,          \
                                                       float* out, void* workspace, size_t workspace_bytes, void* stream,          \
                                                       oscar_error* err) {                                                         \
    return oscar_##FMT##_decode(cache, NULL, q, num_q_heads, seq_lens, max_seq_len, softmax_scale, out, workspace, workspace_bytes, \
                                stream, err);                                                                                        \
  }
OSCAR_KV_PLAIN_CALLS(cov)
OSCAR_KV_PLAIN_CALLS(omni)
#undef OSCAR_KV_PLAIN_CALLS

#ifdef __cplusplus
}
#endif

#endif /* OSCAR_KV_H */
