// recipe.h: a KV-cache quantization recipe: rotations, token scaling, how K and V are quantized, and
// which tokens stay in full precision (sink, recent window, residual block). Presets live in
// experiments/presets/*.yaml; recipe_yaml.h parses them.
#pragma once
#include <cstdint>
#include <string>

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
  float clip_ratio = 1.0f;
  bool clip_search = false;  // per-group MSE-optimal clip ratio (grid search), CPU reference only
  ScaleDtype scale_dtype = ScaleDtype::F16;
  Rounding rounding = Rounding::HalfEven;
  // LloydMax (TurboQuant-style): each token's vector is divided by its L2 norm (stored in scale_dtype)
  // and every coordinate is coded with the Lloyd-Max quantizer of N(0, 1/d); no groups, no zero point.
  Codebook codebook = Codebook::Uniform;
  bool quantized() const { return bits < 16; }
};

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

struct WindowSpec {
  int sink = 0;      // first `sink` tokens kept in window_dtype
  int recent = 0;    // last `recent` tokens kept in window_dtype
  int residual = 0;  // KIVI residual block: tokens stay full precision until a block of this many fills
  ScaleDtype window_dtype = ScaleDtype::BF16;  // storage of full-precision tokens (F16, BF16 or F32)
};

struct Recipe {
  std::string name;
  std::string source;  // where the settings come from (paper, section)
  RotationSpec key_rotation, value_rotation;
  CovarianceScope covariance_scope = CovarianceScope::Layer;  // of the covariance rotations (YAML covariance_scope)
  bool omni_token_scaling = false;  // OScaR: keys / per-token norm over all KV heads of the layer
  ScaleDtype norm_dtype = ScaleDtype::F16;
  TensorQuant key, value;
  WindowSpec windows;
  bool calibrated() const {
    return key_rotation.kind == RotationKind::Covariance || value_rotation.kind == RotationKind::Covariance;
  }
  // Needs covariance rotations fitted per KV head.
  bool calibrated_per_kv_head() const { return calibrated() && covariance_scope == CovarianceScope::KvHead; }
};

}  // namespace oscar
