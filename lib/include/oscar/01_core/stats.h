// stats.h: small order statistics used across the analysis (linear-interpolation quantiles, as
// numpy's default, and the median absolute deviation), and the bootstrap intervals of the tables.
#pragma once
#include <cstdint>
#include <vector>

namespace oscar {

// q in [0, 1]; linear interpolation between closest ranks (numpy.quantile's 'linear'). Copies.
double quantile(std::vector<double> x, double q);
// Several quantiles from one sort.
std::vector<double> quantiles(std::vector<double> x, const std::vector<double>& qs);
double median(std::vector<double> x);
double mean(const std::vector<double>& x);
// Population standard deviation.
double stddev(const std::vector<double>& x);

// A 95% interval of a mean (lo, hi); NaN bounds when undefined (no data).
struct Interval {
  double lo, hi;
  bool contains(double v) const { return v >= lo && v <= hi; }
};

// The percentile interval (2.5%, 97.5%) of the mean of x by the circular block bootstrap: each replicate joins
// ceil(n / block) blocks of `block` consecutive values starting at uniform positions (wrapping at the end), cut to n;
// `reps` replicates from a fixed seed, so that the same data give the same interval. Blocks keep the dependence of
// neighbouring positions (a token's loss and its neighbours'); block 1 is the ordinary bootstrap. NaN values are
// refused (Error): the caller leaves undefined positions out first.
Interval bootstrap_mean_interval(const std::vector<double>& x, int block = 32, int reps = 2000, uint64_t seed = 20261125);
// The same for the mean of a - b (paired: the same positions of two recipes).
Interval bootstrap_paired_difference(const std::vector<double>& a, const std::vector<double>& b, int block = 32, int reps = 2000,
                                     uint64_t seed = 20261125);

// Wilson's score interval (95% with z = 1.96) of a proportion of `successes` out of `n` trials; NaN bounds when
// n = 0. Fractional successes (partial credit summed) are taken as they are: an approximation.
Interval wilson_interval(double successes, int n, double z = 1.959963984540054);

}  // namespace oscar
