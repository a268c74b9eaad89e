// lloyd_max.cpp: Lloyd-Max quantizers of the standard normal (1..4 bits) by the Lloyd iteration.
// Contract: 2^b ascending levels, exactly symmetric about 0, thresholds their midpoints; built once.
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "oscar/01_core/error.h"
#include "oscar/07_quantize/quantizer.h"

namespace oscar {
namespace {

constexpr int kMaxLloydBits = 4;
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kInf = std::numeric_limits<double>::infinity();

double normal_pdf(double x) { return std::isinf(x) ? 0.0 : kInvSqrt2Pi * std::exp(-0.5 * x * x); }
double normal_cdf(double x) { return 0.5 * std::erfc(-x * kInvSqrt2); }

// P(a < X < b), computed from the nearer tail so that cells far from 0 keep their precision.
double normal_mass(double a, double b) {
  if (a >= 0.0) return 0.5 * (std::erfc(a * kInvSqrt2) - std::erfc(b * kInvSqrt2));
  return 0.5 * (std::erfc(-b * kInvSqrt2) - std::erfc(-a * kInvSqrt2));
}

// Phi^{-1}(p) for p in (0, 1) by bisection (the codebook is built once; speed does not matter).
double normal_quantile(double p) {
  double lo = -40.0, hi = 40.0;
  for (int i = 0; i < 200 && hi - lo > 1e-15; ++i) {
    const double mid = 0.5 * (lo + hi);
    (normal_cdf(mid) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// levels[i] = E[X | thr[i-1] < X < thr[i]] with thr[-1] = -inf and thr[L-1] = +inf.
void centroids(const std::vector<double>& thr, std::vector<double>& levels) {
  const size_t L = levels.size();
  for (size_t i = 0; i < L; ++i) {
    const double a = i == 0 ? -kInf : thr[i - 1];
    const double b = i + 1 == L ? kInf : thr[i];
    levels[i] = (normal_pdf(a) - normal_pdf(b)) / normal_mass(a, b);
  }
}

LloydMaxCodebook build_codebook(int bits) {
  const int L = 1 << bits;
  std::vector<double> thr(L - 1), levels(L), next(L);
  for (int i = 1; i < L; ++i) thr[i - 1] = normal_quantile(static_cast<double>(i) / L);  // uniform quantiles
  centroids(thr, levels);
  for (int it = 0; it < 10000; ++it) {
    for (int i = 0; i + 1 < L; ++i) thr[i] = 0.5 * (levels[i] + levels[i + 1]);
    centroids(thr, next);
    double change = 0.0;
    for (int i = 0; i < L; ++i) change = std::fmax(change, std::fabs(next[i] - levels[i]));
    levels.swap(next);
    if (change < 1e-12) break;
  }
  // The iteration is symmetric up to rounding; make it exact so that codes of x and -x mirror.
  for (int i = 0; i < L / 2; ++i) {
    const double m = 0.5 * (levels[L - 1 - i] - levels[i]);
    levels[i] = -m;
    levels[L - 1 - i] = m;
  }
  for (int i = 0; i + 1 < L; ++i) thr[i] = 0.5 * (levels[i] + levels[i + 1]);
  thr[L / 2 - 1] = 0.0;
  return LloydMaxCodebook{levels, thr};
}

}  // namespace

const LloydMaxCodebook& lloyd_max_normal(int bits) {
  if (bits < 1 || bits > kMaxLloydBits)
    fail("Lloyd-Max codebook for {} bits is not available; the LloydMax codebook supports 1..{} bits "
         "(use a uniform codebook for more)",
         bits, kMaxLloydBits);
  static const std::array<LloydMaxCodebook, kMaxLloydBits> table = [] {
    std::array<LloydMaxCodebook, kMaxLloydBits> t;
    for (int b = 1; b <= kMaxLloydBits; ++b) t[b - 1] = build_codebook(b);
    return t;
  }();
  return table[bits - 1];
}

}  // namespace oscar
