// sweep.h: oscar-sweep's work: dumps x recipes x bit widths -> fidelity per layer and KV head, with
// effective bits, aggregated (mean and worst), and a verdict per dump (its outputs: report/sweep_tables.h). The config
// (YAML) lists dumps (with a calibration dump for calibrated recipes), recipes (preset names, or maps overriding a
// preset's fields), bits and the number of queries; paths are relative to the config.
#pragma once
#include <string>
#include <vector>

#include "oscar/08_metrics/fidelity.h"
#include "oscar/05_recipe/recipe_yaml.h"
#include "oscar/08_metrics/verdict.h"

namespace oscar {

struct SweepDump {
  // name: the rows' label, unique in a sweep: `name:` when given, else the file's stem, else (when two
  // stems collide) the path as the config writes it. calibration: a dump of the same model, another passage.
  std::string name, path, calibration;
};

struct SweepConfig {
  std::string file;  // the config's own path
  std::vector<SweepDump> dumps;
  std::vector<RecipeFile> recipes;
  std::vector<int> bits;  // empty: each recipe's own list (already applied to `recipes` by load_sweep_config)
  int queries = 256;
  std::string output;     // folder
  std::string title;
  Budget budget;             // --budget: the verdict's bit budget
  std::string metric = "kl"; // --metric kl | output-error: the verdict's metric
};

// The verdict metrics oscar-sweep takes (--metric): kl (attention distributions), output-error (attention output).
VerdictMetric sweep_metric(const std::string& name);

// Each recipe's widths: its own `bits:` in the config entry, else the config's `bits:`, else the preset's.
SweepConfig load_sweep_config(const std::string& path);

struct SweepRow {  // one dump x recipe x layer x KV head
  std::string dump, recipe;  // recipe: the label, with the widths truly used (NAME@2, NAME@K4V2)
  int bits = 0, layer = 0, kv_head = 0;  // bits: the width asked of the recipe
  int key_bits = 16, value_bits = 16;    // the widths used (a recipe's own key/value bits win)
  Fidelity f;  // undefined metrics (0/0) are NaN
};

struct SweepSummary {  // one dump x recipe
  std::string dump, recipe, preset;
  int bits = 0, key_bits = 16, value_bits = 16;
  int queries = 0;  // queries per KV head group actually evaluated: min(config queries, dump tokens)
  double bits_at_dump = 0, bits_32k = 0, bits_128k = 0, key_bits_128k = 0, value_bits_128k = 0, bits_budget = 0;
  // Of the keys the queries read, the share in low bits (attended_quantized_share with each layer's window, mean over
  // the layers); 0 for a recipe that quantizes nothing.
  double quantized_share = 0;
  bool quantizes = false;
  bool ranked = false;  // a candidate of the verdict: in the budget and mostly in low bits
  long tokens = 0;
  // Over the (layer, KV head) rows where a metric is defined; NaN when it is defined in none.
  Fidelity mean, worst;  // worst: max of errors, min of top-8 overlap
  int undefined = 0;     // undefined metric values (rows x metrics) left out of mean and worst
};

struct SweepResult {
  std::vector<SweepRow> rows;
  std::vector<SweepSummary> summary;
  std::vector<std::pair<std::string, Verdict>> verdicts;  // per dump (its name), in the config's order
  VerdictMetric metric;
  std::vector<std::string> warnings;  // also printed to stderr as they arise ("warning: ...")
};

SweepResult run_sweep(const SweepConfig& cfg, bool progress);
}  // namespace oscar
