// stats.h: small order statistics used across the analysis (linear-interpolation quantiles, as
// numpy's default, and the median absolute deviation).
#pragma once
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

}  // namespace oscar
