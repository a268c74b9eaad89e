// ops.h: the operations the block units (block_*.cpp) are made of: RMSNorm of rows and of heads, RoPE, the
// attention sub-layer (projections, q/k norms, RoPE, the cache, attention) and the feed-forward activations.
// Private to lib/src/02_model/forward.
#pragma once
#include <vector>

#include "oscar/02_model/forward/model.h"

namespace oscar::forward {

// out = x / sqrt(mean(x^2) + eps) * w per row (w [x.cols()]).
void rmsnorm_rows(const MatrixRM& x, const float* w, float eps, MatrixRM& out);
// In place: RMSNorm of every head (head_dim columns) of every row with the weight w [head_dim].
void rmsnorm_heads(MatrixRM& x, int head_dim, const float* w, float eps);

// cos and sin of angle pos * inv_freq[i] for a chunk's positions: [n, rotary_dims/2] each.
struct RopeTable {
  MatrixRM cos, sin;
  RopeTable(int n, int first_pos, const std::vector<float>& inv_freq);
};
// Rotates the pairs of every head: adjacent (2i, 2i+1) or half-split (i, i + rotary_dims/2), i below rotary_dims/2;
// channels past rotary_dims stay.
void apply_rope(MatrixRM& x, int head_dim, bool adjacent, const RopeTable& rt);

// What a block unit works with: the model, one layer, the chunk's cache and callback, the RoPE tables of the
// chunk's positions (global and local layers), and scratch matrices reused across layers.
struct BlockScratch {
  MatrixRM xb, q_pre, k_pre, q, k, v, att, o, h1, h3;
};
struct BlockContext {
  const Model& model;
  int layer;
  int p0;  // the chunk's first position
  KvCache& cache;
  const LayerCallback& on_layer;
  const RopeTable& rope;  // the layer's (local or global)
  BlockScratch& s;
  const ModelLayer& w() const { return model.weights().layers[static_cast<size_t>(layer)]; }
};

// Attention of the normalised input s.xb: q/k/v projections (+ biases), per-head q/k norms, RoPE, the callback,
// append to the cache and attention (the cache's, or over its view); the heads' outputs in s.att [n, q_dim],
// before the output projection.
void attention(const BlockContext& b);

// Feed-forward activations in place: h1 = act(h1) * h3.
void swiglu(MatrixRM& h1, const MatrixRM& h3);
void geglu_tanh(MatrixRM& h1, const MatrixRM& h3);

}  // namespace oscar::forward
