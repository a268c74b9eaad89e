// verdict_text.cpp: the verdict's paragraph (verdict_text.h).
#include "oscar/13_report/verdict_text.h"

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "oscar/07_quantize/cache_policy.h"

namespace oscar {

std::string verdict_text(const Verdict& v, const Budget& budget, const VerdictMetric& m) {
  std::string s;
  const char* dir = m.higher_is_better ? "higher is better" : "lower is better";
  if (!v.found) {
    s = fmt::format("No recipe to pick under {}: none fits the budget with most of its cache in low bits.", budget_text(budget));
  } else {
    s = fmt::format("**Pick {}** under {}, by {} ({}): {:.4g} (95% interval {:.4g} to {:.4g}).", v.best, budget_text(budget), m.label, dir,
                    v.best_value, v.best_ci.lo, v.best_ci.hi);
    if (!v.runner_up.empty()) {
      const double margin = m.higher_is_better ? v.best_value - v.runner_value : v.runner_value - v.best_value;
      const double rel = v.best_value != 0 ? 100.0 * margin / std::fabs(v.best_value) : NAN;
      s += fmt::format(" Runner-up {}: {:.4g}, {} by {:.3g}{} (95% interval of the paired difference over {}: {:.3g} to {:.3g}): {}.",
                       v.runner_up, v.runner_value, m.higher_is_better ? "lower" : "higher", margin,
                       std::isfinite(rel) ? fmt::format(" ({:.2g}%)", rel) : std::string(), m.unit, v.margin_ci.lo, v.margin_ci.hi,
                       v.significant ? "significant" : "not significant, the two are tied on this data");
    } else {
      s += " No other recipe qualifies.";
    }
  }
  // "a, b, c" for a few names, "12 rows (a, b, c, ...)" for more
  const auto names = [](const std::vector<std::string>& n) {
    if (n.size() <= 6) return fmt::format("{}", fmt::join(n, ", "));
    return fmt::format("{} rows ({}, ...)", n.size(), fmt::join(n.begin(), n.begin() + 4, ", "));
  };
  if (!v.over_budget.empty()) s += fmt::format(" Over the budget: {}.", names(v.over_budget));
  if (!v.mostly_full_precision.empty())
    s += fmt::format(" Not ranked, under {:.0f}% of what attention reads in low bits at this length: {}.", 100 * kMinQuantizedShare,
                     names(v.mostly_full_precision));
  return s;
}

nlohmann::json verdict_json(const Verdict& v, const Budget& budget, const VerdictMetric& metric) {
  using nlohmann::json;
  const auto num = [](double x) { return std::isfinite(x) ? json(x) : json(nullptr); };
  const bool runner = !v.runner_up.empty();
  return {{"found", v.found},
          {"pick", v.found ? json(v.best) : json(nullptr)},
          {"value", v.found ? num(v.best_value) : json(nullptr)},
          {"runner_up", runner ? json(v.runner_up) : json(nullptr)},
          {"margin_lo", runner ? num(v.margin_ci.lo) : json(nullptr)},
          {"margin_hi", runner ? num(v.margin_ci.hi) : json(nullptr)},
          {"significant", v.significant},
          {"over_budget", v.over_budget},
          {"mostly_full_precision", v.mostly_full_precision},
          {"text", verdict_text(v, budget, metric)}};
}

}  // namespace oscar
