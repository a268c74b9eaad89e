// test_rotation.cpp: rotations (FWHT Hadamard vs the Sylvester matrix, orthogonality, inverses, seeds,
// bit reversal by hand), the descending eigenbasis, and covariance rotations fitted on a real dump.
#include <catch2/catch.hpp>

#include <H5Cpp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "dump_fixture.h"
#include "oscar/03_dump/dump.h"
#include "oscar/03_dump/layer_source.h"
#include "oscar/01_core/error.h"
#include "oscar/06_rotate/rotation.h"
#include "rotation_reference.h"

using namespace oscar;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

using MatrixRMf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The normalized Sylvester Hadamard matrix written from its closed form.
Eigen::MatrixXd sylvester(int d) {
  Eigen::MatrixXd H(d, d);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) H(i, j) = ((std::popcount(static_cast<unsigned>(i & j)) % 2) ? -1.0 : 1.0) / std::sqrt(d);
  return H;
}

MatrixRMf random_rows(long rows, int d, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  MatrixRMf x(rows, d);
  for (long i = 0; i < x.size(); ++i) x.data()[i] = n(rng);
  return x;
}

// Orthogonality, apply == x R, apply_inverse undoes apply, and q.k is preserved.
void check_rotation(const Rotation& r, int d) {
  INFO("rotation " << r.name() << ", d = " << d);
  REQUIRE(r.dim() == d);
  const Eigen::MatrixXd R = r.matrix();
  REQUIRE(R.rows() == d);
  REQUIRE(R.cols() == d);
  CHECK(test::orthogonality_error(R) < 1e-6);

  const MatrixRMf x = random_rows(6, d, 11);
  MatrixRMf y = x;
  r.apply(y.data(), y.rows());
  const MatrixRMf expect = (x.cast<double>() * R).cast<float>();
  CHECK((y - expect).cwiseAbs().maxCoeff() < 1e-5);
  r.apply_inverse(y.data(), y.rows());
  CHECK((y - x).cwiseAbs().maxCoeff() < 1e-5);

  MatrixRMf q = random_rows(1, d, 21), k = random_rows(1, d, 22);
  const double dot = q.row(0).cast<double>().dot(k.row(0).cast<double>());
  const double scale = q.norm() * static_cast<double>(k.norm());
  r.apply(q.data(), 1);
  r.apply(k.data(), 1);
  const double rotated = q.row(0).cast<double>().dot(k.row(0).cast<double>());
  CHECK(std::abs(rotated - dot) <= 1e-4 * scale);
}

std::vector<char> read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& p, const char* data, size_t n) {
  std::ofstream f(p, std::ios::binary);
  f.write(data, static_cast<std::streamsize>(n));
}

}  // namespace

TEST_CASE("FWHT Hadamard equals the explicit Sylvester matrix", "[rotation]") {
  for (int d : {2, 4, 8, 128}) {
    INFO("d = " << d);
    const auto h = make_hadamard(d);
    const Eigen::MatrixXd S = sylvester(d);
    CHECK((h->matrix() - S).cwiseAbs().maxCoeff() < 1e-15);
    const MatrixRMf x = random_rows(4, d, static_cast<unsigned>(d));
    MatrixRMf y = x;
    h->apply(y.data(), y.rows());
    CHECK((y.cast<double>() - x.cast<double>() * S).cwiseAbs().maxCoeff() < 1e-5);
  }
  // d = 2 by hand: (1, 2) H = (3, -1) / sqrt(2).
  float x[2] = {1.0f, 2.0f};
  make_hadamard(2)->apply(x, 1);
  CHECK(x[0] == Approx(3.0 / std::sqrt(2.0)));
  CHECK(x[1] == Approx(-1.0 / std::sqrt(2.0)));
}

TEST_CASE("every rotation is orthogonal, invertible and preserves q.k", "[rotation]") {
  for (int d : {8, 128}) {
    check_rotation(*make_identity(d), d);
    check_rotation(*make_hadamard(d), d);
    check_rotation(*make_randomized_hadamard(d, 1), d);
    check_rotation(*make_randomized_hadamard(d, 2), d);
    check_rotation(*make_random_orthogonal(d, 1), d);
    check_rotation(*make_dense_rotation(make_random_orthogonal(d, 5)->matrix(), "dense"), d);
    const Eigen::MatrixXd U = make_random_orthogonal(d, 7)->matrix();
    for (const char* order : {"U", "UP", "UPH", "UHP", "HUP"}) {
      INFO("order " << order);
      const Eigen::MatrixXd R = covariance_rotation_matrix(U, order);
      CHECK(test::orthogonality_error(R) < 1e-6);
      check_rotation(*make_dense_rotation(R, order), d);
    }
  }
  // Random orthogonal of a non-power-of-two size is allowed.
  check_rotation(*make_random_orthogonal(96, 3), 96);
  CHECK(make_identity(8)->matrix() == Eigen::MatrixXd::Identity(8, 8));
}

TEST_CASE("randomized Hadamard is D H with seeded signs", "[rotation]") {
  const Eigen::MatrixXd R = make_randomized_hadamard(16, 1)->matrix();
  const Eigen::MatrixXd H = sylvester(16);
  // Row i of D H is +-row i of H.
  for (int i = 0; i < 16; ++i) {
    const double s = R(i, 0) / H(i, 0);
    CHECK(std::abs(s) == Approx(1.0));
    CHECK((R.row(i) - s * H.row(i)).cwiseAbs().maxCoeff() < 1e-15);
  }
}

TEST_CASE("seeds: same seed same matrix, different seeds differ", "[rotation]") {
  CHECK(make_randomized_hadamard(64, 1)->matrix() == make_randomized_hadamard(64, 1)->matrix());
  CHECK(make_randomized_hadamard(64, 1)->matrix() != make_randomized_hadamard(64, 2)->matrix());
  CHECK(make_random_orthogonal(64, 1)->matrix() == make_random_orthogonal(64, 1)->matrix());
  CHECK((make_random_orthogonal(64, 1)->matrix() - make_random_orthogonal(64, 2)->matrix()).cwiseAbs().maxCoeff() > 0.1);
}

TEST_CASE("sizes the Hadamard cannot take, and non-orthogonal matrices, fail clearly", "[rotation]") {
  CHECK_THROWS_WITH(make_hadamard(96), Contains("power of two") && Contains("96"));
  CHECK_THROWS_WITH(make_randomized_hadamard(96, 1), Contains("power of two"));
  const Eigen::MatrixXd U96 = make_random_orthogonal(96, 1)->matrix();
  CHECK_THROWS_WITH(covariance_rotation_matrix(U96, "UHP"), Contains("power of two"));
  CHECK_THROWS_WITH(covariance_rotation_matrix(U96, "UP"), Contains("power of two"));
  CHECK(covariance_rotation_matrix(U96, "U") == U96);
  Eigen::MatrixXd A = Eigen::MatrixXd::Identity(4, 4);
  A(0, 1) = 0.01;
  CHECK_THROWS_WITH(make_dense_rotation(A, "skewed"), Contains("not orthogonal") && Contains("skewed"));
  CHECK_THROWS_WITH(make_dense_rotation(Eigen::MatrixXd::Identity(4, 3), "rect"), Contains("square"));
  CHECK_THROWS_WITH(covariance_rotation_matrix(Eigen::MatrixXd::Identity(8, 8), "PHU"),
                    Contains("PHU") && Contains("UHP") && Contains("HUP"));
}

TEST_CASE("bit reversal by hand", "[rotation]") {
  const int expect[8] = {0, 4, 2, 6, 1, 5, 3, 7};
  for (int i = 0; i < 8; ++i) CHECK(bit_reverse(i, 8) == expect[i]);
  CHECK(bit_reverse(1, 16) == 8);
  CHECK(bit_reverse(3, 16) == 12);
  CHECK(bit_reverse(0, 1) == 0);
  CHECK_THROWS(bit_reverse(1, 6));
  const Eigen::MatrixXd P = bit_reversal_permutation(8);
  CHECK(P(1, 4) == 1.0);
  CHECK(P(3, 6) == 1.0);
  CHECK(P.sum() == 8.0);
  Eigen::RowVectorXd x(8);
  x << 0, 1, 2, 3, 4, 5, 6, 7;
  const Eigen::RowVectorXd xp = x * P;
  for (int i = 0; i < 8; ++i) CHECK(xp(i) == expect[i]);
}

TEST_CASE("covariance orders compose the named factors", "[rotation]") {
  const int d = 16;
  const Eigen::MatrixXd U = make_random_orthogonal(d, 9)->matrix();
  const Eigen::MatrixXd H = sylvester(d), P = bit_reversal_permutation(d);
  CHECK((covariance_rotation_matrix(U, "U") - U).cwiseAbs().maxCoeff() < 1e-15);
  CHECK((covariance_rotation_matrix(U, "UP") - U * P).cwiseAbs().maxCoeff() < 1e-12);
  CHECK((covariance_rotation_matrix(U, "UPH") - U * P * H).cwiseAbs().maxCoeff() < 1e-12);
  CHECK((covariance_rotation_matrix(U, "UHP") - U * H * P).cwiseAbs().maxCoeff() < 1e-12);
  CHECK((covariance_rotation_matrix(U, "HUP") - H * U * P).cwiseAbs().maxCoeff() < 1e-12);
  // UP moves column i of U to column bitrev(i).
  const Eigen::MatrixXd UP = covariance_rotation_matrix(U, "UP");
  for (int i = 0; i < d; ++i) CHECK(UP.col(bit_reverse(i, d)) == U.col(i));
}

TEST_CASE("make_rotation maps recipe kinds to rotations", "[rotation]") {
  RotationSpec s;
  CHECK(make_rotation(s, 8, nullptr)->name() == "identity");
  s.kind = RotationKind::Hadamard;
  CHECK(make_rotation(s, 8, nullptr)->matrix() == make_hadamard(8)->matrix());
  s.kind = RotationKind::RandomizedHadamard;
  s.seed = 4;
  CHECK(make_rotation(s, 8, nullptr)->matrix() == make_randomized_hadamard(8, 4)->matrix());
  s.kind = RotationKind::RandomOrthogonal;
  CHECK(make_rotation(s, 8, nullptr)->matrix() == make_random_orthogonal(8, 4)->matrix());
  s.kind = RotationKind::Covariance;
  s.order = "UHP";
  CHECK_THROWS_WITH(make_rotation(s, 8, nullptr), Contains("calibration"));
  const Eigen::MatrixXd U = make_random_orthogonal(8, 2)->matrix();
  CHECK(make_rotation(s, 8, &U)->matrix() == covariance_rotation_matrix(U, "UHP"));
  CHECK_THROWS_WITH(make_rotation(s, 16, &U), Contains("head_dim"));
}

TEST_CASE("eigen_descending recovers a known eigenbasis", "[rotation]") {
  const Eigen::MatrixXd U = make_random_orthogonal(4, 3)->matrix();
  const Eigen::Vector4d lambda(5, 3, 2, 1);
  const Eigen::MatrixXd C = U * lambda.asDiagonal() * U.transpose();
  Eigen::VectorXd values;
  Eigen::MatrixXd vectors;
  eigen_descending(C, values, vectors);
  REQUIRE(values.size() == 4);
  for (int j = 0; j < 4; ++j) {
    INFO("eigenpair " << j);
    CHECK(values(j) == Approx(lambda(j)).epsilon(1e-12));
    // Expected: U's column with the sign that makes its largest-|.| entry positive.
    Eigen::Index imax = 0;
    U.col(j).cwiseAbs().maxCoeff(&imax);
    const Eigen::VectorXd u = U(imax, j) > 0 ? Eigen::VectorXd(U.col(j)) : Eigen::VectorXd(-U.col(j));
    CHECK((vectors.col(j) - u).cwiseAbs().maxCoeff() < 1e-10);
    CHECK(vectors(imax, j) > 0);
  }
  CHECK_THROWS(eigen_descending(Eigen::MatrixXd::Zero(3, 2), values, vectors));
}

TEST_CASE("covariance rotations fitted on a real dump", "[rotation]") {
  const std::string dump_path = test::small_dump("float32", 96);
  const DumpReader r(dump_path);
  const DumpInfo& I = r.info();
  const CovarianceRotations c = fit_covariance_rotations(DumpLayerSource(r), false);
  REQUIRE(c.n_layers == 5);
  REQUIRE(c.head_dim == 8);
  CHECK(c.model_name == I.model_name);
  CHECK(c.checkpoint_sha256 == I.checkpoint_sha256);
  CHECK(c.calibration_path == dump_path);
  REQUIRE(c.key_cov.size() == 5);
  REQUIRE(c.value_eigenvectors.size() == 5);

  for (int l = 0; l < 5; ++l) {
    INFO("layer " << l);
    const Eigen::MatrixXd* covs[] = {&c.key_cov[l], &c.value_cov[l]};
    const Eigen::VectorXd* vals[] = {&c.key_eigenvalues[l], &c.value_eigenvalues[l]};
    const Eigen::MatrixXd* vecs[] = {&c.key_eigenvectors[l], &c.value_eigenvectors[l]};
    for (int which = 0; which < 2; ++which) {
      const Eigen::MatrixXd& C = *covs[which];
      const Eigen::VectorXd& lam = *vals[which];
      const Eigen::MatrixXd& U = *vecs[which];
      CHECK(C == C.transpose());
      CHECK(C.trace() > 0);
      for (int j = 0; j + 1 < 8; ++j) CHECK(lam(j) >= lam(j + 1));
      CHECK(lam(7) >= -1e-12 * lam(0));  // PSD
      CHECK(test::orthogonality_error(U) < 1e-10);
      const Eigen::MatrixXd recon = U * lam.asDiagonal() * U.transpose();
      CHECK((recon - C).cwiseAbs().maxCoeff() < 1e-10 * C.cwiseAbs().maxCoeff());
    }
  }

  // Layer 0 recomputed from the formulas with plain loops.
  const LayerDump L = r.read_layer(0, {"q", "k", "v"});
  const int d = 8, T = 96, nkv = I.n_kv_heads, group = I.n_heads / I.n_kv_heads;
  REQUIRE(group == 2);
  REQUIRE((L.q.tokens == T && L.q.head_dim == d));
  // The layer's C_K: the mean of its KV heads'; its C_V: the mean of its KV heads' under that C_K.
  Eigen::MatrixXd CK = Eigen::MatrixXd::Zero(d, d), CV = Eigen::MatrixXd::Zero(d, d);
  for (int h = 0; h < nkv; ++h) CK += test::key_cov_of_head(L, h, group) / nkv;
  CHECK((CK - c.key_cov[0]).cwiseAbs().maxCoeff() <= 1e-9 * CK.cwiseAbs().maxCoeff());
  for (int h = 0; h < nkv; ++h) CV += test::value_cov_of_head(L, h, CK) / nkv;
  CHECK((CV - c.value_cov[0]).cwiseAbs().maxCoeff() <= 1e-9 * CV.cwiseAbs().maxCoeff());
  // Keys and values differ, so the two eigenbases do too.
  CHECK((c.key_eigenvectors[0] - c.value_eigenvectors[0]).cwiseAbs().maxCoeff() > 1e-3);

  SECTION("save and load round trip exactly") {
    const std::string p = (test::scratch() / "rot.h5").string();
    save_covariance_rotations(c, p);
    const CovarianceRotations b = load_covariance_rotations(p);
    CHECK(b.calibration_path == c.calibration_path);
    CHECK(b.calibration.token_ids == c.calibration.token_ids);  // kept for the content-based leak check
    CHECK(b.calibration.token_ids.size() == 96);
    CHECK(b.model_name == c.model_name);
    CHECK(b.checkpoint_sha256 == c.checkpoint_sha256);
    CHECK(b.n_layers == c.n_layers);
    CHECK(b.head_dim == c.head_dim);
    REQUIRE(b.key_cov.size() == 5);
    for (int l = 0; l < 5; ++l) {
      CHECK(b.key_cov[l] == c.key_cov[l]);
      CHECK(b.value_cov[l] == c.value_cov[l]);
      CHECK(b.key_eigenvalues[l] == c.key_eigenvalues[l]);
      CHECK(b.value_eigenvalues[l] == c.value_eigenvalues[l]);
      CHECK(b.key_eigenvectors[l] == c.key_eigenvectors[l]);
      CHECK(b.value_eigenvectors[l] == c.value_eigenvectors[l]);
    }
    // No temporary left behind by the atomic write.
    for (const auto& e : fs::directory_iterator(test::scratch()))
      CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
  }

  SECTION("bad rotations files fail naming the file") {
    const std::string good = (test::scratch() / "rot_good.h5").string();
    save_covariance_rotations(c, good);
    const std::vector<char> bytes = read_bytes(good);

    const std::string trunc = (test::scratch() / "rot_truncated.h5").string();
    write_bytes(trunc, bytes.data(), bytes.size() / 2);
    CHECK_THROWS_WITH(load_covariance_rotations(trunc), Contains(trunc));

    const std::string missing = (test::scratch() / "no_such_rotations.h5").string();
    CHECK_THROWS_WITH(load_covariance_rotations(missing), Contains(missing) && Contains("no such file"));

    const std::string text = (test::scratch() / "rot_text.h5").string();
    write_bytes(text, "not hdf5\n", 9);
    CHECK_THROWS_WITH(load_covariance_rotations(text), Contains(text) && Contains("not an HDF5 file"));

    const std::string nods = (test::scratch() / "rot_nodataset.h5").string();
    fs::copy_file(good, nods, fs::copy_options::overwrite_existing);
    {
      H5::H5File f(nods, H5F_ACC_RDWR);
      f.unlink("layer_002/value_eigenvectors");
    }
    CHECK_THROWS_WITH(load_covariance_rotations(nods),
                      Contains(nods) && Contains("layer_002/value_eigenvectors") && Contains("missing"));

    const std::string noattr = (test::scratch() / "rot_noattr.h5").string();
    fs::copy_file(good, noattr, fs::copy_options::overwrite_existing);
    {
      H5::H5File f(noattr, H5F_ACC_RDWR);
      f.removeAttr("checkpoint_sha256");
    }
    CHECK_THROWS_WITH(load_covariance_rotations(noattr), Contains(noattr) && Contains("checkpoint_sha256"));

    const std::string shape = (test::scratch() / "rot_shape.h5").string();
    fs::copy_file(good, shape, fs::copy_options::overwrite_existing);
    {
      H5::H5File f(shape, H5F_ACC_RDWR);
      f.removeAttr("head_dim");
      const long long four = 4;
      f.createAttribute("head_dim", H5::PredType::STD_I64LE, H5::DataSpace(H5S_SCALAR))
          .write(H5::PredType::NATIVE_LLONG, &four);
    }
    CHECK_THROWS_WITH(load_covariance_rotations(shape), Contains(shape) && Contains("key_cov") && Contains("[8, 8]"));

    std::ofstream(test::scratch() / "not_a_dir") << "x";  // under a file: refused (a missing folder would be created)
    CHECK_THROWS_WITH(save_covariance_rotations(c, (test::scratch() / "not_a_dir" / "r.h5").string()), Contains("not_a_dir"));
  }

  SECTION("the calibration must come from the evaluated model") {
    // An evaluated passage of other text (its token ids reversed: no shared run with the calibration's).
    PassageOrigin ev = c.calibration;
    ev.where = "eval.h5";
    std::reverse(ev.token_ids.begin(), ev.token_ids.end());
    CHECK_NOTHROW(check_calibration_matches(c, I, ev));
    DumpInfo other = I;
    other.model_name = "some-other-model";
    other.checkpoint_sha256 = "";  // no sha256: the name decides
    CHECK_THROWS_WITH(check_calibration_matches(c, other, ev),
                      Contains("some-other-model") && Contains("eval.h5") && Contains("same model"));
    other = I;
    other.model_name = "renamed-copy";  // the same checkpoint under another file name: accepted
    CHECK_NOTHROW(check_calibration_matches(c, other, ev));
    other = I;
    other.checkpoint_sha256 = "00ff";
    CHECK_THROWS_WITH(check_calibration_matches(c, other, ev), Contains("00ff"));
    other = I;
    other.head_dim = 16;
    CHECK_THROWS_WITH(check_calibration_matches(c, other, ev), Contains("head_dim"));
    // The calibration dump itself as the evaluated data: refused by content.
    CHECK_THROWS_WITH(check_calibration_matches(c, I, dump_origin(r)), Contains("same data") && Contains("identical"));
  }
}
