// cache_policy.h: which tokens of a T-token cache a recipe keeps in full precision and which form the
// low-bit body, per tensor (keys and values may have windows of their own: KIVI), and what the whole cache
// costs in bits. The state is the cache as the policy leaves it after T tokens: [0, sink) in window dtype;
// body [sink, body_end) quantized; [body_end, T) in window dtype (the recent window, the unfilled residual
// block, and any partial per-channel group).
#pragma once
#include "oscar/06_quantize/recipe.h"

namespace oscar {

struct CacheSegments {
  int sink_end = 0;  // body starts here
  int body_end = 0;  // tail starts here
  int tokens = 0;
  int body() const { return body_end - sink_end; }
  int full_precision() const { return tokens - body(); }
};

struct KvSegments {
  CacheSegments key, value;
  const CacheSegments& of(bool is_value) const { return is_value ? value : key; }
};
// The segments of keys and values after `tokens` tokens (a tensor kept in fp16 has no window and no body).
KvSegments cache_segments(const Recipe& r, long tokens);

// Bits per element of K and V together, per KV head and token: codes, scales, zero points, key norms
// (shared by the n_kv_heads of a layer) and full-precision windows, at `tokens` cached tokens; `group: head`
// (kGroupHead) counts as head_dim.
struct EffectiveBits {
  double key = 0, value = 0;  // bits per element of K alone and of V alone
  double total() const { return (key + value) / 2; }
};
EffectiveBits effective_bits(const Recipe& r, long tokens, int head_dim, int n_kv_heads);

}  // namespace oscar
