// cache_policy.h: which tokens of a T-token cache a recipe keeps in full precision and which form the
// low-bit body, per tensor (keys and values may have windows of their own: KIVI), and what the whole cache
// costs in bits. The state is the cache as the policy leaves it after T tokens: [0, sink) in window dtype;
// body [sink, body_end) quantized; [body_end, T) in window dtype (the recent window, the unfilled residual
// block, and any partial per-channel group).
#pragma once
#include <string>

#include "oscar/02_model/formats/checkpoint.h"
#include "oscar/05_recipe/recipe.h"

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

// How much of what attention reads is stored in low bits: the share of body tokens, mean over keys and values
// (a tensor kept in fp16 counts 0). A recipe whose windows hold most of a short passage evaluates full precision,
// not its quantizer: the tables mark rows under kMinQuantizedShare and never rank them as low-bit results.
inline constexpr double kMinQuantizedShare = 0.5;
// In a cache of `tokens` tokens.
double quantized_share(const Recipe& r, long tokens);
// Over the attention of the last `n_queries` positions of a T-token cache in its state after T tokens (oscar-sweep): a
// query at position p reads keys [first, p] (first = 0, or p - window + 1 with a sliding window); the share of those
// in the body, mean over the queries.
double attended_quantized_share(const Recipe& r, long T, int n_queries, long sliding_window);
// Over decoding T tokens one at a time (oscar-eval): the prediction from position i reads the cache of i + 1 tokens;
// quantized_share of that cache, mean over the T - 1 predictions.
double decoding_quantized_share(const Recipe& r, long T);
// The fewest tokens at which quantized_share(r, tokens) reaches `target` (0 when no length up to `limit` does).
long tokens_for_quantized_share(const Recipe& r, double target, long limit);
// "sink 64 + recent 256" / "K residual 128, V recent 128": the recipe's full-precision windows, for messages.
std::string windows_text(const Recipe& r);

// Bits per element of K and V together, per KV head and token: codes, scales, zero points, key norms
// (shared by the n_kv_heads of a layer) and full-precision windows, at `tokens` cached tokens; `group: head`
// (kGroupHead) counts as head_dim.
struct EffectiveBits {
  double key = 0, value = 0;  // bits per element of K alone and of V alone
  double total() const { return (key + value) / 2; }
};
EffectiveBits effective_bits(const Recipe& r, long tokens, int head_dim, int n_kv_heads);

// The whole model's cache after `tokens` positions: the recipe's cache in every global layer, and in every local
// (sliding-window) layer its last min(tokens, window) tokens in the window dtype (oscar-eval's caches and
// oscar_kv.hf keep local layers unquantized). A recipe that quantizes nothing stores every token in fp16.
struct ModelCacheSize {
  double bits_per_element = 0;  // K and V together, over every element the layers hold
  double bytes = 0;             // of every layer's K and V
  double bf16_bytes = 0;        // the same cache in BF16
  double global_share_bf16 = 0; // the global layers' share of bf16_bytes
  long held_tokens = 0;         // summed over layers
};
ModelCacheSize model_cache_size(const Recipe& r, long tokens, const ModelConfig& c);

}  // namespace oscar
