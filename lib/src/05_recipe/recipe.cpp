// recipe.cpp: the rule of what one tensor's quantizer can take (recipe.h).
#include "oscar/05_recipe/recipe.h"

#include "oscar/01_core/error.h"

namespace oscar {

void validate_spec(const TensorQuant& spec, int tokens, int dim) {
  if (tokens < 0 || dim <= 0)
    fail("block shape {} tokens x {} head_dim is invalid; tokens must be >= 0 and head_dim > 0", tokens, dim);
  if (spec.bits == 16) return;  // kept in fp16: nothing else applies
  if (spec.bits < 1 || spec.bits > 8)
    fail("quantizer bits {} is out of range; use 1..8 (or 16 to keep the tensor in fp16)", spec.bits);
  if (!(spec.clip_ratio > 0.0f && spec.clip_ratio <= 1.0f))
    fail("clip ratio {} is outside (0, 1]; use e.g. 1.0 (no clipping) or 0.9", spec.clip_ratio);
  if (spec.clip_mode == ClipMode::Quantile && (spec.clip_search || spec.codebook == Codebook::LloydMax))
    fail("the quantile clip applies to uniform codes without clip search; use clip mode ratio with clip_search or lloyd-max");
  if (spec.zero_point == ZeroPoint::Integer && (spec.symmetric || spec.codebook == Codebook::LloydMax))
    fail("an integer zero point applies to asymmetric uniform codes; use zero_point float with symmetric or lloyd-max");
  if (spec.codebook == Codebook::LloydMax) {
    if (spec.bits > 4)
      fail("LloydMax codebook supports 1..4 bits (got {}); use 1..4 bits or the uniform codebook", spec.bits);
    return;  // no groups
  }
  if (spec.symmetric && spec.bits < 2)
    fail("symmetric quantization needs at least 2 bits (got {}); use bits >= 2 or symmetric: false",
         spec.bits);
  if (spec.group <= 0) fail("group size {} must be positive; use a divisor of head_dim {}", spec.group, dim);
  if (spec.axis == QuantAxis::PerToken && dim % spec.group != 0)
    fail("group size {} does not divide head_dim {}; use a divisor of {}", spec.group, dim, dim);
  if (spec.axis == QuantAxis::PerChannel && tokens % spec.group != 0)
    fail("per-channel group size {} does not divide the block's {} tokens; quantize a multiple of {} tokens "
         "(keep the rest in the residual window) or use a divisor of {}",
         spec.group, tokens, spec.group, tokens);
}

}  // namespace oscar
