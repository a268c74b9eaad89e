// fidelity.h: how well attention survives a quantized cache, per layer and KV head. The queries are
// the last n_queries positions of the dump (post-RoPE), each attending to the cache as the layer's
// LayerAttention says (attention.h: the dump's scaling, causal mask with its sliding window, soft-cap,
// and sink term in the softmax denominator).
//   k_rel_mse, v_rel_mse: ||X - X^||_F^2 / ||X||_F^2 over all tokens (original space)
//   logit_rel_mse: sum (l - l^)^2 / sum l^2 over (query head, query, visible key), l = att.logit(q.k)
//   kl: mean over (query head, query) of KL(p || p^) in nats, p = the attention weights (with a sink,
//       the sink's share is one more outcome of both distributions)
//   out_rel_err: mean over (query head, query) of ||o - o^|| / ||o||, o = p V
//   top8_overlap: mean over (query head, query) of |top8(p) & top8(p^)| / 8 (fewer keys: of all keys)
// Undefined values are NaN: a relative error whose reference is zero (all-zero K or V: 0/0; all-zero
// logits), and out_rel_err when every query's full-precision output is zero (queries with o = 0 are
// left out of its mean). n_queries above T evaluates all T positions.
#pragma once
#include <vector>

#include "oscar/01_core/attention.h"
#include "oscar/01_core/tensor.h"

namespace oscar {

struct Fidelity {
  double k_rel_mse = 0, v_rel_mse = 0, logit_rel_mse = 0, kl = 0, out_rel_err = 0, top8_overlap = 0;
};

// q: the layer's queries [n_heads, T, d]; k, v, k_hat, v_hat: [n_kv_heads, T, d]; att: the layer's attention
// (att.sinks empty or [n_heads]). One result per KV head.
std::vector<Fidelity> layer_fidelity(const HeadTensor& q, const HeadTensor& k, const HeadTensor& v,
                                     const HeadTensor& k_hat, const HeadTensor& v_hat, int n_queries,
                                     const LayerAttention& att);

}  // namespace oscar
