// cov_format.h: THE on-device layout of oscar-kv's quantized KV cache (recipe oscar-cov), and
// its byte-size formulas. Shared by the CUDA kernels (kernels/src/cov/), the C API
// (oscar_kv.h), the benchmarks and the CPU tests; plain C++ with OSCAR_HD functions.
//
// Recipe oscar-cov (token-wise asymmetric groups, rotated K and V):
//   * Rotations: fixed orthogonal R_K, R_V. Keys are stored rotated (k' = k R_K) and values rotated
//     (v' = v R_V). At decode the caller rotates the query (q' = q R_K) and un-rotates the output
//     (o = o' R_V^T) OUTSIDE the attention kernel (a small [heads x d] x [d x d] matmul); the kernels
//     take and return rotated vectors. Prefill/append take K/V already rotated.
//   * Per sequence b and KV head h, the cache holds L_b tokens (L_b in a device int32 array):
//       sink   : tokens [0, min(L, S))                                  BF16, [S][D] per (b, h)
//       body   : tokens [S, S + nb), nb = max(0, L - S - W)              packed low-bit, index t - S
//       recent : tokens [S + nb, L), at most W of them                  BF16 ring: slot (t - S) % W
//     with S = sink (64) and W = recent (256) tokens. Which segment a token lives in follows from L
//     alone; appending token t = L when t - S >= W first demotes token t - W (ring slot (t - S) % W)
//     into body index t - W - S, then writes the new token into that slot.
//   * Body, per token and KV head, for K and V separately: one asymmetric group over all D channels
//     (D = head_dim: 64, 128 or 256 compiled => group D): codes packed little-endian as in quant_rules.h (2 bits: byte k
//     holds channels 4k..4k+3, channel 4k lowest; 4 bits: low nibble = even channel), D*BITS/8 bytes
//     per token (32 for INT2), followed in a separate array by (scale, zero) as two fp16 (4 bytes).
//     Codes come from the BF16 input values by the cache's row rule (clip_mode, clip_k/clip_v, rounding): by default
//     at 2 bits OSCAR's (its code: per-row quantile clamp at 0.96 (K) / 0.92 (V), oscar::quantile_clip_index and
//     clamp_to_threshold, then oscar::group_params(min, max, BITS, asymmetric, clip 1, fp16) and quantize_value
//     rounding half away from zero); at 4 bits, and with OSCAR_CLIP_RATIO, group_params(clip*min, clip*max, ...).
//   * Arrays (all device memory; "BH" = batch * kv_heads, (b, h) major):
//       k_sink, v_sink       bf16    [BH][S][D]
//       k_recent, v_recent   bf16    [BH][W][D]
//       k_codes, v_codes     uint8   [BH][body_capacity][D*BITS/8]
//       k_params, v_params   fp16x2  [BH][body_capacity]  (scale, zero)
//   * State bytes per token per KV head (K + V): BF16 2*2*D = 512; INT2 body 2*(D/4 + 4) = 72;
//     INT4 body 2*(D/2 + 4) = 136 (D = 128). A sequence of T tokens stores the sink and recent
//     windows in BF16 (allocated in full) plus T - S - W body tokens.
// oscar-omni (Hadamard q/k/v, per-channel key blocks of 32 tokens, residual 128) has its own layout: omni_format.h.
#pragma once
#include <cstdint>

#include "oscar/host_device.h"
#include "oscar/quant_rules.h"

namespace oscar::covfmt {

constexpr int kDefaultSink = 64;
constexpr int kDefaultRecent = 256;
constexpr float kClipK = 0.96f;
constexpr float kClipV = 0.92f;
constexpr Rounding kRounding = Rounding::HalfAway;  // OSCAR's half-up on (x - min) / scale >= 0
// oscar-cov's clip at `bits`: OSCAR's per-row quantile clamp at 2 bits (the width OSCAR defines); the ratio clip at
// the other widths, where it measured better (preset oscar-cov, its `clip: {bits: [2]}`).
OSCAR_HD ClipMode default_clip_mode(int bits) { return bits == 2 ? ClipMode::Quantile : ClipMode::Ratio; }
constexpr int kParamBytes = 4;  // fp16 scale + fp16 zero per token per tensor

// Packed code bytes of one token's body row (one tensor).
OSCAR_HD int64_t body_code_bytes(int head_dim, int bits) { return static_cast<int64_t>(head_dim) * bits / 8; }
// Body bytes per token per KV head for K and V together (codes + fp16 scale/zero).
OSCAR_HD int64_t body_bytes_per_token(int head_dim, int bits) { return 2 * (body_code_bytes(head_dim, bits) + kParamBytes); }
// BF16 bytes per token per KV head for K and V together.
OSCAR_HD int64_t bf16_bytes_per_token(int head_dim) { return 2 * 2 * static_cast<int64_t>(head_dim); }

// Body tokens of a sequence holding `tokens` tokens.
OSCAR_HD int64_t body_tokens(int64_t tokens, int sink, int recent) {
  const int64_t nb = tokens - sink - recent;
  return nb > 0 ? nb : 0;
}
// Bytes one (sequence, KV head) occupies when holding `tokens` tokens in a cache sized exactly for
// them (body_capacity = body_tokens): BF16 sink + BF16 recent windows (allocated in full) + body.
OSCAR_HD int64_t state_bytes(int64_t tokens, int head_dim, int bits, int sink, int recent) {
  return static_cast<int64_t>(sink + recent) * bf16_bytes_per_token(head_dim) +
         body_tokens(tokens, sink, recent) * body_bytes_per_token(head_dim, bits);
}
// Bytes of the same tokens in a plain BF16 cache.
OSCAR_HD int64_t bf16_state_bytes(int64_t tokens, int head_dim) { return tokens * bf16_bytes_per_token(head_dim); }

// Bytes a decode step must read for one (sequence, KV head) of length `tokens` (only the live
// tokens of the windows): used by the benchmarks to compute achieved bandwidth.
OSCAR_HD int64_t decode_read_bytes(int64_t tokens, int head_dim, int bits, int sink, int recent) {
  const int64_t nb = body_tokens(tokens, sink, recent);
  return (tokens - nb) * bf16_bytes_per_token(head_dim) + nb * body_bytes_per_token(head_dim, bits);
}

// Every device array of an oscar-cov cache, in bytes, for `batch` sequences of `kv_heads` KV heads that
// must each hold `capacity` tokens (sink + body + recent; the body gets what the windows leave). THE size
// formula: the C API's allocator (oscar_cov_cache_create), the benchmarks, the tests and the Python
// package all take their sizes from here.
struct Layout {
  int64_t body_capacity = 0;  // body tokens per (sequence, KV head)
  int64_t capacity = 0;       // tokens one (sequence, KV head) holds: sink + body_capacity + recent
  int64_t sink_bytes = 0;     // each of k_sink, v_sink
  int64_t recent_bytes = 0;   // each of k_recent, v_recent
  int64_t codes_bytes = 0;    // each of k_codes, v_codes
  int64_t params_bytes = 0;   // each of k_params, v_params
  OSCAR_HD int64_t total_bytes() const { return 2 * (sink_bytes + recent_bytes + codes_bytes + params_bytes); }
};
OSCAR_HD Layout layout(int batch, int kv_heads, int head_dim, int bits, int64_t capacity, int sink, int recent) {
  Layout l;
  const int64_t bh = static_cast<int64_t>(batch) * kv_heads;
  l.body_capacity = body_tokens(capacity, sink, recent);
  l.capacity = sink + l.body_capacity + recent;
  l.sink_bytes = bh * sink * head_dim * 2;
  l.recent_bytes = bh * recent * head_dim * 2;
  l.codes_bytes = bh * l.body_capacity * body_code_bytes(head_dim, bits);
  l.params_bytes = bh * l.body_capacity * kParamBytes;
  return l;
}

}  // namespace oscar::covfmt
