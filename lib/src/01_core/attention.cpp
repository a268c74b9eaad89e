// attention.cpp: validation of a layer's attention description (see attention.h).
#include "oscar/01_core/attention.h"

#include <fmt/format.h>

namespace oscar {

std::string attention_problem(const LayerAttention& a, int n_heads, int head_dim) {
  if (!(std::isfinite(a.scaling) && a.scaling > 0))
    return fmt::format("attribute scaling={} must be a positive finite number (the factor of q.k in the logits, e.g. "
                       "1/sqrt(head_dim) = {:.6g})",
                       a.scaling, 1.0 / std::sqrt(static_cast<double>(head_dim)));
  if (a.sliding_window < 0)
    return fmt::format("attribute sliding_window={} must be 0 (full causal attention) or a positive window", a.sliding_window);
  if (!(std::isfinite(a.softcap) && a.softcap >= 0))
    return fmt::format("attribute softcap={} must be 0 (none) or a positive finite number", a.softcap);
  const bool none = a.rope_convention == "none";
  if (!none && a.rope_convention != "adjacent-pairs" && a.rope_convention != "half-split")
    return fmt::format("attribute rope_convention='{}' is unknown (expected adjacent-pairs, half-split or none)",
                       a.rope_convention);
  if (none && a.rotary_dim != 0)
    return fmt::format("attribute rotary_dim={} with rope_convention='none' (a layer without RoPE rotates 0 channels)",
                       a.rotary_dim);
  if (!none && (a.rotary_dim <= 0 || a.rotary_dim > head_dim || a.rotary_dim % 2 != 0))
    return fmt::format("attribute rotary_dim={} must be an even number of channels in 2..head_dim={}", a.rotary_dim, head_dim);
  if (!none && !(std::isfinite(a.rope_theta) && a.rope_theta > 0))
    return fmt::format("attribute rope_theta={} must be a positive finite RoPE base", a.rope_theta);
  if (!a.sinks.empty()) {
    if (static_cast<int>(a.sinks.size()) != n_heads)
      return fmt::format("dataset 'sinks' holds {} values, expected one per query head (n_heads={})", a.sinks.size(), n_heads);
    for (size_t h = 0; h < a.sinks.size(); ++h)
      if (!std::isfinite(a.sinks[h])) return fmt::format("dataset 'sinks' holds a non-finite value ({}) at head {}", a.sinks[h], h);
  }
  return "";
}

}  // namespace oscar
