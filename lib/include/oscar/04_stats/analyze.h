// analyze.h: oscar-analyze's work: TNI statistics of every layer and KV head of a dump, for K before
// and after RoPE and for V, and the attention sink of every layer (sinks.h), streamed one layer at a time;
// and the report's renderings (terminal table, CSV, JSON, plot data + PNGs through plots/tni_plots.py
// and plots/sinks_plot.py).
#pragma once
#include <cstdio>
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
// The terminal report: the per-layer summary (TNI, channel spread and attention sink) and the reading; per_head adds the
// table of every layer, KV head and tensor (270 rows for SmolLM2) before it.
void print_tni_table(const TniReport& r, std::FILE* out, int max_outliers, bool per_head = false);
// The files oscar-analyze writes; an empty name is not written.
struct TniOutputs {
  std::string csv, json;
  std::string plots;  // folder: token_norms.csv, channel_absmax.csv and their PNGs (plots/tni_plots.py),
                      // sinks.csv and sinks.png (plots/sinks_plot.py)
  int max_outliers = 3;  // outlier tokens listed per row in the JSON
};
// Before the work: every output location can be written and none is the input `dump` (output_files.h); throws Error
// naming the output.
void check_tni_outputs(const TniOutputs& o, const std::string& dump);
// Writes every requested output under a temporary name, then renames them all: they appear together or
// not at all (an older file under the same name is kept on any failure).
void write_tni_outputs(const TniReport& r, const TniOutputs& o);

}  // namespace oscar
