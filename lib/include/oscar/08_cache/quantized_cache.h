// quantized_cache.h: a KvCache that serves attention from a recipe's quantized cache, token by token as a
// server would: the sink and the newest tokens stay in the window dtype; a token (or, for per-channel
// keys and residual blocks, a whole block) is quantized once, when the policy moves it into the body,
// and never changes after. Each new body block is quantized by the CPU reference (cache_sim.h), so the
// state after T tokens equals simulate_layer() over those T tokens.
#pragma once
#include <utility>
#include <vector>

#include "oscar/06_quantize/cache_sim.h"
#include "oscar/02_model/model.h"

namespace oscar {

class QuantizedKvCache : public KvCache {
 public:
  // `recipe` resolved for the model's head_dim (resolve_recipe); `calib` for calibrated recipes.
  QuantizedKvCache(const ModelConfig& c, const Recipe& recipe, const CovarianceRotations* calib);
  void attention_view(int layer, const MatrixRM*& k, const MatrixRM*& v) override;

 private:
  Recipe recipe_;
  int n_kv_, head_dim_;
  std::vector<LayerRotations> rot_;
  std::vector<MatrixRM> k_hat_, v_hat_;  // per layer, rows = positions, columns head-major
  std::vector<std::pair<int, int>> body_done_;  // per layer, keys and values: body rows [sink, done) already quantized
  std::vector<int> rounded_;             // per layer: rows [0, rounded) hold their window or body values
};

}  // namespace oscar
