// oscar-analyze: Token Norm Imbalance statistics of a KV dump (table, CSV, JSON, plots).
#include "app_main.h"
#include "oscar/13_report/tni_report.h"

int main(int argc, char** argv) {
  CLI::App app{"oscar-analyze: per-layer, per-KV-head token-norm (TNI) and channel statistics of a KV dump"};
  oscar::cli::show_defaults(app);
  std::string dump;
  oscar::TniOutputs out;
  oscar::AnalyzeOptions opt;
  bool quiet = false, per_head = false;
  app.add_option("dump", dump, "HDF5 dump (oscar-kv dump format v1 or v2)")->required()->check(oscar::cli::not_a_folder());
  app.add_option("--csv", out.csv, "write the statistics as CSV");
  app.add_option("--json", out.json, "write the statistics (with outlier tokens) as JSON");
  app.add_option("--plots", out.plots, "folder for PNG plots (token norms vs position, channel magnitude heat maps)");
  app.add_option("--outliers", out.max_outliers, "outlier tokens listed per row")->default_val(3)->check(oscar::cli::whole_number_in(0, 1000));
  app.add_option("--outlier-z", opt.outlier_z, "robust z threshold on log-norm for outlier tokens")->default_val(3.5)->check(oscar::cli::positive());
  app.add_flag("--per-head", per_head, "also print the table of every layer, KV head and tensor (the CSV holds it too)");
  app.add_flag("--quiet", quiet, "no progress bar");
  return oscar::run_app("oscar-analyze", app, argc, argv, [&] {
    opt.progress = !quiet;
    oscar::check_tni_outputs(out, dump);  // every output location, before the work
    const oscar::DumpReader reader(dump);
    const oscar::TniReport report = oscar::analyze_dump(reader, opt);
    oscar::write_tni_outputs(report, out);  // all of them or none
    oscar::print_tni_table(report, stdout, out.max_outliers, per_head);
    return 0;
  });
}
