// rotation.cpp: the fixed and seeded rotations (identity, Hadamard via FWHT, randomized Hadamard,
// random orthogonal, explicit dense), bit reversal, and make_rotation. Row vectors: x' = x R.
#include "oscar/06_rotate/rotation.h"

#include <Eigen/QR>
#include <bit>
#include <cmath>
#include <random>

#include "oscar/01_core/error.h"
#include "oscar/fwht_math.h"

namespace oscar {

namespace {

using MatrixRMf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void check_dim(int d) {
  if (d <= 0) fail("head_dim {} must be positive", d);
}

void check_hadamard_dim(int d) {
  check_dim(d);
  if (!is_power_of_two(d))
    fail("head_dim {} is not a power of two: the Hadamard rotation needs one; choose rotation none, random or "
         "covariance",
         d);
}

// Normalized Sylvester Hadamard matrix: H(i, j) = (-1)^popcount(i & j) / sqrt(d).
Eigen::MatrixXd hadamard_matrix(int d) {
  const double s = 1.0 / std::sqrt(static_cast<double>(d));
  Eigen::MatrixXd H(d, d);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) H(i, j) = (std::popcount(static_cast<unsigned>(i & j)) & 1) ? -s : s;
  return H;
}

class Identity final : public Rotation {
 public:
  explicit Identity(int d) : d_(d) {}
  int dim() const override { return d_; }
  std::string name() const override { return "identity"; }
  void apply(float*, long) const override {}
  void apply_inverse(float*, long) const override {}
  Eigen::MatrixXd matrix() const override { return Eigen::MatrixXd::Identity(d_, d_); }

 private:
  int d_;
};

// x H for each row: H is symmetric, so x H = (H x^T)^T, which the FWHT computes; H^-1 = H.
class Hadamard final : public Rotation {
 public:
  explicit Hadamard(int d) : d_(d) {}
  int dim() const override { return d_; }
  std::string name() const override { return "hadamard"; }
  void apply(float* x, long rows) const override {
    for (long r = 0; r < rows; ++r) fwht_inplace(x + r * d_, d_, true);
  }
  void apply_inverse(float* x, long rows) const override { apply(x, rows); }
  Eigen::MatrixXd matrix() const override { return hadamard_matrix(d_); }

 private:
  int d_;
};

// R = D H: x R = (x o signs) H; x = x' R^T = (x' H) o signs.
class RandomizedHadamard final : public Rotation {
 public:
  RandomizedHadamard(int d, uint64_t seed) : d_(d), seed_(seed), signs_(d) {
    std::mt19937_64 rng(seed);
    for (float& s : signs_) s = (rng() >> 63) ? -1.0f : 1.0f;
  }
  int dim() const override { return d_; }
  std::string name() const override { return fmt::format("randomized_hadamard(seed={})", seed_); }
  void apply(float* x, long rows) const override {
    for (long r = 0; r < rows; ++r) {
      float* row = x + r * d_;
      for (int c = 0; c < d_; ++c) row[c] *= signs_[c];
      fwht_inplace(row, d_, true);
    }
  }
  void apply_inverse(float* x, long rows) const override {
    for (long r = 0; r < rows; ++r) {
      float* row = x + r * d_;
      fwht_inplace(row, d_, true);
      for (int c = 0; c < d_; ++c) row[c] *= signs_[c];
    }
  }
  Eigen::MatrixXd matrix() const override {
    Eigen::VectorXd s(d_);
    for (int c = 0; c < d_; ++c) s(c) = signs_[c];
    return s.asDiagonal() * hadamard_matrix(d_);
  }

 private:
  int d_;
  uint64_t seed_;
  std::vector<float> signs_;
};

// An explicit orthogonal matrix, kept in double (matrix()) and float (apply).
class Dense final : public Rotation {
 public:
  Dense(const Eigen::MatrixXd& R, std::string name) : R_(R), Rf_(R.cast<float>()), name_(std::move(name)) {}
  int dim() const override { return static_cast<int>(R_.rows()); }
  std::string name() const override { return name_; }
  void apply(float* x, long rows) const override {
    Eigen::Map<MatrixRMf> X(x, rows, dim());
    const MatrixRMf Y = X * Rf_;
    X = Y;
  }
  void apply_inverse(float* x, long rows) const override {
    Eigen::Map<MatrixRMf> X(x, rows, dim());
    const MatrixRMf Y = X * Rf_.transpose();
    X = Y;
  }
  Eigen::MatrixXd matrix() const override { return R_; }

 private:
  Eigen::MatrixXd R_;
  Eigen::MatrixXf Rf_;
  std::string name_;
};

}  // namespace

std::unique_ptr<Rotation> make_identity(int d) {
  check_dim(d);
  return std::make_unique<Identity>(d);
}

std::unique_ptr<Rotation> make_hadamard(int d) {
  check_hadamard_dim(d);
  return std::make_unique<Hadamard>(d);
}

std::unique_ptr<Rotation> make_randomized_hadamard(int d, uint64_t seed) {
  check_hadamard_dim(d);
  return std::make_unique<RandomizedHadamard>(d, seed);
}

std::unique_ptr<Rotation> make_random_orthogonal(int d, uint64_t seed) {
  check_dim(d);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Eigen::MatrixXd G(d, d);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) G(i, j) = normal(rng);
  const Eigen::HouseholderQR<Eigen::MatrixXd> qr(G);
  Eigen::MatrixXd Q = qr.householderQ() * Eigen::MatrixXd::Identity(d, d);
  // Q * diag(sign(diag(R))) makes the distribution Haar (unique QR with a positive diagonal).
  for (int j = 0; j < d; ++j)
    if (qr.matrixQR()(j, j) < 0) Q.col(j) = -Q.col(j);
  return make_dense_rotation(Q, fmt::format("random_orthogonal(seed={})", seed));
}

std::unique_ptr<Rotation> make_dense_rotation(const Eigen::MatrixXd& R, std::string name) {
  if (R.rows() != R.cols() || R.rows() == 0)
    fail("rotation '{}': matrix is {}x{}, expected a non-empty square head_dim x head_dim matrix", name, R.rows(),
         R.cols());
  if (!R.allFinite()) fail("rotation '{}': matrix holds non-finite values", name);
  const double err = (R.transpose() * R - Eigen::MatrixXd::Identity(R.rows(), R.cols())).cwiseAbs().maxCoeff();
  if (!(err < 1e-6))
    fail("rotation '{}': matrix is not orthogonal (max |R^T R - I| = {:.3g}, allowed 1e-6); pass an orthonormal "
         "basis",
         name, err);
  return std::make_unique<Dense>(R, std::move(name));
}

int bit_reverse(int i, int d) {
  if (d <= 0 || !is_power_of_two(d)) fail("bit reversal needs a power-of-two size, got {}", d);
  if (i < 0 || i >= d) fail("bit reversal: index {} out of range [0, {})", i, d);
  const int bits = std::countr_zero(static_cast<unsigned>(d));
  int r = 0;
  for (int b = 0; b < bits; ++b)
    if (i & (1 << b)) r |= 1 << (bits - 1 - b);
  return r;
}

Eigen::MatrixXd bit_reversal_permutation(int d) {
  if (d <= 0 || !is_power_of_two(d))
    fail("head_dim {} is not a power of two: the bit-reversal permutation needs one; choose covariance order U", d);
  Eigen::MatrixXd P = Eigen::MatrixXd::Zero(d, d);
  for (int i = 0; i < d; ++i) P(i, bit_reverse(i, d)) = 1.0;
  return P;
}

std::unique_ptr<Rotation> make_rotation(const RotationSpec& spec, int head_dim,
                                        const Eigen::MatrixXd* covariance_eigenvectors) {
  switch (spec.kind) {
    case RotationKind::None: return make_identity(head_dim);
    case RotationKind::Hadamard: return make_hadamard(head_dim);
    case RotationKind::RandomizedHadamard: return make_randomized_hadamard(head_dim, spec.seed);
    case RotationKind::RandomOrthogonal: return make_random_orthogonal(head_dim, spec.seed);
    case RotationKind::Covariance: {
      if (!covariance_eigenvectors)
        fail("the recipe needs a calibration file (covariance rotations); pass calibration: in the sweep config");
      if (covariance_eigenvectors->rows() != head_dim)
        fail("covariance eigenvectors are {}x{} but head_dim is {}; calibrate on a dump of the same model",
             covariance_eigenvectors->rows(), covariance_eigenvectors->cols(), head_dim);
      return make_dense_rotation(covariance_rotation_matrix(*covariance_eigenvectors, spec.order),
                                 "covariance(" + spec.order + ")");
    }
  }
  fail("internal: unknown rotation kind {}", static_cast<int>(spec.kind));
}

}  // namespace oscar
