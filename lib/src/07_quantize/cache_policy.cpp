// cache_policy.cpp: window arithmetic and bit accounting of a recipe.
#include "oscar/07_quantize/cache_policy.h"

#include <algorithm>

#include <fmt/format.h>

#include "oscar/07_quantize/quantizer.h"

namespace oscar {

namespace {

CacheSegments tensor_segments(const TensorQuant& q, const TensorWindows& w, long tokens) {
  CacheSegments s;
  s.tokens = static_cast<int>(tokens);
  if (!q.quantized()) return s;  // no body: the tensor stays in fp16
  s.sink_end = static_cast<int>(std::min<long>(tokens, w.sink));
  long end = tokens;
  if (w.recent > 0) end = std::min(end, tokens - w.recent);
  if (w.residual > 0) end = std::min(end, s.sink_end + (tokens - s.sink_end) / w.residual * w.residual);
  end = std::max<long>(end, s.sink_end);
  // Per-channel groups need whole groups of tokens: a partial group stays in full precision.
  if (q.axis == QuantAxis::PerChannel && q.codebook == Codebook::Uniform) end = s.sink_end + (end - s.sink_end) / q.group * q.group;
  s.body_end = static_cast<int>(end);
  return s;
}

}  // namespace

KvSegments cache_segments(const Recipe& r, long tokens) {
  return {tensor_segments(r.key, r.windows.key, tokens), tensor_segments(r.value, r.windows.value, tokens)};
}

double quantized_share(const Recipe& r, long tokens) {
  if (tokens <= 0) return 0;
  const KvSegments s = cache_segments(r, tokens);
  return (static_cast<double>(s.key.body()) + s.value.body()) / (2.0 * static_cast<double>(tokens));
}

double attended_quantized_share(const Recipe& r, long T, int n_queries, long sliding_window) {
  if (T <= 0 || n_queries <= 0) return 0;
  const KvSegments s = cache_segments(r, T);
  const long N = std::min<long>(n_queries, T);
  double sum = 0;
  for (long p = T - N; p < T; ++p) {
    const long first = sliding_window > 0 ? std::max(0L, p - sliding_window + 1) : 0;
    for (const CacheSegments* c : {&s.key, &s.value}) {
      const long lo = std::max<long>(first, c->sink_end), hi = std::min<long>(p + 1, c->body_end);
      sum += static_cast<double>(std::max(0L, hi - lo)) / static_cast<double>(p - first + 1);
    }
  }
  return sum / (2.0 * static_cast<double>(N));
}

double decoding_quantized_share(const Recipe& r, long T) {
  if (T < 2) return 0;
  double sum = 0;
  for (long i = 0; i + 1 < T; ++i) sum += quantized_share(r, i + 1);
  return sum / static_cast<double>(T - 1);
}

long tokens_for_quantized_share(const Recipe& r, double target, long limit) {
  // quantized_share rises with the length but not monotonically (a residual block fills, then flushes): scan upward
  // coarsely, then step back to the first length that reaches the target.
  long step = 1, t = 1;
  while (t <= limit && quantized_share(r, t) < target) t += step, step = std::min<long>(step * 2, 256);
  if (t > limit) return 0;
  long lo = std::max(1L, t - step);
  while (lo < t && quantized_share(r, lo) < target) ++lo;
  return lo;
}

std::string windows_text(const Recipe& r) {
  auto one = [](const TensorWindows& w) {
    std::string s;
    auto add = [&](const char* what, int n) {
      if (n > 0) s += fmt::format("{}{} {}", s.empty() ? "" : " + ", what, n);
    };
    add("sink", w.sink);
    add("recent", w.recent);
    add("residual", w.residual);
    return s.empty() ? std::string("no window") : s;
  };
  if (r.windows.shared()) return one(r.windows.key);
  return fmt::format("K {}, V {}", one(r.windows.key), one(r.windows.value));
}

EffectiveBits effective_bits(const Recipe& recipe, long tokens, int head_dim, int n_kv_heads) {
  Recipe r = recipe;  // `group: head` counts one scale (and zero point) per head_dim values
  r.key.group = resolved_group(r.key, head_dim);
  r.value.group = resolved_group(r.value, head_dim);
  const KvSegments s = cache_segments(r, tokens);
  const double window_bits = 8.0 * scale_dtype_bytes(r.windows.window_dtype);
  const double elems = static_cast<double>(tokens) * head_dim;
  auto tensor_bits = [&](const TensorQuant& q, const CacheSegments& seg) {
    if (!q.quantized()) return 16.0 * elems / elems;  // the whole cache in fp16
    const BitCost body = block_bits(q, seg.body(), head_dim);
    return (body.total() + static_cast<double>(seg.full_precision()) * head_dim * window_bits) / elems;
  };
  EffectiveBits e;
  e.key = tensor_bits(r.key, s.key);
  e.value = tensor_bits(r.value, s.value);
  if (r.omni_token_scaling && r.key.quantized())  // one norm per body token per layer, shared by its KV heads
    e.key += static_cast<double>(s.key.body()) * 8.0 * scale_dtype_bytes(r.norm_dtype) / n_kv_heads / elems;
  return e;
}

ModelCacheSize model_cache_size(const Recipe& r, long tokens, const ModelConfig& c) {
  ModelCacheSize m;
  const bool quantizes = r.key.quantized() || r.value.quantized();
  const double per_token = 2.0 * c.n_kv_heads * c.head_dim();  // K and V elements of one token in one layer
  const double window_bits = quantizes ? 8.0 * scale_dtype_bytes(r.windows.window_dtype) : 16.0;
  double bits = 0, elements = 0, global_bf16 = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const long held = c.held_tokens(l, tokens);
    const double e = per_token * static_cast<double>(held);
    const bool local = c.window(l) > 0;
    bits += e * (local ? window_bits : quantizes ? effective_bits(r, tokens, c.head_dim(), c.n_kv_heads).total() : 16.0);
    elements += e;
    if (!local) global_bf16 += 2 * e;
    m.held_tokens += held;
  }
  m.bits_per_element = elements > 0 ? bits / elements : 0;
  m.bytes = bits / 8;
  m.bf16_bytes = 2 * elements;
  m.global_share_bf16 = m.bf16_bytes > 0 ? global_bf16 / m.bf16_bytes : 0;
  return m;
}

}  // namespace oscar
