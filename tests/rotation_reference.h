// rotation_reference.h: the rotation tests' references, computed from the definitions with plain loops in float64:
// how far a matrix is from orthogonal, and the covariance rotation's statistics of one KV head (lib's fit is checked
// against them). C_K of KV head h: the mean of q q^T over every token of the query heads of h's group; C_V of h, for a
// key covariance C: the mean of v v^T over h's tokens, token t weighted by w_t = k_t^T C k_t over the mean weight.
#pragma once
#include <Eigen/Dense>

#include <vector>

#include "oscar/03_dump/dump.h"

namespace oscar::test {

// max |R^T R - I|
inline double orthogonality_error(const Eigen::MatrixXd& R) {
  return (R.transpose() * R - Eigen::MatrixXd::Identity(R.cols(), R.cols())).cwiseAbs().maxCoeff();
}

// C_K of KV head h of the layer, whose KV heads each serve `group` query heads.
inline Eigen::MatrixXd key_cov_of_head(const LayerDump& L, int h, int group) {
  const int T = L.q.tokens, d = L.q.head_dim;
  Eigen::MatrixXd C = Eigen::MatrixXd::Zero(d, d);
  for (int g = 0; g < group; ++g) {
    const float* q = L.q.head(h * group + g);
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < d; ++i)
        for (int j = 0; j < d; ++j) C(i, j) += double(q[t * d + i]) * q[t * d + j] / (group * T);
  }
  return C;
}

// C_V of KV head h of the layer, its tokens weighted by their keys under the key covariance CK.
inline Eigen::MatrixXd value_cov_of_head(const LayerDump& L, int h, const Eigen::MatrixXd& CK) {
  const int T = L.k.tokens, d = L.k.head_dim;
  const float* k = L.k.head(h);
  const float* v = L.v.head(h);
  std::vector<double> w(T, 0.0);
  double mean = 0;
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j) w[t] += double(k[t * d + i]) * CK(i, j) * k[t * d + j];
    mean += w[t] / T;
  }
  Eigen::MatrixXd C = Eigen::MatrixXd::Zero(d, d);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j) C(i, j) += w[t] / mean * v[t * d + i] * v[t * d + j] / T;
  return C;
}

}  // namespace oscar::test
