// rotation.h: orthogonal rotations of a head's channels. Convention: row vectors, x' = x R, with R a
// d x d orthogonal matrix; the inverse is x = x' R^T. Queries and keys are rotated alike (q.k is
// unchanged in full precision); values are rotated and the inverse applied to the attention output.
#pragma once
#include <Eigen/Core>
#include <memory>
#include <string>
#include <vector>

#include "oscar/02_model/formats/checkpoint.h"
#include "oscar/03_dump/layer_source.h"
#include "oscar/05_recipe/recipe.h"

namespace oscar {

class Rotation {
 public:
  virtual ~Rotation() = default;
  virtual int dim() const = 0;
  virtual std::string name() const = 0;
  // In place on `rows` row vectors of length dim() stored contiguously.
  virtual void apply(float* x, long rows) const = 0;
  virtual void apply_inverse(float* x, long rows) const = 0;
  // The explicit matrix R (double), for tests and for saving.
  virtual Eigen::MatrixXd matrix() const = 0;
};

// Identity, normalized Hadamard (FWHT, O(d log d); d must be a power of two), randomized Hadamard
// (diag(random signs) then Hadamard, seeded), random orthogonal (QR of a seeded Gaussian matrix, with
// the sign fix that makes it Haar-distributed). Throws Error naming the head_dim when d is not allowed.
std::unique_ptr<Rotation> make_identity(int d);
std::unique_ptr<Rotation> make_hadamard(int d);
std::unique_ptr<Rotation> make_randomized_hadamard(int d, uint64_t seed);
std::unique_ptr<Rotation> make_random_orthogonal(int d, uint64_t seed);
// A rotation given by an explicit orthogonal matrix (checked to 1e-6).
std::unique_ptr<Rotation> make_dense_rotation(const Eigen::MatrixXd& R, std::string name);

// Bit reversal of i within log2(d) bits.
int bit_reverse(int i, int d);
// Permutation matrix P with P(i, bitrev(i)) = 1: x P moves entry i to position bitrev(i).
Eigen::MatrixXd bit_reversal_permutation(int d);

// Eigendecomposition of a symmetric matrix C (SelfAdjointEigenSolver, double): `values` descending,
// `vectors` the matching unit eigenvectors as columns, each signed so its largest-|.| entry is positive.
void eigen_descending(const Eigen::MatrixXd& C, Eigen::VectorXd& values, Eigen::MatrixXd& vectors);

// OSCAR (arXiv 2605.17757): covariance-aware rotations fitted on a calibration passage, read layer by layer
// from a LayerSource (a calibration dump, or the model run over a passage in memory).
// Per layer (CovarianceScope::Layer, always fitted):
//   C_K = mean over KV heads h of Q_h^T Q_h / n (Q_h: post-RoPE queries of the query heads sharing h);
//   C_V = mean over h of V_h^T diag(w) V_h / n, w_t = k_t C_K k_t^T normalized to mean 1.
// Per KV head (CovarianceScope::KvHead, fitted when asked): the same terms of head h alone, C_K,h = Q_h^T Q_h / n
// and C_V,h = V_h^T diag(w_h) V_h / n with w_h from C_K,h. With one KV head both scopes give the same bits.
// U: eigenvectors (columns) by decreasing eigenvalue (SelfAdjointEigenSolver, double). The rotation is
// the product of the factors named by `order` ("UHP" = U * H * P, "U", "UP", "UPH", "HUP").
struct CovarianceFit {  // one fit: of a layer, or of one KV head of a layer
  Eigen::MatrixXd key_cov, value_cov;
  Eigen::VectorXd key_eigenvalues, value_eigenvalues;  // descending
  Eigen::MatrixXd key_eigenvectors, value_eigenvectors;
};
struct CovarianceRotations {
  std::string calibration_path, model_name, checkpoint_sha256;  // calibration_path: the source's origin().where
  int n_layers = 0, head_dim = 0;
  int n_kv_heads = 0;  // of the calibration model (0: not known, a file written before it was recorded)
  // What the calibration passage was, by content (token ids; text sha256 and line range when known), so that
  // an evaluation can refuse rotations fitted on its own data. Saved with the rotations.
  PassageOrigin calibration;
  std::vector<Eigen::MatrixXd> key_cov, value_cov;  // per layer
  std::vector<Eigen::VectorXd> key_eigenvalues, value_eigenvalues;  // descending
  std::vector<Eigen::MatrixXd> key_eigenvectors, value_eigenvectors;
  // Per KV head: heads[layer][kv head], n_layers x n_kv_heads fits; empty unless fitted per KV head.
  std::vector<std::vector<CovarianceFit>> heads;
  bool per_kv_head() const { return !heads.empty(); }
};
// Reads the calibration one layer at a time (q, k, v); a Progress bar over layers when `progress`. The per-layer
// fit always; `per_kv_head` adds the fit of every KV head (what a recipe with covariance_scope: kv-head needs).
CovarianceRotations fit_covariance_rotations(const LayerSource& calibration, bool progress, bool per_kv_head = false);
Eigen::MatrixXd covariance_rotation_matrix(const Eigen::MatrixXd& eigenvectors, const std::string& order);
// HDF5, atomic: per layer /layer_NNN/{key_cov, value_cov, key_eigenvalues, ...}; per KV head (attribute
// per_kv_head = 1) the same datasets in /layer_NNN/kv_head_HHH.
void save_covariance_rotations(const CovarianceRotations& c, const std::string& path);
// Validates format, version, attributes and shapes; throws Error naming `path` on any problem.
CovarianceRotations load_covariance_rotations(const std::string& path);

// The calibration leak and model checks, by content, never by file name. Both throw Error unless the
// calibration comes from the same checkpoint as the evaluated passage (checkpoint sha256; the model name
// only where a sha256 is missing) with the same attention shape, and is other data than the evaluated
// passage (same_data_reason in layer_source.h: identical, contained or shared token runs, overlapping
// lines of the same text). check_calibration_source runs before the fit (cheap: no layer is read);
// check_calibration_matches checks rotations already fitted (e.g. loaded from a file).
void check_calibration_source(const LayerSource& calibration, const DumpInfo& eval, const PassageOrigin& eval_origin);
// The same before any layer source exists: the calibration given by its shapes and origin.
void check_calibration_source(const DumpInfo& calibration, const PassageOrigin& calibration_origin, const DumpInfo& eval,
                              const PassageOrigin& eval_origin);
void check_calibration_matches(const CovarianceRotations& c, const DumpInfo& eval, const PassageOrigin& eval_origin);

// The rotation a recipe asks for: None -> identity, Hadamard, RandomizedHadamard(seed),
// RandomOrthogonal(seed), Covariance -> dense(covariance_rotation_matrix(*covariance_eigenvectors,
// spec.order)). covariance_eigenvectors is used (and required non-null) only for Covariance.
std::unique_ptr<Rotation> make_rotation(const RotationSpec& spec, int head_dim,
                                        const Eigen::MatrixXd* covariance_eigenvectors);

}  // namespace oscar
