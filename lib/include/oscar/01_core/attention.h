// attention.h: what attention received in one layer (dump format v2's per-layer attributes): the logit
// scaling, sliding window, soft-cap, learned sink logits and RoPE description. Metrics compute the
// "reference attention" of DUMP format v2 from it (see README, "Dump format"):
//   l_j = scaling * q.k_j for visible j (j <= i, and i - j < sliding_window when it is > 0);
//   l_j = softcap * tanh(l_j / softcap) when softcap > 0; p = softmax(l), with exp(sinks[h]) (not scaled)
//   added to the denominator of query head h when sinks is non-empty.
#pragma once
#include <cmath>
#include <string>
#include <vector>

namespace oscar {

struct LayerAttention {
  double scaling = 0;                // logit factor; plain llama attention: 1/sqrt(head_dim)
  long sliding_window = 0;           // 0: full causal attention
  double softcap = 0;                // 0: none
  std::string rope_convention = "adjacent-pairs";  // "adjacent-pairs", "half-split" or "none"
  int rotary_dim = 0;                // leading channels RoPE rotates (0 with "none")
  double rope_theta = 10000.0;
  std::vector<float> sinks;          // [n_heads] learned sink logits, or empty

  // Plain causal attention with logits q.k / sqrt(head_dim), full RoPE: what a v1 dump records implicitly.
  static LayerAttention standard(int head_dim, std::string convention = "adjacent-pairs", double theta = 10000.0) {
    LayerAttention a;
    a.scaling = 1.0 / std::sqrt(static_cast<double>(head_dim));
    a.rope_convention = std::move(convention);
    a.rotary_dim = head_dim;
    a.rope_theta = theta;
    return a;
  }
  // Whether key j is visible to the query at position i (both 0-based positions in the sequence).
  bool visible(long i, long j) const { return j <= i && (sliding_window <= 0 || i - j < sliding_window); }
  // The logit of a raw dot product q.k, after scaling and soft-capping.
  double logit(double dot) const {
    const double l = scaling * dot;
    return softcap > 0 ? softcap * std::tanh(l / softcap) : l;
  }
};

// Why `a` is not a valid description of a layer with `n_heads` query heads of width `head_dim`, or "" when
// it is: scaling positive and finite, window >= 0, softcap >= 0 and finite, a known RoPE convention,
// rotary_dim even within 1..head_dim (0 exactly for "none"), rope_theta positive and finite unless "none",
// sinks empty or n_heads finite values.
std::string attention_problem(const LayerAttention& a, int n_heads, int head_dim);

}  // namespace oscar
