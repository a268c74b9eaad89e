// cache_sim.h: the CPU reference of a whole recipe on one layer: rotate K and V, scale keys by their
// per-token norm (OScaR), quantize the body and round the full-precision windows as the cache policy
// leaves them after the prompt, dequantize, and rotate back. The result is what attention sees, in
// the original space (q.k^ and P.V^ equal the rotated-space computations with the inverse rotation on
// the output).
#pragma once
#include <memory>
#include <vector>

#include "oscar/07_quantize/cache_policy.h"
#include "oscar/01_core/tensor.h"
#include "oscar/05_recipe/recipe.h"
#include "oscar/06_rotate/rotation.h"

namespace oscar {

// The rotations of one layer: keys[h] / values[h] rotate KV head h (and the query heads sharing it); a list
// of one rotation (every rotation of a per-layer recipe) is shared by all KV heads.
struct LayerRotations {
  std::vector<std::unique_ptr<Rotation>> keys, values;
  const Rotation& key(int kv_head) const { return *keys[keys.size() == 1 ? 0 : static_cast<size_t>(kv_head)]; }
  const Rotation& value(int kv_head) const { return *values[values.size() == 1 ? 0 : static_cast<size_t>(kv_head)]; }
  // Throws Error unless each list holds one rotation or one per KV head of a layer of `n_kv_heads`.
  void check_heads(int n_kv_heads) const;
};

// Builds the recipe's rotations for `layer` (covariance rotations from `calib` when the recipe needs them:
// the layer's, or with covariance_scope: kv-head one per KV head, which `calib` must hold).
LayerRotations layer_rotations(const Recipe& r, int head_dim, int layer, const CovarianceRotations* calib);

// K^ and V^ of every KV head, head-major like the input.
struct SimulatedLayer {
  HeadTensor k_hat, v_hat;
  KvSegments segments;
};
SimulatedLayer simulate_layer(const Recipe& r, const HeadTensor& k, const HeadTensor& v, const LayerRotations& rot);
// The same with explicit segments over the given rows (a quantizing cache simulates a newly filled block
// as all-body rows, and its window rows as all-window rows).
SimulatedLayer simulate_layer(const Recipe& r, const HeadTensor& k, const HeadTensor& v, const LayerRotations& rot,
                              const KvSegments& segments);

}  // namespace oscar
