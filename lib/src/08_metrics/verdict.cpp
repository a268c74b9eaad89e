// verdict.cpp: the budget's parser, the ranking rule and the pick (see verdict.h).
#include "oscar/08_metrics/verdict.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "oscar/01_core/error.h"
#include "oscar/07_quantize/cache_policy.h"

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

bool rankable(bool quantizes, double bits_at_budget, double quantized_share, const Budget& budget) {
  return quantizes && bits_at_budget <= budget.bits + 1e-9 && quantized_share >= kMinQuantizedShare;
}

Verdict pick_recipe(const std::vector<VerdictCandidate>& candidates, const Budget& budget, const VerdictMetric& metric) {
  Verdict v;
  std::vector<const VerdictCandidate*> ok;
  for (const VerdictCandidate& c : candidates) {
    if (rankable(true, c.bits, c.quantized_share, budget)) {
      if (std::isfinite(finite_mean(c.units))) ok.push_back(&c);
    } else if (!(c.bits <= budget.bits + 1e-9)) {
      v.over_budget.push_back(c.label);
    } else {
      v.mostly_full_precision.push_back(c.label);
    }
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

}  // namespace oscar
