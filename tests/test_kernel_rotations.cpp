// test_kernel_rotations.cpp: oscar-rotate's library unit (kernel_rotations.h). On a real stories260K dump (4 KV
// heads, head_dim 8): the written R_K / R_V equal the rotations the caches build (layer_rotations over
// fit_covariance_rotations, as oscar-eval and oscar-sweep do), are orthogonal, R_K's U factor diagonalizes the key
// covariance computed here from the dump's queries; per KV head gives n_kv_heads different matrices; Hadamard
// recipes give hadamard kinds and no matrices; the file round-trips and the loader refuses broken files.
#include <catch2/catch.hpp>

#include <H5Cpp.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>

#include "dump_fixture.h"
#include "oscar/01_core/error.h"
#include "oscar/01_core/h5_attrs.h"
#include "oscar/03_dump/layer_source.h"
#include "oscar/09_cache/kernel_rotations.h"
#include "oscar/07_quantize/cache_sim.h"
#include "oscar/05_recipe/recipe_yaml.h"
#include "rotation_reference.h"
#include "same_fields.h"
#include "test_data.h"

using namespace oscar;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

using MatrixRMf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

Eigen::MatrixXd mat(const std::vector<float>& stack, int h, int d) {
  return Eigen::Map<const MatrixRMf>(stack.data() + static_cast<size_t>(h) * d * d, d, d).cast<double>();
}

std::string out_path(const std::string& name) {
  const fs::path p = test::scratch() / name;
  fs::remove(p);
  return p.string();
}

KernelRotations write(const std::string& recipe, const std::string& out, const std::string& calib, int head_dim = 0, int layers = 0) {
  KernelRotationRequest r;
  r.recipe = recipe;
  r.out = out;
  r.calib = calib;
  r.head_dim = head_dim;
  r.layers = layers;
  return run_kernel_rotations(r);
}

// The rotations the caches use for `recipe` on the dump: fit on the dump (as oscar-sweep does with calibration:),
// then layer_rotations (QuantizedKvCache's and GpuKvCache's constructor call).
std::vector<LayerRotations> cache_rotations(const std::string& recipe, const std::string& dump) {
  const Recipe r = load_preset(recipe).recipe;
  const DumpLayerSource src(dump);
  const CovarianceRotations c = fit_covariance_rotations(src, false, r.calibrated_per_kv_head());
  std::vector<LayerRotations> out;
  for (int l = 0; l < src.info().n_layers; ++l) out.push_back(layer_rotations(r, src.info().head_dim, l, &c));
  return out;
}

void require_same(const KernelRotations& a, const KernelRotations& b) {
  using K = KernelRotations;
  test::require_same_fields(a, b, &K::recipe, &K::calibration, &K::model_name, &K::checkpoint_sha256, &K::n_layers,
                            &K::head_dim, &K::n_kv_heads, &K::per_kv_head, &K::key_kind, &K::value_kind,
                            &K::calibration_token_ids, &K::key, &K::value);
}

}  // namespace

TEST_CASE("oscar-cov: R_K and R_V are the caches' rotations, orthogonal, with the calibration recorded", "[kernel-rotations]") {
  const std::string dump = test::small_dump();
  const std::string out = out_path("cov.h5");
  const KernelRotations k = write("oscar-cov", out, dump);
  REQUIRE(fs::exists(out));
  const DumpReader reader(dump);
  const DumpInfo& I = reader.info();
  REQUIRE(I.n_kv_heads == 4);
  REQUIRE(k.recipe == "oscar-cov");
  REQUIRE(k.key_kind == KernelRotationKind::Matrix);
  REQUIRE(k.value_kind == KernelRotationKind::Matrix);
  REQUIRE_FALSE(k.per_kv_head);
  REQUIRE(k.matrices() == 1);
  REQUIRE(k.n_layers == I.n_layers);
  REQUIRE(k.head_dim == I.head_dim);
  REQUIRE(k.n_kv_heads == I.n_kv_heads);
  REQUIRE(k.calibration == dump);
  REQUIRE(k.model_name == I.model_name);
  REQUIRE(k.checkpoint_sha256 == I.checkpoint_sha256);
  REQUIRE_FALSE(k.checkpoint_sha256.empty());
  REQUIRE(k.calibration_token_ids == reader.token_ids());

  const KernelRotations loaded = load_kernel_rotations(out);
  require_same(k, loaded);

  const int d = I.head_dim;
  const std::vector<LayerRotations> ref = cache_rotations("oscar-cov", dump);
  const Eigen::MatrixXd H = make_hadamard(d)->matrix();
  const Eigen::MatrixXd P = bit_reversal_permutation(d);
  for (int l = 0; l < I.n_layers; ++l) {
    const Eigen::MatrixXd RK = mat(loaded.key[l], 0, d), RV = mat(loaded.value[l], 0, d);
    CHECK((RK - ref[l].key(0).matrix()).cwiseAbs().maxCoeff() < 1e-6);
    CHECK((RV - ref[l].value(0).matrix()).cwiseAbs().maxCoeff() < 1e-6);
    CHECK(test::orthogonality_error(RK) < 1e-5);
    CHECK(test::orthogonality_error(RV) < 1e-5);
    // Independently of lib's fit: R_K = U H P, so U = R_K P^T H must diagonalize C_K = mean over query heads of Q^T Q / T
    // (every KV head has the same group size), with descending eigenvalues.
    const LayerDump L = reader.read_layer(l, {"q"});
    Eigen::MatrixXd C = Eigen::MatrixXd::Zero(d, d);
    for (int h = 0; h < L.q.heads; ++h) {
      const Eigen::MatrixXd Q = Eigen::Map<const MatrixRMf>(L.q.head(h), L.q.tokens, d).cast<double>();
      C += Q.transpose() * Q / static_cast<double>(L.q.tokens);
    }
    C /= L.q.heads;
    const Eigen::MatrixXd U = RK * P.transpose() * H.transpose();
    const Eigen::MatrixXd D = U.transpose() * C * U;
    const double off = (D - Eigen::MatrixXd(D.diagonal().asDiagonal())).cwiseAbs().maxCoeff();
    CHECK(off < 1e-4 * D.diagonal().cwiseAbs().maxCoeff());
    for (int i = 1; i < d; ++i) CHECK(D(i, i) <= D(i - 1, i - 1) * (1 + 1e-5));
  }
  // The rotations are not all alike: layers differ, keys differ from values.
  CHECK((mat(k.key[0], 0, d) - mat(k.value[0], 0, d)).cwiseAbs().maxCoeff() > 1e-3);
  CHECK((mat(k.key[0], 0, d) - mat(k.key[1], 0, d)).cwiseAbs().maxCoeff() > 1e-3);
}

TEST_CASE("oscar-cov-head: one matrix per KV head, each the caches' rotation of that head", "[kernel-rotations]") {
  const std::string dump = test::small_dump();
  const std::string out = out_path("cov-head.h5");
  const KernelRotations k = write("oscar-cov-head", out, dump);
  REQUIRE(k.per_kv_head);
  REQUIRE(k.n_kv_heads == 4);
  REQUIRE(k.matrices() == 4);
  const KernelRotations loaded = load_kernel_rotations(out);
  require_same(k, loaded);
  const int d = k.head_dim;
  const std::vector<LayerRotations> ref = cache_rotations("oscar-cov-head", dump);
  const KernelRotations shared = write("oscar-cov", out_path("cov-shared.h5"), dump);
  for (int l = 0; l < k.n_layers; ++l) {
    REQUIRE(ref[l].keys.size() == 4);
    for (int h = 0; h < 4; ++h) {
      CHECK((mat(loaded.key[l], h, d) - ref[l].key(h).matrix()).cwiseAbs().maxCoeff() < 1e-6);
      CHECK((mat(loaded.value[l], h, d) - ref[l].value(h).matrix()).cwiseAbs().maxCoeff() < 1e-6);
      CHECK(test::orthogonality_error(mat(loaded.key[l], h, d)) < 1e-5);
      CHECK(test::orthogonality_error(mat(loaded.value[l], h, d)) < 1e-5);
      for (int g = 0; g < h; ++g) {
        CHECK((mat(loaded.key[l], h, d) - mat(loaded.key[l], g, d)).cwiseAbs().maxCoeff() > 1e-3);
        CHECK((mat(loaded.value[l], h, d) - mat(loaded.value[l], g, d)).cwiseAbs().maxCoeff() > 1e-3);
      }
      CHECK((mat(loaded.key[l], h, d) - mat(shared.key[l], 0, d)).cwiseAbs().maxCoeff() > 1e-3);
    }
  }
}

TEST_CASE("Hadamard recipes give hadamard kinds and no matrices; seeded ones dense matrices", "[kernel-rotations]") {
  const std::string out = out_path("omni.h5");
  const KernelRotations k = write("oscar-omni", out, "", 128);
  REQUIRE(k.key_kind == KernelRotationKind::Hadamard);
  REQUIRE(k.value_kind == KernelRotationKind::Hadamard);
  REQUIRE(k.key.empty());
  REQUIRE(k.calibration == "none");
  REQUIRE(k.calibration_token_ids.empty());
  const KernelRotations loaded = load_kernel_rotations(out);
  require_same(k, loaded);
  REQUIRE(loaded.head_dim == 128);
  {
    const H5::H5File f(out, H5F_ACC_RDONLY);
    CHECK_FALSE(f.nameExists("layer_000"));
    CHECK_FALSE(f.nameExists("calibration_token_ids"));
  }
  // A dump given to a calibration-free recipe states the shapes only: no calibration recorded.
  const KernelRotations q = write("quarot", out_path("quarot.h5"), test::small_dump());
  CHECK(q.key_kind == KernelRotationKind::Hadamard);
  CHECK(q.calibration == "none");
  CHECK(q.calibration_token_ids.empty());
  CHECK(q.head_dim == 8);
  // naive: no rotation.
  CHECK(write("naive", out_path("naive.h5"), "", 64).key_kind == KernelRotationKind::None);
  // turboquant: seeded random orthogonal rotations, the same in every layer.
  const KernelRotations t = write("turboquant", out_path("tq.h5"), "", 16, 3);
  REQUIRE(t.key_kind == KernelRotationKind::Matrix);
  REQUIRE(t.key.size() == 3);
  const Recipe tr = load_preset("turboquant").recipe;
  for (int l = 0; l < 3; ++l) {
    CHECK((mat(t.key[l], 0, 16) - make_random_orthogonal(16, tr.key_rotation.seed)->matrix()).cwiseAbs().maxCoeff() < 1e-6);
    CHECK((mat(t.value[l], 0, 16) - make_random_orthogonal(16, tr.value_rotation.seed)->matrix()).cwiseAbs().maxCoeff() < 1e-6);
  }
  require_same(t, load_kernel_rotations((test::scratch() / "tq.h5").string()));
}

TEST_CASE("mixed kinds become matrices on both tensors", "[kernel-rotations]") {
  const std::string dump = test::small_dump();
  RecipeFile rf = parse_recipe(YAML::Load("{name: mixed, value_rotation: {kind: hadamard}}"), "inline", load_preset("oscar-cov"));
  const DumpLayerSource src(dump);
  const CovarianceRotations c = fit_covariance_rotations(src, false);
  const KernelRotations k = kernel_rotations(rf.recipe, src.info().n_layers, 8, 4, &c, dump);
  REQUIRE(k.key_kind == KernelRotationKind::Matrix);
  REQUIRE(k.value_kind == KernelRotationKind::Matrix);
  for (int l = 0; l < k.n_layers; ++l) {
    CHECK((mat(k.value[l], 0, 8) - make_hadamard(8)->matrix()).cwiseAbs().maxCoeff() < 1e-6);
    CHECK((mat(k.key[l], 0, 8) - covariance_rotation_matrix(c.key_eigenvectors[l], "UHP")).cwiseAbs().maxCoeff() < 1e-6);
  }
}

TEST_CASE("errors name the file and leave no output", "[kernel-rotations]") {
  const std::string out = out_path("err.h5");
  REQUIRE_THROWS_WITH(write("oscar-cov", out, ""), Contains("recipe oscar-cov needs covariance rotations") && Contains("--calib"));
  REQUIRE_THROWS_WITH(write("oscar-omni", out, "", 96), Contains("--head-dim 96") && Contains("not a power of two"));
  REQUIRE_THROWS_WITH(write("oscar-omni", out, ""), Contains("--head-dim"));
  REQUIRE_THROWS_WITH(write("turboquant", out, "", 16), Contains("--layers"));
  REQUIRE_THROWS_WITH(write("no-such-recipe", out, "", 128), Contains("no-such-recipe"));
  REQUIRE_THROWS_WITH(write("oscar-cov", out, test::small_dump(), 16), Contains("the dump has head_dim 8 but --head-dim 16 was given"));
  REQUIRE_THROWS_WITH(write("oscar-cov", out, (test::scratch() / "missing.h5").string()), Contains("missing.h5: no such file; give the calibration dump"));
  std::ofstream(test::scratch() / "a-file") << "x";  // an output under a file cannot be written; a missing folder is created
  REQUIRE_THROWS_WITH(write("oscar-omni", (test::scratch() / "a-file" / "x.h5").string(), "", 128), Contains("a-file"));
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("the loader refuses broken files, naming them", "[kernel-rotations]") {
  const std::string good = out_path("good.h5");
  write("oscar-cov", good, test::small_dump());
  auto broken = [&](const std::string& name, auto&& edit) {
    const std::string p = out_path(name);
    fs::copy_file(good, p);
    {
      H5::H5File f(p, H5F_ACC_RDWR);
      edit(f);
    }
    return p;
  };
  const std::string fmt_bad = broken("fmt.h5", [](H5::H5File& f) {
    f.removeAttr("format");
    h5::put_str(f, "format", "oscar-kv-rotations");
  });
  REQUIRE_THROWS_WITH(load_kernel_rotations(fmt_bad), Contains("fmt.h5") && Contains("format='oscar-kv-rotations'"));
  const std::string not_ortho = broken("ortho.h5", [](H5::H5File& f) {
    H5::DataSet ds = f.openDataSet("layer_001/value_rotation");
    std::vector<float> m(8 * 8);
    ds.read(m.data(), H5::PredType::NATIVE_FLOAT);
    m[3] += 0.01f;
    ds.write(m.data(), H5::PredType::NATIVE_FLOAT);
  });
  REQUIRE_THROWS_WITH(load_kernel_rotations(not_ortho), Contains("ortho.h5") && Contains("/layer_001/value_rotation[0] is not orthogonal"));
  const std::string missing = broken("missing-layer.h5", [](H5::H5File& f) { f.unlink("layer_001"); });
  REQUIRE_THROWS_WITH(load_kernel_rotations(missing), Contains("missing-layer.h5") && Contains("/layer_001 is missing"));
  const std::string kinds = broken("kinds.h5", [](H5::H5File& f) {
    f.removeAttr("value_kind");
    h5::put_str(f, "value_kind", "hadamard");
  });
  REQUIRE_THROWS_WITH(load_kernel_rotations(kinds), Contains("kinds.h5") && Contains("differs from value_kind"));
  const std::string trunc = out_path("trunc.h5");
  {
    std::ifstream in(good, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(trunc, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  REQUIRE_THROWS_WITH(load_kernel_rotations(trunc), Contains("trunc.h5"));
  REQUIRE_THROWS_WITH(load_kernel_rotations(out_path("absent.h5")), Contains("absent.h5") && Contains("no such file"));
}

TEST_CASE("kjv-llama-hd128 (head_dim 128, 2 KV heads): the kernels' shape, the caches' matrices", "[kernel-rotations]") {
  DumpRequest req{test::hd128_model(), test::stories_tokenizer(), test::kjv_text(), (test::scratch() / "hd128-cal.h5").string()};
  req.tokens = 256;
  req.progress = false;
  if (!fs::exists(req.out)) dump_passage(req);
  for (const std::string recipe : {"oscar-cov", "oscar-cov-head"}) {
    const std::string out = out_path(recipe + "-hd128.h5");
    write(recipe, out, req.out);
    const KernelRotations k = load_kernel_rotations(out);
    REQUIRE(k.head_dim == 128);
    REQUIRE(k.n_kv_heads == 2);
    REQUIRE(k.n_layers == 6);
    REQUIRE(k.model_name == "kjv-llama-hd128");
    REQUIRE(k.matrices() == (recipe == "oscar-cov-head" ? 2 : 1));
    const std::vector<LayerRotations> ref = cache_rotations(recipe, req.out);
    for (int l = 0; l < k.n_layers; ++l)
      for (int h = 0; h < k.matrices(); ++h) {
        const Eigen::MatrixXd RK = mat(k.key[l], h, 128), RV = mat(k.value[l], h, 128);
        CHECK((RK - ref[l].key(h).matrix()).cwiseAbs().maxCoeff() < 1e-6);
        CHECK((RV - ref[l].value(h).matrix()).cwiseAbs().maxCoeff() < 1e-6);
        CHECK(test::orthogonality_error(RK) < 1e-5);
        CHECK(test::orthogonality_error(RV) < 1e-5);
      }
    if (k.per_kv_head)
      for (int l = 0; l < k.n_layers; ++l) CHECK((mat(k.key[l], 0, 128) - mat(k.key[l], 1, 128)).cwiseAbs().maxCoeff() > 1e-3);
  }
}
