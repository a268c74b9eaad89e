// sinks.h: the attention sink of each layer. For position 0 (the first token): its key and value L2 norm
// over the median norm of all positions (per KV head; mean and min over the KV heads), and the attention
// mass the last min(max_queries, T) queries give it (softmax over positions 0..t of scaling * q_t . k_j,
// causal; mean over query heads and those of the queries whose sliding window holds position 0: undefined where
// none does). Contract: q [n_heads, T, hd], k and v [n_kv_heads, T,
// hd] as dumped (q and k after RoPE), n_heads a multiple of n_kv_heads (query head h reads KV head
// h / (n_heads / n_kv_heads)); the layer's attention description (dump v2: scaling, sliding window, soft-cap,
// sink logits) defines the softmax; the `scaling` overload is plain causal attention with that logit scale.
#pragma once
#include <cstdio>
#include <string>
#include <vector>


#include "oscar/01_core/attention.h"
#include "oscar/01_core/tensor.h"

namespace oscar {

struct LayerSinks {
  int layer = 0;
  int queries = 0;       // the last `queries` positions were averaged
  double scaling = 0;    // the logit scale used
  // ||x_0|| / median over positions of ||x_t||, per KV head: mean and min over heads (NaN: median 0).
  double key_ratio_mean = 0, key_ratio_min = 0;
  double value_ratio_mean = 0, value_ratio_min = 0;
  // Softmax weight on position 0, mean over query heads and the averaged queries that can see it; NaN (undefined)
  // when none can: position 0 lies outside the layer's sliding window for all of them.
  double attention_mean = 0;
  double attention_max_head = 0;  // the same mean for the query head that attends to position 0 most
  int attention_max_head_index = 0;
  long window = 0;           // the layer's sliding window (0: none)
  int queries_seeing_0 = 0;  // how many of the averaged queries have position 0 in their window
  bool out_of_window() const { return queries_seeing_0 == 0; }
};

// One layer's sink statistics; throws Error on shapes that break the contract (or T = 0).
LayerSinks layer_sinks(int layer, const HeadTensor& q, const HeadTensor& k, const HeadTensor& v, const LayerAttention& attention,
                       int max_queries = 256);
LayerSinks layer_sinks(int layer, const HeadTensor& q, const HeadTensor& k, const HeadTensor& v, double scaling,
                       int max_queries = 256);

}  // namespace oscar
