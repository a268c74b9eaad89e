// rotate_math.h: THE rule by which the kernels rotate bf16 rows in-kernel (oscar_rotation in oscar_kv.h), shared
// with the CPU twins. A row x (bf16, widened to float) becomes x' = bf16(y):
//   Hadamard: y = fwht_inplace(x, normalized) (oscar/fwht_math.h; the same as oscar_fwht_bf16);
//   matrix R (head_dim x head_dim, row-major, x' = x R): y_j = fma chain over i = 0 .. head_dim - 1 ascending of
//   x_i R[i][j], starting from 0 (one rounding per term, as std::fma / fmaf).
// Decode outputs o' are un-rotated in float32 without a final rounding: Hadamard o = fwht_inplace(o', normalized)
// (H is symmetric and orthogonal); matrix o_j = fma chain over i ascending of o'_i R_V[j][i] (o = o' R_V^T).
#pragma once
#include <cmath>
#include <cstdint>

#include "oscar/float_formats.h"
#include "oscar/fwht_math.h"
#include "oscar/host_device.h"

namespace oscar {

enum class RotationRule : int32_t { None = 0, Hadamard = 1, Matrix = 2 };

// y = x R (float32 fma chain, i ascending) for one row of n; y may not alias x.
inline void rotate_row_matrix(const float* x, const float* R, int n, float* y) {
  for (int j = 0; j < n; ++j) {
    float acc = 0.0f;
    for (int i = 0; i < n; ++i) acc = std::fma(x[i], R[static_cast<int64_t>(i) * n + j], acc);
    y[j] = acc;
  }
}
// o = o' R^T (float32 fma chain, i ascending): o_j = sum_i o'_i R[j][i].
inline void unrotate_row_matrix(const float* x, const float* R, int n, float* y) {
  for (int j = 0; j < n; ++j) {
    float acc = 0.0f;
    for (int i = 0; i < n; ++i) acc = std::fma(x[i], R[static_cast<int64_t>(j) * n + i], acc);
    y[j] = acc;
  }
}

}  // namespace oscar
