// oscar-sweep: dumps x recipes x bit widths -> attention-fidelity tables and a Pareto plot.
#include "app_main.h"
#include "oscar/01_core/output_files.h"
#include "oscar/12_sweep/sweep.h"
#include "oscar/13_report/sweep_tables.h"

int main(int argc, char** argv) {
  CLI::App app{"oscar-sweep: run quantization recipes over KV dumps and tabulate attention fidelity vs effective bits"};
  oscar::cli::show_defaults(app);
  std::string config, output, budget = "3@32K", metric = "kl";
  bool quiet = false, list = false;
  app.add_option("config", config, "sweep config (YAML; see experiments/sweeps/)")->check(oscar::cli::not_a_folder());
  app.add_option("--output", output, "override the config's output folder");
  app.add_option("--budget", budget, "the verdict's bit budget: effective bits per element, at a context length (BITS or BITS@CONTEXT)");
  app.add_option("--metric", metric, "the verdict's metric: kl (attention distributions) or output-error (attention output)");
  app.add_flag("--list-presets", list, "list the preset recipes and exit");
  app.add_flag("--quiet", quiet, "no progress bar");
  return oscar::run_app("oscar-sweep", app, argc, argv, [&] {
    if (list) {
      for (const auto& n : oscar::preset_names()) {
        const auto p = oscar::load_preset(n);
        fmt::print("{:<16} {}\n", n, p.recipe.source);
      }
      return 0;
    }
    const oscar::Budget b = oscar::parse_budget(budget);
    oscar::sweep_metric(metric);  // an unknown --metric before the config
    if (config.empty()) oscar::fail("give a sweep config (see experiments/sweeps/), or --list-presets");
    oscar::SweepConfig cfg = oscar::load_sweep_config(config);
    if (!output.empty()) cfg.output = output;
    cfg.budget = b;
    cfg.metric = metric;
    oscar::check_sweep_output(cfg);                            // writable, and pareto.py runnable, before the work
    const oscar::OutputLock lock(cfg.output, "oscar-sweep");  // a second sweep into this folder fails at once
    const oscar::SweepResult r = oscar::run_sweep(cfg, !quiet);
    oscar::write_sweep_outputs(cfg, r);
    fmt::print("{}\nwrote {}/summary.md, summary.csv, summary.json, layers.csv, pareto.png\n", oscar::summary_terminal(cfg, r), cfg.output);
    return 0;
  });
}
