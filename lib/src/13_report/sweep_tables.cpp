// sweep_tables.cpp: oscar-sweep's outputs (sweep_tables.h).
#include "oscar/13_report/sweep_tables.h"

#include <cmath>
#include <filesystem>

#include "oscar/01_core/error.h"
#include "oscar/01_core/output_files.h"
#include "oscar/07_quantize/cache_policy.h"
#include "oscar/13_report/plotting.h"
#include "oscar/13_report/table_text.h"
#include "oscar/13_report/verdict_text.h"

namespace fs = std::filesystem;

namespace oscar {

std::string widths_text(int key_bits, int value_bits) {
  return key_bits == value_bits ? std::to_string(key_bits) : fmt::format("K{}V{}", key_bits, value_bits);
}

namespace {

const Verdict* verdict_of(const SweepResult& r, const std::string& dump) {
  for (const auto& [d, v] : r.verdicts)
    if (d == dump) return &v;
  return nullptr;
}

std::string share_cell(const SweepSummary& s) {
  if (!s.quantizes) return "-";
  return fmt::format("{}{:.0f}%", s.quantized_share < kMinQuantizedShare ? "⚠ " : "", 100 * s.quantized_share);
}

}  // namespace

std::string summary_markdown(const SweepConfig& cfg, const SweepResult& r) {
  std::string md;
  for (const auto& d : cfg.dumps) {
    int queries = cfg.queries;  // as evaluated: at most the dump's tokens
    for (const SweepSummary& s : r.summary)
      if (s.dump == d.name) queries = s.queries;
    md += fmt::format("\n**{}** (`{}`, {} queries; mean over layers and KV heads, worst in brackets)\n\n", d.name,
                      fs::path(d.path).filename().string(), queries);
    if (const Verdict* v = verdict_of(r, d.name)) md += verdict_text(*v, cfg.budget, r.metric) + "\n\n";
    md += fmt::format(
        "| recipe | bits | in low bits | eff. bits (dump / {} / 128K) | K rel. MSE | V rel. MSE | logit rel. MSE | attn KL | out rel. err | "
        "top-8 overlap |\n",
        context_text(cfg.budget.context));
    md += "|---|---|---|---|---|---|---|---|---|---|\n";
    bool any_low = false;
    for (const SweepSummary& s : r.summary) {
      if (s.dump != d.name) continue;
      any_low = any_low || (s.quantizes && s.quantized_share < kMinQuantizedShare);
      const auto m = [](double mean, double worst, const char* spec) {
        return fmt::format("{} ({})", metric_text(mean, spec, false), metric_text(worst, spec, false));
      };
      md += fmt::format("| {} | {} | {} | {:.2f} / {:.2f} / {:.2f} | {} | {} | {} | {} | {} | {} |\n", s.recipe,
                        widths_text(s.key_bits, s.value_bits), share_cell(s), s.bits_at_dump, s.bits_budget, s.bits_128k,
                        m(s.mean.k_rel_mse, s.worst.k_rel_mse, "{:.4f}"), m(s.mean.v_rel_mse, s.worst.v_rel_mse, "{:.4f}"),
                        m(s.mean.logit_rel_mse, s.worst.logit_rel_mse, "{:.4f}"), m(s.mean.kl, s.worst.kl, "{:.4f}"),
                        m(s.mean.out_rel_err, s.worst.out_rel_err, "{:.4f}"), m(s.mean.top8_overlap, s.worst.top8_overlap, "{:.3f}"));
    }
    md += fmt::format(
        "\n\"in low bits\": of the keys and values the queries read, the share stored in low bits (the rest is in the recipe's "
        "full-precision windows at this length){}. The verdict's interval: 95%, bootstrap over the (layer, KV head) rows, paired.\n",
        any_low ? fmt::format("; ⚠ under {:.0f}%: the row measures mostly full precision and is not ranked", 100 * kMinQuantizedShare)
                : std::string());
  }
  return md;
}

std::string summary_terminal(const SweepConfig& cfg, const SweepResult& r) {
  std::string t;
  for (const auto& d : cfg.dumps) {
    t += fmt::format("\n{} (mean over layers and KV heads; full tables in {}/summary.md)\n", d.name, cfg.output);
    t += fmt::format("  {:<28} {:>5} {:>11} {:>12} {:>8} {:>9} {:>7}\n", "recipe", "bits", "in low bits",
                     fmt::format("bits @{}", context_text(cfg.budget.context)), "attn KL", "out err", "top-8");
    for (const SweepSummary& s : r.summary) {
      if (s.dump != d.name) continue;
      t += fmt::format("  {:<28} {:>5} {:>11} {:>12.2f} {:>8} {:>9} {:>7}\n", s.recipe, widths_text(s.key_bits, s.value_bits),
                       share_cell(s), s.bits_budget, metric_text(s.mean.kl, "{:.4f}", false),
                       metric_text(s.mean.out_rel_err, "{:.4f}", false), metric_text(s.mean.top8_overlap, "{:.3f}", false));
    }
    if (const Verdict* v = verdict_of(r, d.name)) t += "  " + verdict_text(*v, cfg.budget, r.metric) + "\n";
  }
  return t;
}

std::string summary_json(const SweepConfig& cfg, const SweepResult& r) {
  using nlohmann::json;
  auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json j = json_header("oscar-sweep");
  j["config"] = cfg.file;
  j["budget"] = {{"bits", cfg.budget.bits}, {"context", cfg.budget.context}};
  j["metric"] = cfg.metric;
  j["queries"] = cfg.queries;
  for (const auto& [dump, v] : r.verdicts) {
    json one = {{"dump", dump}};
    one.update(verdict_json(v, cfg.budget, r.metric));
    j["verdicts"].push_back(one);
  }
  for (const SweepSummary& s : r.summary) {
    json row = {{"dump", s.dump},
                {"recipe", s.recipe},
                {"preset", s.preset},
                {"bits", widths_text(s.key_bits, s.value_bits)},
                {"tokens", s.tokens},
                {"quantized_share", s.quantizes ? num(s.quantized_share) : json(nullptr)},
                {"ranked", s.ranked},
                {"eff_bits", {{"dump", s.bits_at_dump}, {"budget_context", s.bits_budget}, {"32k", s.bits_32k}, {"128k", s.bits_128k}}}};
    for (const auto& [name, f] : {std::pair<const char*, const Fidelity*>{"mean", &s.mean}, {"worst", &s.worst}})
      row[name] = {{"k_rel_mse", num(f->k_rel_mse)}, {"v_rel_mse", num(f->v_rel_mse)}, {"logit_rel_mse", num(f->logit_rel_mse)},
                   {"kl", num(f->kl)},               {"out_rel_err", num(f->out_rel_err)}, {"top8_overlap", num(f->top8_overlap)}};
    j["rows"].push_back(row);
  }
  j["warnings"] = r.warnings;
  return json_text(j);
}

void check_sweep_output(const SweepConfig& cfg) {
  check_output_folder(cfg.output);
  std::vector<fs::path> inputs{cfg.file};
  for (const SweepDump& d : cfg.dumps) inputs.insert(inputs.end(), {d.path, d.calibration});
  check_not_input(cfg.output, {"layers.csv", "summary.csv", "summary.md", "summary.json", "pareto.png"}, inputs);
  check_plotting("pareto.py");
}

void write_sweep_outputs(const SweepConfig& cfg, const SweepResult& r) {
  std::error_code ec;
  fs::create_directories(cfg.output, ec);
  if (ec) fail("{}: could not create the output folder (reason: {}); choose another --output", cfg.output, ec.message());
  OutputSet set;
  AtomicOutput& layers = set.add(fs::path(cfg.output) / "layers.csv");
  AtomicOutput& summary = set.add(fs::path(cfg.output) / "summary.csv");
  AtomicOutput& md = set.add(fs::path(cfg.output) / "summary.md");
  AtomicOutput& js = set.add(fs::path(cfg.output) / "summary.json");
  AtomicOutput& png = set.add(fs::path(cfg.output) / "pareto.png");
  {
    std::string f = "dump,recipe,bits,layer,kv_head,k_rel_mse,v_rel_mse,logit_rel_mse,kl,out_rel_err,top8_overlap\n";
    for (const SweepRow& x : r.rows)
      f += fmt::format("{},{},{},{},{},{},{},{},{},{},{}\n", x.dump, x.recipe, widths_text(x.key_bits, x.value_bits), x.layer,
                       x.kv_head, metric_text(x.f.k_rel_mse, "{:.6g}", true), metric_text(x.f.v_rel_mse, "{:.6g}", true),
                       metric_text(x.f.logit_rel_mse, "{:.6g}", true), metric_text(x.f.kl, "{:.6g}", true),
                       metric_text(x.f.out_rel_err, "{:.6g}", true), metric_text(x.f.top8_overlap, "{:.6g}", true));
    layers.write(f);
  }
  {
    std::string f =
        "dump,recipe,preset,bits,tokens,quantized_share,ranked,eff_bits_dump,eff_bits_32k,eff_bits_128k,eff_bits_budget,key_bits_128k,"
        "value_bits_128k,k_rel_mse,v_rel_mse,logit_rel_mse,kl,out_rel_err,top8_overlap,"
        "worst_k_rel_mse,worst_v_rel_mse,worst_logit_rel_mse,worst_kl,worst_out_rel_err,worst_top8_overlap\n";
    for (const SweepSummary& s : r.summary) {
      std::string metrics;
      for (const Fidelity* x : {&s.mean, &s.worst})
        for (double v : {x->k_rel_mse, x->v_rel_mse, x->logit_rel_mse, x->kl, x->out_rel_err, x->top8_overlap})
          metrics += fmt::format(",{}", csv_number(v));
      f += fmt::format("{},{},{},{},{},{},{},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f}{}\n", s.dump, s.recipe, s.preset,
                       widths_text(s.key_bits, s.value_bits), s.tokens, s.quantizes ? fmt::format("{:.4f}", s.quantized_share) : "",
                       s.ranked ? 1 : 0, s.bits_at_dump, s.bits_32k, s.bits_128k, s.bits_budget, s.key_bits_128k, s.value_bits_128k,
                       metrics);
    }
    summary.write(f);
  }
  md.write("<!-- oscar-sweep " + cfg.file + " -->\n" + summary_markdown(cfg, r));
  js.write(summary_json(cfg, r));
  run_python(plots_script("pareto.py"), {summary.temp_path().string(), png.temp_path().string(), cfg.title},
             png.final_path().string());
  set.commit();
}

}  // namespace oscar
