// tni_report.h: oscar-analyze's renderings of a TniReport (04_stats/analyze.h): the terminal report (the per-layer
// summary of TNI, channel spread and attention sink, then the reading), the CSV and JSON of every row, the sinks' CSV
// and JSON, and the plots (plots/tni_plots.py, plots/sinks_plot.py).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "oscar/04_stats/analyze.h"

namespace oscar {

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

// The "attn max-head h<i>" cells of a table row (attention widths `width` and `head_width`, the head index padded to
// `index_width`), or "out of window" padded to the same width where no averaged query sees position 0.
std::string sink_cells(const LayerSinks& l, int width, int head_width, int index_width);
std::string sinks_csv(const std::vector<LayerSinks>& s);  // one row per layer
nlohmann::json sinks_json(const std::vector<LayerSinks>& s);

}  // namespace oscar
