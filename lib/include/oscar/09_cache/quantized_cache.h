// quantized_cache.h: a KvCache that serves attention from a recipe's quantized cache as a server decoding token by
// token would hold it: the sink and the newest tokens stay in the window dtype; a token (or, for per-channel keys
// and residual blocks, a whole block) is quantized once, when the policy moves it into the body, and never changes
// after. Each new body block is quantized by the CPU reference (cache_sim.h), so the state after T tokens equals
// simulate_layer() over those T tokens. A chunk of many tokens gives each of its queries the cache as it was after
// that query's own token (AttentionView's per-query body ranges), so a prefill or a teacher-forced passage in one
// chunk reads what token-by-token decoding reads, at the cost of one forward pass. A local (sliding-window) layer
// holds its window alone, in the window dtype: the recipe quantizes the global layers.
#pragma once
#include <utility>
#include <vector>

#include "oscar/07_quantize/cache_sim.h"
#include "oscar/02_model/forward/model.h"

namespace oscar {

class QuantizedKvCache : public KvCache {
 public:
  // `recipe` resolved for the model's head_dim (resolve_recipe); `calib` for calibrated recipes.
  QuantizedKvCache(const ModelConfig& c, const Recipe& recipe, const CovarianceRotations* calib);
  void append(int layer, const MatrixRM& k, const MatrixRM& v) override;
  void attention_view(int layer, int n, AttentionView& view) override;
  // The cache of `layer` as it stands after length() tokens (rows = positions first_position(layer) ..): body rows
  // in their quantized form, the others in the window dtype. Valid once a forward pass has attended over them.
  void state(int layer, MatrixRM& k, MatrixRM& v) const;

 private:
  Recipe recipe_;
  int n_kv_, head_dim_;
  std::vector<LayerRotations> rot_;
  // Per layer, rows = positions from first_position(layer), columns head-major: every row rounded to the window
  // dtype (kw, vw) and the rows that entered the body in their quantized form (kb, vb).
  std::vector<MatrixRM> kw_, vw_, kb_, vb_;
  std::vector<std::pair<int, int>> body_done_;  // per layer, keys and values: body positions [sink, done) quantized
  std::vector<int> rounded_;                    // per layer: positions below it hold their window rounding
};

}  // namespace oscar
