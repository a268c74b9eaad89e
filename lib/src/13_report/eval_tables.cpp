// eval_tables.cpp: oscar-eval's Markdown tables, CSVs, JSON and recall plot.
#include "oscar/13_report/eval_tables.h"

#include <cmath>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "oscar/01_core/error.h"
#include "oscar/01_core/file_io.h"
#include "oscar/01_core/output_files.h"
#include "oscar/07_quantize/cache_policy.h"
#include "oscar/13_report/plotting.h"
#include "oscar/13_report/table_text.h"
#include "oscar/13_report/task_tables.h"
#include "oscar/13_report/verdict_text.h"

namespace fs = std::filesystem;

namespace oscar {

std::string eval_label(const std::string& recipe, bool gpu) { return gpu ? recipe + " (gpu)" : recipe; }

namespace {

// Text for a Markdown table cell: line breaks as ⏎, pipes escaped, other control bytes as \xNN.
std::string cell_text(const std::string& s) {
  std::string t;
  for (unsigned char c : s) {
    if (c == '\n') t += "⏎";
    else if (c == '|') t += "\\|";
    else if (c < 0x20 || c == 0x7f) t += fmt::format("\\x{:02x}", c);
    else t += static_cast<char>(c);
  }
  return t;
}

std::string ci_text(double v, Interval ci, const char* spec) {
  if (std::isnan(ci.lo)) return fmt::format(fmt::runtime(spec), v);
  return fmt::format("{} [{}, {}]", fmt::format(fmt::runtime(spec), v), fmt::format(fmt::runtime(spec), ci.lo),
                     fmt::format(fmt::runtime(spec), ci.hi));
}

// "87%", with a warning sign under kMinQuantizedShare; "-" for a recipe that quantizes nothing.
std::string share_text(double share, bool quantizes) {
  if (!quantizes) return "-";
  return fmt::format("{}{:.0f}%", share < kMinQuantizedShare ? "⚠ " : "", 100 * share);
}

std::string vs_best_text(const EvalRow& x, const EvalResult& r) {
  if (!r.verdict.found || !x.ranked) return x.quantizes ? "not ranked" : "-";
  if (x.recipe == r.verdict.best) return "**pick**";
  return fmt::format("{}{:+.4g} [{:+.4g}, {:+.4g}]", x.tied_with_best ? "≈ " : "", (x.vs_best.lo + x.vs_best.hi) / 2, x.vs_best.lo,
                     x.vs_best.hi);
}

}  // namespace

std::string eval_markdown(const EvalRequest& req, const EvalResult& r) {
  if (r.tasks) return tasks_markdown(*r.tasks, r.model_name);
  bool any_gpu = false, any_low = false;
  for (const EvalRow& x : r.rows) {
    any_gpu = any_gpu || x.gpu;
    any_low = any_low || (x.quantizes && x.quantized < kMinQuantizedShare);
  }
  std::string md = fmt::format("**{}**, {} (each token decoded from the recipe's quantized cache{})\n\n", r.model_name, r.passage,
                               any_gpu ? "; rows marked (gpu): attention by the CUDA decode kernels over their own quantized cache" : "");
  md += verdict_text(r.verdict, req.budget, r.metric) + "\n\n";
  if (r.local_layers > 0)
    md += fmt::format(
        "{} of the {} layers attend to a sliding window of {} tokens: they hold at most {} tokens, kept in the window dtype "
        "(unquantized) by every recipe; at {} tokens the {} global layers hold {:.1f}% of a BF16 cache ({:.1f} MiB in all). \"in low "
        "bits\" is over the global layers; bits and memory are over every layer.\n\n",
        r.local_layers, r.layers, r.local_window, r.local_window, context_text(req.budget.context), r.layers - r.local_layers,
        100 * r.global_share_bf16, r.bf16_bytes_budget / (1 << 20));
  md += fmt::format(
      "| recipe | in low bits | eff. bits (passage / {} / 128K) | KV at {} (MiB) | loss (nats) | perplexity | Δ loss vs fp32 [95%] | "
      "KL(fp32 ‖ quant) [95%] | top-1 agreement [95%] | {} vs pick [95%] |\n|---|---|---|---|---|---|---|---|---|---|\n",
      context_text(req.budget.context), context_text(req.budget.context), req.metric);
  for (const EvalRow& x : r.rows)
    md += fmt::format("| {} | {} | {:.2f} / {:.2f} / {:.2f} | {:.1f} | {:.4f} | {:.3f} | {} | {} | {} | {} |\n", eval_label(x.recipe, x.gpu),
                      share_text(x.quantized, x.quantizes), x.eff_bits, x.eff_bits_budget, x.eff_bits_128k,
                      x.kv_bytes_budget / (1 << 20), x.loss, x.ppl, ci_text(x.dloss, x.dloss_ci, "{:+.4f}"), ci_text(x.kl, x.kl_ci, "{:.4f}"),
                      ci_text(x.top1, x.top1_ci, "{:.3f}"), vs_best_text(x, r));
  md += fmt::format(
      "\nIntervals: 95%, circular block bootstrap over the {} predicted positions (blocks of 32, 2000 replicates; paired for \"vs "
      "pick\", ≈: the interval holds 0, the two are not told apart on this passage). \"in low bits\": the share of the cached "
      "tokens each prediction attended to that were quantized, mean over keys and values{}.\n",
      r.tokens - 1, any_low ? fmt::format("; ⚠ under {:.0f}%: the row measures mostly the full-precision windows and is not ranked",
                                          100 * kMinQuantizedShare)
                            : std::string());
  if (!r.recall.empty()) {
    md += fmt::format(
        "\nRecall: loss (nats) on a {}-token passage repeated after D tokens of other text, the first copy placed after {} tokens of "
        "other text (past every sink); first occurrence in brackets; ⚠: the first copy was mostly in full precision when read "
        "again\n\n| recipe |",
        req.recall_span, r.recall_lead);
    for (int d : req.recall_distances) md += fmt::format(" D = {} |", d);
    md += "\n|---|";
    for (size_t i = 0; i < req.recall_distances.size(); ++i) md += "---|";
    md += "\n";
    for (const EvalRow& x : r.rows) {
      md += "| " + eval_label(x.recipe, x.gpu) + " |";
      for (const RecallRow& c : r.recall)
        if (c.recipe == x.recipe)
          md += fmt::format(" {}{:.3f} ({:.2f}) |", x.quantizes && c.quantized < kMinQuantizedShare ? "⚠ " : "", c.repeat_loss, c.first_loss);
      md += "\n";
    }
  }
  if (!r.greedy.empty()) {
    md += fmt::format(
        "\nGreedy continuation of \"{}\" after {} tokens of other text ({} tokens; shared prefix with fp32 in tokens; in low bits: "
        "the cache when generation starts):\n\n| recipe | in low bits | shared | text |\n|---|---|---|---|\n",
        cell_text(req.prompt), r.generate_context, req.generate);
    for (const GreedyRow& g : r.greedy) {
      const bool fp = g.recipe.rfind("full precision", 0) == 0 || g.recipe == "fp16";
      md += fmt::format("| {} | {} | {} | {} |\n", eval_label(g.recipe, g.gpu), share_text(g.quantized, !fp), g.shared_prefix,
                        cell_text(g.text));
    }
  }
  if (!r.warnings.empty()) {
    md += "\nWarnings:\n\n";
    for (const std::string& w : r.warnings) md += "- " + w + "\n";
  }
  return md;
}

std::string eval_csv(const EvalResult& r) {
  std::string s =
      "recipe,bits,quantized_share,eff_bits,eff_bits_budget,eff_bits_128k,loss,ppl,dloss,dloss_lo,dloss_hi,kl,kl_lo,kl_hi,top1,top1_lo,"
      "top1_hi,ranked,vs_pick_lo,vs_pick_hi,device,kv_bytes_budget\n";
  auto num = [](double v) { return std::isnan(v) ? std::string() : fmt::format("{:.6g}", v); };
  for (const EvalRow& x : r.rows)
    s += fmt::format("{},{},{},{:.4f},{:.4f},{:.4f},{:.6f},{:.6f},{:.6f},{},{},{:.6g},{},{},{:.6f},{},{},{},{},{},{},{:.0f}\n", x.recipe, x.bits,
                     x.quantizes ? fmt::format("{:.4f}", x.quantized) : std::string(), x.eff_bits, x.eff_bits_budget, x.eff_bits_128k,
                     x.loss, x.ppl, x.dloss, num(x.dloss_ci.lo), num(x.dloss_ci.hi), x.kl, num(x.kl_ci.lo), num(x.kl_ci.hi), x.top1,
                     num(x.top1_ci.lo), num(x.top1_ci.hi), x.ranked ? 1 : 0, num(x.vs_best.lo), num(x.vs_best.hi), x.gpu ? "gpu" : "cpu",
                     x.kv_bytes_budget);
  return s;
}

std::string recall_csv(const EvalResult& r) {
  std::string s = "recipe,distance,repeat_loss,first_loss,quantized_share,device\n";
  for (const RecallRow& x : r.recall)
    s += fmt::format("{},{},{:.6f},{:.6f},{:.4f},{}\n", x.recipe, x.distance, x.repeat_loss, x.first_loss, x.quantized, x.gpu ? "gpu" : "cpu");
  return s;
}

std::string eval_json(const EvalRequest& req, const EvalResult& r) {
  using nlohmann::json;
  auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json j = json_header("oscar-eval");
  j["model"] = r.model_name;
  j["passage"] = r.passage;
  j["predictions"] = r.tokens - 1;
  j["passage_ids"] = r.passage_ids;  // the token ids, for other engines to evaluate the same passage
  if (!r.ref_argmax_ids.empty()) j["fp32_argmax_ids"] = r.ref_argmax_ids;  // and their top-1 predictions to compare
  j["budget"] = {{"bits", req.budget.bits}, {"context", req.budget.context}};
  j["metric"] = req.metric;
  j["intervals"] = "95%, circular block bootstrap over predicted positions, blocks of 32, 2000 replicates";
  for (const EvalRow& x : r.rows)
    j["rows"].push_back({{"recipe", x.recipe},
                         {"bits", x.bits},
                         {"device", x.gpu ? "gpu" : "cpu"},
                         {"quantized_share", x.quantizes ? num(x.quantized) : json(nullptr)},
                         {"eff_bits", {{"passage", x.eff_bits}, {"budget_context", x.eff_bits_budget}, {"128k", x.eff_bits_128k}}},
                         {"loss", x.loss},
                         {"perplexity", x.ppl},
                         {"dloss", {{"mean", x.dloss}, {"lo", num(x.dloss_ci.lo)}, {"hi", num(x.dloss_ci.hi)}}},
                         {"kl", {{"mean", x.kl}, {"lo", num(x.kl_ci.lo)}, {"hi", num(x.kl_ci.hi)}}},
                         {"top1", {{"mean", x.top1}, {"lo", num(x.top1_ci.lo)}, {"hi", num(x.top1_ci.hi)}}},
                         {"ranked", x.ranked},
                         {"vs_pick", {{"lo", num(x.vs_best.lo)}, {"hi", num(x.vs_best.hi)}, {"tied", x.tied_with_best}}},
                         {"argmax_ids", x.argmax_ids}});
  for (const RecallRow& x : r.recall)
    j["recall"].push_back({{"recipe", x.recipe}, {"distance", x.distance}, {"repeat_loss", x.repeat_loss}, {"first_loss", x.first_loss},
                           {"quantized_share", x.quantized}});
  for (const GreedyRow& g : r.greedy)
    j["greedy"].push_back({{"recipe", g.recipe}, {"shared_prefix", g.shared_prefix}, {"generated", g.generated}, {"text", g.text},
                           {"quantized_share", g.quantized}, {"ids", g.ids}});
  if (!r.greedy_context_ids.empty()) j["greedy_context_ids"] = r.greedy_context_ids;
  const Verdict& v = r.verdict;
  j["verdict"] = verdict_json(v, req.budget, r.metric);
  j["warnings"] = r.warnings;
  return json_text(j);
}

void write_eval_outputs(const EvalRequest& req, const EvalResult& r, const std::string& out_dir) {
  check_output_folder(fs::path(out_dir));
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) fail("{}: cannot create the output folder ({}); choose another --out", out_dir, ec.message());
  OutputSet set;  // all of them or none
  const fs::path dir(out_dir);
  if (r.tasks) {
    set.add(dir / "tasks.md").write(tasks_markdown(*r.tasks, r.model_name));
    set.add(dir / "tasks.csv").write(tasks_csv(*r.tasks));
    set.add(dir / "answers.jsonl").write(tasks_outcomes_jsonl(*r.tasks));
    set.commit();
    return;
  }
  set.add(dir / "eval.csv").write(eval_csv(r));  // write errors name the file and the reason
  set.add(dir / "eval.md").write(eval_markdown(req, r));
  set.add(dir / "eval.json").write(eval_json(req, r));
  if (!r.recall.empty()) {
    AtomicOutput& rcsv = set.add(dir / "recall.csv");
    AtomicOutput& rpng = set.add(dir / "recall.png");
    rcsv.write(recall_csv(r));
    run_python(plots_script("recall.py"), {rcsv.temp_path().string(), rpng.temp_path().string(), r.model_name},
               rpng.final_path().string());
  }
  set.commit();
  if (r.recall.empty())  // an earlier run's recall outputs would read as this run's
    for (const char* stale : {"recall.csv", "recall.png"}) fs::remove(dir / stale, ec);
}

}  // namespace oscar
