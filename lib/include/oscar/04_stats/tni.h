// tni.h: Token Norm Imbalance statistics of one head's keys or values ([T, head_dim] row-major).
// TNI (the summary number) = max_t ||x_t|| / min_t ||x_t||: the dynamic range of per-token L2 norms
// that a quantization group spanning all tokens of a channel must cover. Outlier tokens are those whose
// log-norm lies more than `outlier_z` robust standard deviations (1.4826 * MAD) from the median log-norm.
// Undefined statistics are NaN: TNI, max/median, min/median, CV and channel spread of an all-zero head
// (0/0), which has no outliers; a ratio x/0 with x > 0 is infinite.
#pragma once
#include <string>
#include <vector>

namespace oscar {

struct NormDistribution {
  double min = 0, p01 = 0, p05 = 0, p25 = 0, median = 0, p75 = 0, p95 = 0, p99 = 0, max = 0;
  double mean = 0, cv = 0;  // coefficient of variation: std / mean
  double max_over_median = 0, min_over_median = 0;
  double tni = 0;  // max / min
};

struct OutlierToken {
  int position = 0;
  double norm = 0, ratio = 0, robust_z = 0;  // ratio = norm / median
};

struct ChannelSpread {
  std::vector<double> absmax;     // per channel, over tokens
  double median_absmax = 0, max_absmax = 0, spread = 0;  // spread = max / median
  int argmax_channel = 0;
};

struct HeadStats {
  std::vector<double> token_norms;
  NormDistribution norms;
  std::vector<OutlierToken> outliers;  // all outliers, by decreasing |robust_z|
  ChannelSpread channels;
};

HeadStats head_stats(const float* x, int tokens, int head_dim, double outlier_z = 3.5);

}  // namespace oscar
