// tni.cpp: per-head token-norm and channel-magnitude statistics.
#include "oscar/04_stats/tni.h"

#include <algorithm>
#include <cmath>

#include "oscar/01_core/error.h"
#include "oscar/01_core/stats.h"

namespace oscar {

HeadStats head_stats(const float* x, int tokens, int head_dim, double outlier_z) {
  if (tokens <= 0 || head_dim <= 0) fail("head statistics need at least one token and one channel");
  HeadStats s;
  s.token_norms.resize(tokens);
  s.channels.absmax.assign(head_dim, 0.0);
  for (int t = 0; t < tokens; ++t) {
    double ss = 0;
    for (int c = 0; c < head_dim; ++c) {
      const double v = x[static_cast<size_t>(t) * head_dim + c];
      ss += v * v;
      s.channels.absmax[c] = std::max(s.channels.absmax[c], std::abs(v));
    }
    s.token_norms[t] = std::sqrt(ss);
  }
  NormDistribution& d = s.norms;
  const auto q = quantiles(s.token_norms, {0.0, 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99, 1.0});
  d.min = q[0], d.p01 = q[1], d.p05 = q[2], d.p25 = q[3], d.median = q[4], d.p75 = q[5], d.p95 = q[6], d.p99 = q[7], d.max = q[8];
  d.mean = mean(s.token_norms);
  // Ratios over a zero denominator are undefined (NaN) when the numerator is zero too (0/0), infinite
  // otherwise (a zero-norm token among non-zero ones has an unbounded dynamic range).
  const auto ratio = [](double num, double den) { return den > 0 ? num / den : (num > 0 ? INFINITY : NAN); };
  d.cv = d.mean > 0 ? stddev(s.token_norms) / d.mean : NAN;
  d.max_over_median = ratio(d.max, d.median);
  d.min_over_median = d.median > 0 ? d.min / d.median : NAN;
  d.tni = ratio(d.max, d.min);

  ChannelSpread& c = s.channels;
  c.median_absmax = median(c.absmax);
  const auto it = std::max_element(c.absmax.begin(), c.absmax.end());
  c.max_absmax = *it;
  c.argmax_channel = static_cast<int>(it - c.absmax.begin());
  c.spread = ratio(c.max_absmax, c.median_absmax);
  if (d.max == 0.0) return s;  // an all-zero head: no token stands out

  // Robust z-scores of log-norms; a zero-norm token among non-zero ones is always an outlier.
  std::vector<double> logn;
  for (double n : s.token_norms) logn.push_back(std::log(std::max(n, 1e-30)));
  const double med = median(logn);
  std::vector<double> dev;
  for (double l : logn) dev.push_back(std::abs(l - med));
  const double sigma = 1.4826 * median(dev);
  for (int t = 0; t < tokens; ++t) {
    const double z = sigma > 0 ? (logn[t] - med) / sigma : (std::abs(logn[t] - med) > 1e-12 ? INFINITY : 0.0);
    if (std::abs(z) > outlier_z || s.token_norms[t] == 0.0)
      s.outliers.push_back({t, s.token_norms[t], d.median > 0 ? s.token_norms[t] / d.median : NAN, z});
  }
  std::stable_sort(s.outliers.begin(), s.outliers.end(),
                   [](const OutlierToken& a, const OutlierToken& b) { return std::abs(a.robust_z) > std::abs(b.robust_z); });
  return s;
}

}  // namespace oscar
