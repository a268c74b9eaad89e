// cache_policy.cpp: window arithmetic and bit accounting of a recipe.
#include "oscar/06_quantize/cache_policy.h"

#include <algorithm>

#include "oscar/06_quantize/quantizer.h"

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

}  // namespace oscar
