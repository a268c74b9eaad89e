// sweep_tables.h: oscar-sweep's outputs: the Markdown and terminal tables with each dump's verdict, summary.json,
// layers.csv and summary.csv, and the Pareto plot (plots/pareto.py).
#pragma once
#include <string>

#include "oscar/12_sweep/sweep.h"

namespace oscar {

// "2" when keys and values share a width, else "K4V2".
std::string widths_text(int key_bits, int value_bits);
// Before the work: the output folder can be created and written, and plots/pareto.py can run.
void check_sweep_output(const SweepConfig& cfg);
// Writes OUTPUT/layers.csv, summary.csv, summary.md and pareto.png (all or nothing: temporaries, then renamed
// together; older files under those names are kept on any failure).
void write_sweep_outputs(const SweepConfig& cfg, const SweepResult& r);
std::string summary_markdown(const SweepConfig& cfg, const SweepResult& r);
// What the tool prints: each dump's verdict and a compact table (the full tables are in the outputs).
std::string summary_terminal(const SweepConfig& cfg, const SweepResult& r);
// summary.json: version, date, budget and metric, each dump's verdict and every summary row.
std::string summary_json(const SweepConfig& cfg, const SweepResult& r);

}  // namespace oscar
