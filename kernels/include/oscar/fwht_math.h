// fwht_math.h: the fast Walsh-Hadamard transform as shared math (CPU twin of the GPU kernel).
// Contract: natural (Sylvester) ordering, H_n = [[H, H], [H, -H]]; butterflies run from stride 1 up,
// each computing (a + b, a - b) with a the lower index, then one multiply by 1/sqrt(n) if normalized.
// The GPU kernel performs the same operations in the same order, so results agree bit for bit.
#pragma once
#include <cmath>
#include "oscar/host_device.h"

namespace oscar {

OSCAR_HD bool is_power_of_two(long n) { return n > 0 && (n & (n - 1)) == 0; }

// The normalization factor 1/sqrt(n), computed identically on host and device.
OSCAR_HD float fwht_scale(int n) { return 1.0f / sqrtf(static_cast<float>(n)); }

// In-place transform of x[0..n), n a power of two. Unnormalized unless `normalize`.
OSCAR_HD void fwht_inplace(float* x, int n, bool normalize) {
  for (int s = 1; s < n; s <<= 1) {
    for (int i = 0; i < n; i += 2 * s) {
      for (int j = i; j < i + s; ++j) {
        const float a = x[j], b = x[j + s];
        x[j] = a + b;
        x[j + s] = a - b;
      }
    }
  }
  if (normalize) {
    const float c = fwht_scale(n);
    for (int i = 0; i < n; ++i) x[i] *= c;
  }
}

}  // namespace oscar
