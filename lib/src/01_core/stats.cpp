// stats.cpp: quantiles, median, mean and standard deviation.
#include "oscar/01_core/stats.h"

#include <algorithm>
#include <cmath>

#include "oscar/01_core/error.h"

namespace oscar {

static double sorted_quantile(const std::vector<double>& s, double q) {
  if (s.empty()) fail("quantile of an empty set");
  const double pos = q * static_cast<double>(s.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, s.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return s[lo] + (s[hi] - s[lo]) * frac;
}

std::vector<double> quantiles(std::vector<double> x, const std::vector<double>& qs) {
  std::sort(x.begin(), x.end());
  std::vector<double> out;
  for (double q : qs) out.push_back(sorted_quantile(x, q));
  return out;
}

double quantile(std::vector<double> x, double q) { return quantiles(std::move(x), {q})[0]; }
double median(std::vector<double> x) { return quantile(std::move(x), 0.5); }

double mean(const std::vector<double>& x) {
  if (x.empty()) fail("mean of an empty set");
  double s = 0;
  for (double v : x) s += v;
  return s / static_cast<double>(x.size());
}

double stddev(const std::vector<double>& x) {
  const double m = mean(x);
  double s = 0;
  for (double v : x) s += (v - m) * (v - m);
  return std::sqrt(s / static_cast<double>(x.size()));
}

}  // namespace oscar
