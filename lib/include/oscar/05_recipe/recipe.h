// recipe.h: a KV-cache quantization recipe: rotations, token scaling, how K and V are quantized, and
// which tokens stay in full precision (sink, recent window, residual block). Presets live in
// experiments/presets/*.yaml; recipe_yaml.h parses them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "oscar/quant_rules.h"

namespace oscar {

enum class QuantAxis { PerToken, PerChannel };

// TensorQuant::group of a recipe written with `group: head` (or `head_dim`): one group spans the whole
// head, whatever the model's head_dim; resolve_recipe() replaces it with the head_dim.
inline constexpr int kGroupHead = 0;
enum class Codebook { Uniform, LloydMax };

// How one tensor (K or V) of the low-bit body is quantized. bits = 16 keeps it in fp16 (no quantizer).
struct TensorQuant {
  int bits = 16;
  bool symmetric = false;
  QuantAxis axis = QuantAxis::PerToken;
  int group = 128;  // per-token: channels per group; per-channel: tokens per group (KIVI); kGroupHead: head_dim
  // clip_mode Ratio: the group's min and max are scaled by clip_ratio. Quantile (OSCAR): each token row is first
  // clamped to its quantile_clip_index(clip_ratio, head_dim)-th smallest |x| (quant_rules.h), then min/max as clip 1.
  float clip_ratio = 1.0f;
  ClipMode clip_mode = ClipMode::Ratio;
  bool clip_search = false;  // per-group MSE-optimal clip ratio (grid search), CPU reference only
  ScaleDtype scale_dtype = ScaleDtype::F16;
  Rounding rounding = Rounding::HalfEven;
  ZeroPoint zero_point = ZeroPoint::Float;  // Integer: OScaR's and QuaRot's whole-step zero point (quant_rules.h)
  bool range_with_zero = false;             // QuaRot: the group's range is widened to include 0 before clipping
  // LloydMax (TurboQuant-style): each token's vector is divided by its L2 norm (stored in scale_dtype)
  // and every coordinate is coded with the Lloyd-Max quantizer of N(0, 1/d); no groups, no zero point.
  Codebook codebook = Codebook::Uniform;
  bool quantized() const { return bits < 16; }
};

// Throws Error for a spec a block of `tokens` x `dim` cannot take (bits out of 1..8, symmetric with 1 bit, group not
// dividing dim (per-token) or tokens (per-channel), clip ratio outside (0, 1], LloydMax with more than 4 bits).
// bits = 16 (not quantized) is accepted; LloydMax ignores group and symmetric.
void validate_spec(const TensorQuant& spec, int tokens, int dim);

enum class RotationKind { None, Hadamard, RandomizedHadamard, RandomOrthogonal, Covariance };

// The group size of `q` on a model of this head_dim (kGroupHead -> head_dim; other sizes unchanged).
inline int resolved_group(const TensorQuant& q, int head_dim) { return q.group == kGroupHead ? head_dim : q.group; }

// What a covariance rotation is fitted on: every KV head of a layer together (one rotation per layer, shared
// by its KV heads: OSCAR's paper), or each KV head alone (its own query group, keys and values).
enum class CovarianceScope { Layer, KvHead };

struct RotationSpec {
  RotationKind kind = RotationKind::None;
  uint64_t seed = 0;               // randomized Hadamard / random orthogonal
  std::string order = "UHP";       // covariance: UHP (OSCAR), U, UP, UPH, HUP (ablations)
};

// The full-precision windows of one tensor (K or V).
struct TensorWindows {
  int sink = 0;      // first `sink` tokens kept in window_dtype
  int recent = 0;    // last `recent` tokens kept in window_dtype (a token leaves it one at a time: KIVI's values)
  int residual = 0;  // residual block: new tokens stay full precision until a block of this many fills (KIVI's keys)
  bool operator==(const TensorWindows& o) const { return sink == o.sink && recent == o.recent && residual == o.residual; }
};
struct WindowSpec {
  TensorWindows key, value;  // YAML `windows: {sink, recent, residual}` sets both; `key:` / `value:` maps one
  ScaleDtype window_dtype = ScaleDtype::BF16;  // storage of full-precision tokens (F16, BF16 or F32)
  const TensorWindows& of(bool is_value) const { return is_value ? value : key; }
  bool shared() const { return key == value; }  // the same windows for keys and values
};

struct Recipe {
  std::string name;
  std::string source;  // where the settings come from (paper, section)
  RotationSpec key_rotation, value_rotation;
  CovarianceScope covariance_scope = CovarianceScope::Layer;  // of the covariance rotations (YAML covariance_scope)
  bool omni_token_scaling = false;  // OScaR: keys / per-token norm over all KV heads of the layer
  ScaleDtype norm_dtype = ScaleDtype::F16;
  TensorQuant key, value;
  // YAML `clip: {bits: [...]}`: the widths at which a quantile clip_mode applies; at the other widths resolve_recipe()
  // sets the ratio clip (the ratios unchanged). Empty: every width.
  std::vector<int> quantile_bits;
  WindowSpec windows;
  bool calibrated() const {
    return key_rotation.kind == RotationKind::Covariance || value_rotation.kind == RotationKind::Covariance;
  }
  // Needs covariance rotations fitted per KV head.
  bool calibrated_per_kv_head() const { return calibrated() && covariance_scope == CovarianceScope::KvHead; }
};

}  // namespace oscar
