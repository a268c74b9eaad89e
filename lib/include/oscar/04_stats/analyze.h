// analyze.h: oscar-analyze's work: TNI statistics of every layer and KV head of a dump, for K before
// and after RoPE and for V, and the attention sink of every layer (sinks.h), streamed one layer at a time, and what
// they say (tni_reading). Their renderings (terminal table, CSV, JSON, plots): report/tni_report.h.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "oscar/03_dump/dump.h"
#include "oscar/04_stats/sinks.h"
#include "oscar/04_stats/tni.h"

namespace oscar {

struct TniRow {
  int layer = 0, kv_head = 0;
  std::string tensor;  // "k_pre", "k" (post-RoPE) or "v"
  HeadStats stats;
};

struct TniReport {
  std::string dump_path;
  DumpInfo info;
  std::vector<int> token_ids;
  std::vector<std::string> token_text;
  std::vector<TniRow> rows;  // by layer, then KV head, then tensor
  std::vector<LayerSinks> sinks;  // one per layer (sinks.h)
  double outlier_z = 3.5;    // the threshold the outliers were found with
  std::string token_label(int position) const;  // the token's text when the dump has it, else its id
  int undefined_tni() const;  // rows whose TNI is undefined (all-zero head): shown as undefined, kept out of worst-of
};

struct AnalyzeOptions {
  double outlier_z = 3.5;
  bool progress = true;
};

TniReport analyze_dump(const DumpReader& dump, const AnalyzeOptions& opt);

// The reading's thresholds: a layer's worst key TNI up to kTniBalanced is balanced, above kTniSevere severe; a layer that
// puts kSinkAttention or more of its attention on position 0 is a sink layer.
inline constexpr double kTniBalanced = 3.0, kTniSevere = 10.0, kSinkAttention = 0.2;
// A few sentences computed from the report: how hard the keys and values are (TNI classes), channel outliers, which
// layers are sink layers, and what each means for the recipes.
std::vector<std::string> tni_reading(const TniReport& r);
// Worst (largest) defined value of each layer over its KV heads: TNI and channel spread of K (post-RoPE) and V.
struct LayerWorst {
  double k_tni = NAN, k_chan = NAN, v_tni = NAN, v_chan = NAN;
};
std::vector<LayerWorst> layer_worst(const TniReport& r);

}  // namespace oscar
