// verdict.cpp: the budget's parser, the pick and its paragraph (see verdict.h).
#include "oscar/11_report/verdict.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "oscar/01_core/error.h"
#include "oscar/06_quantize/cache_policy.h"

namespace oscar {

std::string context_text(long n) {
  if (n > 0 && n % 1024 == 0) return fmt::format("{}K", n / 1024);
  return std::to_string(n);
}

namespace {

// The mean of the finite values of x (NaN when none is).
double finite_mean(const std::vector<double>& x) {
  double s = 0;
  long n = 0;
  for (double v : x)
    if (std::isfinite(v)) s += v, ++n;
  return n > 0 ? s / static_cast<double>(n) : NAN;
}

}  // namespace

Budget parse_budget(const std::string& text) {
  Budget b;
  const size_t at = text.find('@');
  const std::string bits = text.substr(0, at), ctx = at == std::string::npos ? "" : text.substr(at + 1);
  auto bad = [&]() {
    fail("--budget '{}' is not BITS or BITS@CONTEXT; give effective bits per element and optionally the context length, e.g. "
         "--budget 3 or --budget 2.5@128K",
         text);
  };
  try {
    size_t used = 0;
    b.bits = std::stod(bits, &used);
    if (used != bits.size() || !std::isfinite(b.bits) || b.bits <= 0 || b.bits > 32) bad();
  } catch (const std::logic_error&) {
    bad();
  }
  if (at != std::string::npos) {
    std::string c = ctx;
    long mult = 1;
    if (!c.empty() && (c.back() == 'K' || c.back() == 'k')) mult = 1024, c.pop_back();
    if (c.empty() || !std::all_of(c.begin(), c.end(), [](unsigned char ch) { return std::isdigit(ch); }) || c.size() > 9) bad();
    b.context = std::stol(c) * mult;
    if (b.context < 1) bad();
  }
  return b;
}

std::string budget_text(const Budget& b) { return fmt::format("{:g} bits per element at {} tokens", b.bits, context_text(b.context)); }

Verdict pick_recipe(const std::vector<VerdictCandidate>& candidates, const Budget& budget, const VerdictMetric& metric) {
  Verdict v;
  std::vector<const VerdictCandidate*> ok;
  for (const VerdictCandidate& c : candidates) {
    if (!(c.bits <= budget.bits + 1e-9)) v.over_budget.push_back(c.label);
    else if (!(c.quantized_share >= kMinQuantizedShare)) v.mostly_full_precision.push_back(c.label);
    else if (std::isfinite(finite_mean(c.units))) ok.push_back(&c);
  }
  if (ok.empty()) return v;
  const double sign = metric.higher_is_better ? -1.0 : 1.0;  // rank by sign * mean, lowest first
  std::stable_sort(ok.begin(), ok.end(), [&](const VerdictCandidate* a, const VerdictCandidate* b) {
    return sign * finite_mean(a->units) < sign * finite_mean(b->units);
  });
  const VerdictCandidate& best = *ok[0];
  v.found = true;
  v.best = best.label;
  v.best_value = finite_mean(best.units);
  std::vector<double> finite;
  for (double x : best.units)
    if (std::isfinite(x)) finite.push_back(x);
  v.best_ci = bootstrap_mean_interval(finite, metric.block);
  if (ok.size() < 2) return v;
  const VerdictCandidate& run = *ok[1];
  v.runner_up = run.label;
  v.runner_value = finite_mean(run.units);
  if (run.units.size() != best.units.size())
    fail("internal: the verdict pairs {} units of {} with {} of {}", best.units.size(), best.label, run.units.size(), run.label);
  std::vector<double> a, b;  // units where both are defined; a - b > 0 when the best is better
  for (size_t i = 0; i < best.units.size(); ++i)
    if (std::isfinite(best.units[i]) && std::isfinite(run.units[i])) {
      a.push_back(sign * run.units[i]);
      b.push_back(sign * best.units[i]);
    }
  v.margin_ci = bootstrap_paired_difference(a, b, metric.block);
  v.significant = v.margin_ci.lo > 0;
  return v;
}

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

}  // namespace oscar
