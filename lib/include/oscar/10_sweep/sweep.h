// sweep.h: oscar-sweep's work: dumps x recipes x bit widths -> fidelity per layer and KV head, with
// effective bits, aggregated (mean and worst); written as CSV, Markdown and a Pareto plot. The config
// (YAML) lists dumps (with a calibration dump for calibrated recipes), recipes (preset names, or maps
// overriding a preset's fields), bits and the number of queries; paths are relative to the config.
#pragma once
#include <string>
#include <vector>

#include "oscar/07_metrics/fidelity.h"
#include "oscar/06_quantize/recipe_yaml.h"

namespace oscar {

struct SweepDump {
  std::string name, path, calibration;  // calibration: a dump of the same model, another passage
};

struct SweepConfig {
  std::string file;  // the config's own path
  std::vector<SweepDump> dumps;
  std::vector<RecipeFile> recipes;
  std::vector<int> bits;  // empty: each recipe's own list
  int queries = 256;
  std::string output;     // folder
  std::string title;
};

SweepConfig load_sweep_config(const std::string& path);

struct SweepRow {  // one dump x recipe x layer x KV head
  std::string dump, recipe;
  int bits = 0, layer = 0, kv_head = 0;
  Fidelity f;
};

struct SweepSummary {  // one dump x recipe
  std::string dump, recipe, preset;
  int bits = 0;
  double bits_at_dump = 0, bits_32k = 0, bits_128k = 0, key_bits_128k = 0, value_bits_128k = 0;
  long tokens = 0;
  Fidelity mean, worst;  // worst: max of errors, min of top-8 overlap
};

struct SweepResult {
  std::vector<SweepRow> rows;
  std::vector<SweepSummary> summary;
};

SweepResult run_sweep(const SweepConfig& cfg, bool progress);
// Before the work: the output folder can be created and written, and plots/pareto.py can run.
void check_sweep_output(const SweepConfig& cfg);
// Writes OUTPUT/layers.csv, summary.csv, summary.md and pareto.png (all or nothing: temporaries, then renamed
// together; older files under those names are kept on any failure).
void write_sweep_outputs(const SweepConfig& cfg, const SweepResult& r);
std::string summary_markdown(const SweepConfig& cfg, const SweepResult& r);

}  // namespace oscar
