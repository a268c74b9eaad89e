// verdict.h: the recipe to pick under a bit budget, the runner-up, the margin and whether it is significant, from
// one metric that each candidate gives per unit (a predicted position in oscar-eval, a (layer, KV head) row in
// oscar-sweep; paired across candidates). Candidates over the budget, or that keep most of what attention reads in
// full precision (quantized share under kMinQuantizedShare), are never picked.
#pragma once
#include <string>
#include <vector>

#include "oscar/01_core/stats.h"

namespace oscar {

// `--budget BITS[@CONTEXT]`: effective bits per element at a context length ("3", "3@32K", "2.5@131072").
struct Budget {
  double bits = 3.0;
  long context = 32768;
};
// Throws Error naming --budget for anything else (a non-positive or non-finite number, a bad context).
Budget parse_budget(const std::string& text);
std::string budget_text(const Budget& b);  // "3 bits per element at 32K tokens"
std::string context_text(long tokens);     // "32K" for multiples of 1024, else the number

struct VerdictMetric {
  std::string name;         // as --metric takes it: kl, dloss, output-error
  std::string label;        // as the tables name it
  bool higher_is_better = false;
  std::string unit;         // what one value is: "predicted positions", "(layer, KV head) rows"
  int block = 1;            // bootstrap block (dependent neighbouring units: positions)
};

struct VerdictCandidate {
  std::string label;
  double bits = 0;             // effective bits per element at the budget's context
  double quantized_share = 0;  // of what attention reads, in low bits
  std::vector<double> units;   // the metric per unit, the same units in the same order for every candidate
};

struct Verdict {
  bool found = false;
  std::string best, runner_up;  // runner_up empty when one candidate qualifies
  double best_value = 0, runner_value = 0;
  Interval best_ci{}, margin_ci{};  // margin = runner-up minus best (oriented so that > 0 means the best is better)
  bool significant = false;         // margin_ci excludes 0
  std::vector<std::string> over_budget, mostly_full_precision;
};

// The ranking rule of both tools: a row may be ranked when it quantizes, fits the budget at the budget's context, and
// holds at least kMinQuantizedShare of what attention reads in low bits (cache_policy.h).
bool rankable(bool quantizes, double bits_at_budget, double quantized_share, const Budget& budget);
// The pick among the rankable candidates by the metric's mean, the runner-up and the paired margin; the others listed
// as over the budget or mostly in full precision. Its paragraph: report/verdict_text.h.
Verdict pick_recipe(const std::vector<VerdictCandidate>& candidates, const Budget& budget, const VerdictMetric& metric);

}  // namespace oscar
