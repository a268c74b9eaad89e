// stats.cpp: quantiles, median, mean, standard deviation and block-bootstrap intervals.
#include "oscar/01_core/stats.h"

#include <algorithm>
#include <cmath>
#include <random>

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

Interval bootstrap_mean_interval(const std::vector<double>& x, int block, int reps, uint64_t seed) {
  const size_t n = x.size();
  if (n == 0) return {NAN, NAN};
  for (double v : x)
    if (std::isnan(v)) fail("internal: a bootstrap over a NaN value; leave undefined positions out first");
  if (block < 1 || reps < 10) fail("internal: bootstrap with block {} and {} replicates", block, reps);
  const size_t b = std::min<size_t>(static_cast<size_t>(block), n);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> start(0, n - 1);
  std::vector<double> means(static_cast<size_t>(reps));
  for (double& m : means) {
    double sum = 0;
    size_t taken = 0;
    while (taken < n) {
      const size_t s0 = start(rng);
      for (size_t i = 0; i < b && taken < n; ++i, ++taken) sum += x[(s0 + i) % n];
    }
    m = sum / static_cast<double>(n);
  }
  const std::vector<double> q = quantiles(std::move(means), {0.025, 0.975});
  return {q[0], q[1]};
}

Interval bootstrap_paired_difference(const std::vector<double>& a, const std::vector<double>& b, int block, int reps, uint64_t seed) {
  if (a.size() != b.size()) fail("internal: a paired bootstrap of {} and {} values", a.size(), b.size());
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return bootstrap_mean_interval(d, block, reps, seed);
}

Interval wilson_interval(double successes, int n, double z) {
  if (n <= 0) return {std::nan(""), std::nan("")};
  const double p = successes / n, z2 = z * z, denom = 1 + z2 / n;
  const double centre = (p + z2 / (2.0 * n)) / denom;
  const double half = z * std::sqrt(p * (1 - p) / n + z2 / (4.0 * n * n)) / denom;
  // At 0 or n successes the bound is exactly 0 or 1 (rounding would leave it a hair inside).
  return {successes <= 0 ? 0.0 : std::max(0.0, centre - half), successes >= n ? 1.0 : std::min(1.0, centre + half)};
}

}  // namespace oscar
