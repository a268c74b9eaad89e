// task_tables.cpp: the long-context task tables (task_tables.h).
#include "oscar/13_report/task_tables.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "oscar/08_metrics/verdict.h"
#include "oscar/13_report/table_text.h"

namespace oscar {

namespace {

std::string percent(double x) { return std::isnan(x) ? "-" : fmt::format("{:.0f}", 100 * x); }

std::string cell_text(const TaskCell& c) {
  if (c.n == 0) return "-";
  return fmt::format("{}{}% [{}, {}] ({:g}/{})", c.reference_weak ? "⚠ " : "", percent(c.accuracy()), percent(c.ci.lo),
                     percent(c.ci.hi), c.score, c.n);
}

std::string plural(size_t n, const char* word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

bool overlap(const TaskCell& a, const TaskCell& b) { return a.ci.lo <= b.ci.hi && b.ci.lo <= a.ci.hi; }

// One sentence per length where some recipe's interval overlaps the highest-scoring recipe's: these samples cannot
// rank those recipes.
std::string overlap_note(const TaskResults& r, const std::string& task) {
  std::string out;
  for (int len : r.lengths) {
    const TaskCell* best = nullptr;
    for (const std::string& recipe : r.recipes) {
      const TaskCell& c = r.cell(recipe, task, len);
      if (c.n > 0 && (!best || c.accuracy() > best->accuracy())) best = &c;
    }
    std::vector<std::string> tied;
    for (const std::string& recipe : r.recipes) {
      const TaskCell& c = r.cell(recipe, task, len);
      if (best && &c != best && c.n > 0 && overlap(c, *best)) tied.push_back(recipe);
    }
    if (!tied.empty())
      out += fmt::format("At {} the 95% intervals of {} overlap that of {}, the highest there: these samples cannot rank "
                         "them (more samples narrow the intervals).\n",
                         context_text(len), fmt::join(tied, ", "), best->recipe);
  }
  return out.empty() ? out : out + "\n";
}

}  // namespace

std::string tasks_markdown(const TaskResults& r, const std::string& model_name) {
  std::map<std::string, int> per_cell;
  for (const TaskOutcome& o : r.outcomes)
    if (o.recipe == r.recipes.front()) ++per_cell[o.task + "/" + std::to_string(o.length)];
  const int n_min = per_cell.empty() ? 0 : std::min_element(per_cell.begin(), per_cell.end(), [](auto& a, auto& b) { return a.second < b.second; })->second;
  std::string md = fmt::format(
      "**{}**, long-context tasks of {} ({}; the context prefilled and stored in the recipe's cache, the question read "
      "and the answer generated greedily from that cache): accuracy (RULER's string_match_all) with Wilson's 95% interval and "
      "(score/samples); "
      "⚠: {} itself scores under {:.0f}% there, so the cell cannot separate recipes; in low bits: the share of the prompt's "
      "cache (global layers) in low bits when the answer starts, at each length.\n\n",
      model_name, r.file, plural(r.outcomes.size() / std::max<size_t>(1, r.recipes.size()), "sample"), r.recipes.front(),
      100 * kTaskReferenceFloor);
  auto table = [&](const std::string& task, const std::string& title) {
    md += fmt::format("{}\n\n| recipe | in low bits |", title);
    for (int len : r.lengths) md += fmt::format(" {} |", context_text(len));
    md += "\n|---|---|";
    for (size_t i = 0; i < r.lengths.size(); ++i) md += "---|";
    md += "\n";
    for (const std::string& recipe : r.recipes) {
      std::string low;
      for (int len : r.lengths) {
        const TaskCell& c = r.cell(recipe, task, len);
        low += (low.empty() ? "" : " / ") + (recipe == r.recipes.front() || c.quantized == 0 ? std::string("-") : percent(c.quantized) + "%");
      }
      md += fmt::format("| {} | {} |", recipe, low);
      for (int len : r.lengths) md += fmt::format(" {} |", cell_text(r.cell(recipe, task, len)));
      md += "\n";
    }
    md += "\n";
    md += overlap_note(r, task);
  };
  if (r.tasks.size() > 1)  // one task: its own table says it all
    table("all", fmt::format("All tasks pooled ({}, at least {} per task and length):", plural(r.tasks.size(), "task"),
                             plural(static_cast<size_t>(n_min), "sample")));
  for (const std::string& t : r.tasks) table(t, fmt::format("`{}`:", t));
  return md;
}

std::string tasks_csv(const TaskResults& r) {
  std::string s = "recipe,task,length,n,score,accuracy,ci_lo,ci_hi,quantized_share,reference_below_80\n";
  auto num = [](double v) { return std::isnan(v) ? std::string() : fmt::format("{:.4f}", v); };
  for (const TaskCell& c : r.cells)
    s += fmt::format("{},{},{},{},{:g},{},{},{},{},{}\n", c.recipe, c.task, c.length, c.n, c.score, num(c.accuracy()), num(c.ci.lo),
                     num(c.ci.hi), num(c.quantized), c.reference_weak ? 1 : 0);
  return s;
}

std::string tasks_outcomes_jsonl(const TaskResults& r) {
  std::string s;
  for (const TaskOutcome& o : r.outcomes)
    s += json_text({{"recipe", o.recipe}, {"task", o.task}, {"length", o.length}, {"prompt_tokens", o.prompt_tokens}, {"depth", o.depth},
                    {"index", o.index}, {"score", o.score}, {"quantized_share", o.quantized}, {"answer", o.answer}},
                   -1);
  return s;
}

}  // namespace oscar
