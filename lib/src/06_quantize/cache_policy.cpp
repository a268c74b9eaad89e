// cache_policy.cpp: window arithmetic and bit accounting of a recipe.
#include "oscar/06_quantize/cache_policy.h"

#include <algorithm>

#include "oscar/06_quantize/quantizer.h"

namespace oscar {

CacheSegments cache_segments(const Recipe& r, long tokens) {
  CacheSegments s;
  s.tokens = static_cast<int>(tokens);
  const bool quantized = r.key.quantized() || r.value.quantized();
  s.sink_end = static_cast<int>(std::min<long>(tokens, quantized ? r.windows.sink : 0));
  long end = tokens;
  if (quantized && r.windows.recent > 0) end = std::min(end, tokens - r.windows.recent);
  if (quantized && r.windows.residual > 0) end = std::min(end, s.sink_end + (tokens - s.sink_end) / r.windows.residual * r.windows.residual);
  end = std::max<long>(end, s.sink_end);
  // Per-channel groups need whole groups of tokens: a partial group stays in full precision.
  for (const TensorQuant* q : {&r.key, &r.value})
    if (q->quantized() && q->axis == QuantAxis::PerChannel && q->codebook == Codebook::Uniform)
      end = s.sink_end + (end - s.sink_end) / q->group * q->group;
  s.body_end = static_cast<int>(end);
  return s;
}

EffectiveBits effective_bits(const Recipe& recipe, long tokens, int head_dim, int n_kv_heads) {
  Recipe r = recipe;  // `group: head` counts one scale (and zero point) per head_dim values
  r.key.group = resolved_group(r.key, head_dim);
  r.value.group = resolved_group(r.value, head_dim);
  const CacheSegments s = cache_segments(r, tokens);
  const double window_bits = 8.0 * scale_dtype_bytes(r.windows.window_dtype);
  const double elems = static_cast<double>(tokens) * head_dim;
  auto tensor_bits = [&](const TensorQuant& q) {
    if (!q.quantized()) return 16.0 * elems / elems;  // the whole cache in fp16
    const BitCost body = block_bits(q, s.body(), head_dim);
    return (body.total() + static_cast<double>(s.full_precision()) * head_dim * window_bits) / elems;
  };
  EffectiveBits e;
  e.key = tensor_bits(r.key);
  e.value = tensor_bits(r.value);
  if (r.omni_token_scaling && r.key.quantized())  // one norm per body token per layer, shared by its KV heads
    e.key += static_cast<double>(s.body()) * 8.0 * scale_dtype_bytes(r.norm_dtype) / n_kv_heads / elems;
  return e;
}

}  // namespace oscar
