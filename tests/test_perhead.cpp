// test_perhead.cpp: covariance rotations per KV head (recipe option covariance_scope: kv-head):
// the option parses and refuses bad values; on synthetic dumps the per-KV-head fit equals a direct computation
// of each head's statistics and, with one KV head, the per-layer fit bit for bit; the rotations of a per-head
// recipe reach each KV head (cache_sim, QuantizedKvCache) and survive the rotations file.
#include <catch2/catch.hpp>

#include <H5Cpp.h>
#include <yaml-cpp/yaml.h>

#include <random>

#include "oscar/01_core/error.h"
#include "oscar/03_dump/dump.h"
#include "oscar/03_dump/layer_source.h"
#include "oscar/06_rotate/rotation.h"
#include "oscar/07_quantize/cache_sim.h"
#include "oscar/05_recipe/recipe_yaml.h"
#include "oscar/09_cache/quantized_cache.h"
#include "rotation_reference.h"
#include "same_fields.h"
#include "test_data.h"

using namespace oscar;
using Catch::Contains;

namespace {

constexpr int kLayers = 2, kHd = 8, kT = 80;

// A synthetic dump of n_kv KV heads with `group` query heads each. Every KV head gets its own channel scales
// (queries, keys and values), so the heads' covariances, and their eigenbases, differ from each other.
std::string write_dump(const std::string& name, int n_kv, int group, unsigned seed) {
  const std::string path = (test::scratch() / name).string();
  DumpInfo I;
  I.model_name = "synthetic-perhead";
  I.checkpoint_sha256 = std::string(64, 'c');
  I.n_layers = kLayers;
  I.n_heads = n_kv * group;
  I.n_kv_heads = n_kv;
  I.head_dim = kHd;
  I.text_source = "seeded Gaussian";
  I.token_count = kT;
  I.has_pre_rope = false;
  std::vector<int> ids(kT);
  for (int t = 0; t < kT; ++t) ids[t] = static_cast<int>(seed * 1000 + t);
  DumpWriter w(path, I, ids, {});
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  auto channel_scale = [&](int head, int c, int salt) { return 0.3f + static_cast<float>((c * 7 + head * 3 + salt) % kHd); };
  const MatrixRM empty;
  for (int l = 0; l < kLayers; ++l) {
    MatrixRM q(kT, I.n_heads * kHd), k(kT, n_kv * kHd), v(kT, n_kv * kHd);
    for (int t = 0; t < kT; ++t) {
      for (int h = 0; h < I.n_heads; ++h)
        for (int c = 0; c < kHd; ++c) q(t, h * kHd + c) = n(rng) * channel_scale(h / group, c, l);
      for (int h = 0; h < n_kv; ++h)
        for (int c = 0; c < kHd; ++c) {
          k(t, h * kHd + c) = n(rng) * channel_scale(h, c, 2 + l) + (c == h ? 1.f : 0.f);
          v(t, h * kHd + c) = n(rng) * channel_scale(h, c, 5 + l);
        }
    }
    w.write_layer(LayerQKV{l, 0, empty, empty, q, k, v});
  }
  w.finish();
  return path;
}

RecipeFile parse(const std::string& yaml) { return parse_recipe(YAML::Load(yaml), "r.yaml"); }

Recipe resolved(const std::string& preset, int bits) { return resolve_recipe(load_preset(preset).recipe, bits, kHd); }

}  // namespace

TEST_CASE("covariance_scope parses and refuses bad values", "[perhead]") {
  const std::string base = "name: x\nkey_rotation: {kind: covariance}\nvalue_rotation: {kind: hadamard}\n";
  CHECK(parse(base).recipe.covariance_scope == CovarianceScope::Layer);  // the default: existing recipes unchanged
  CHECK(parse(base + "covariance_scope: layer\n").recipe.covariance_scope == CovarianceScope::Layer);
  const Recipe kv = parse(base + "covariance_scope: kv-head\n").recipe;
  CHECK(kv.covariance_scope == CovarianceScope::KvHead);
  CHECK(kv.calibrated_per_kv_head());
  CHECK_FALSE(parse(base).recipe.calibrated_per_kv_head());

  CHECK_THROWS_WITH(parse(base + "covariance_scope: head\n"),
                    Contains("r.yaml:4: covariance_scope 'head' unknown; use layer") && Contains("or kv-head"));
  CHECK_THROWS_WITH(parse(base + "covariance_scope: [kv-head]\n"), Contains("r.yaml:4: bad value") && Contains("covariance_scope"));
  CHECK_THROWS_WITH(parse(base + "covariance_scope: KV-HEAD\n"), Contains("covariance_scope 'KV-HEAD' unknown"));
  CHECK_THROWS_WITH(parse("name: y\nkey_rotation: {kind: hadamard}\ncovariance_scope: kv-head\n"),
                    Contains("r.yaml:3: recipe y has covariance_scope: kv-head but no covariance rotation"));
  CHECK_THROWS_WITH(parse("name: y\nkey_rotation: {kind: covariance, scope: kv-head}\n"), Contains("unknown key 'scope'"));

  // The preset: oscar-cov with its rotations per KV head, nothing else changed.
  const Recipe a = load_preset("oscar-cov").recipe, b = load_preset("oscar-cov-head").recipe;
  CHECK(a.covariance_scope == CovarianceScope::Layer);
  CHECK(b.covariance_scope == CovarianceScope::KvHead);
  CHECK(b.name == "oscar-cov-head");
  CHECK(a.key_rotation.kind == b.key_rotation.kind);
  CHECK(a.key_rotation.order == b.key_rotation.order);
  CHECK(a.value_rotation.order == b.value_rotation.order);
  CHECK(a.key.clip_ratio == b.key.clip_ratio);
  CHECK(a.value.clip_ratio == b.value.clip_ratio);
  CHECK(a.key.group == b.key.group);
  CHECK(a.windows.key == b.windows.key);
  CHECK(a.windows.value == b.windows.value);
  CHECK(a.windows.window_dtype == b.windows.window_dtype);
  for (const std::string& name : preset_names())  // every other preset keeps the default
    if (name != "oscar-cov-head") CHECK(load_preset(name).recipe.covariance_scope == CovarianceScope::Layer);
}

TEST_CASE("per-KV-head fit with one KV head equals the per-layer fit bit for bit", "[perhead]") {
  const DumpLayerSource src(write_dump("one_kv.h5", 1, 3, 11));
  const CovarianceRotations c = fit_covariance_rotations(src, false, true);
  REQUIRE(c.per_kv_head());
  REQUIRE(c.n_kv_heads == 1);
  REQUIRE(c.heads.size() == kLayers);
  for (int l = 0; l < kLayers; ++l) {
    INFO("layer " << l);
    REQUIRE(c.heads[l].size() == 1);
    const CovarianceFit& h = c.heads[l][0];
    CHECK(h.key_cov == c.key_cov[l]);
    CHECK(h.value_cov == c.value_cov[l]);
    CHECK(h.key_eigenvalues == c.key_eigenvalues[l]);
    CHECK(h.value_eigenvalues == c.value_eigenvalues[l]);
    CHECK(h.key_eigenvectors == c.key_eigenvectors[l]);
    CHECK(h.value_eigenvectors == c.value_eigenvectors[l]);
    // ... so both recipes rotate alike.
    const LayerRotations shared = layer_rotations(resolved("oscar-cov", 2), kHd, l, &c);
    const LayerRotations own = layer_rotations(resolved("oscar-cov-head", 2), kHd, l, &c);
    CHECK(own.keys.size() == 1);
    CHECK(own.key(0).matrix() == shared.key(0).matrix());
    CHECK(own.value(0).matrix() == shared.value(0).matrix());
  }
}

TEST_CASE("per-KV-head fit: each head's rotation is the eigenbasis of that head's own statistics", "[perhead]") {
  const int n_kv = 3, group = 2;
  const std::string path = write_dump("three_kv.h5", n_kv, group, 5);
  const DumpReader r(path);
  const DumpLayerSource src(r);
  const CovarianceRotations per_layer = fit_covariance_rotations(src, false);
  const CovarianceRotations c = fit_covariance_rotations(src, false, true);
  CHECK_FALSE(per_layer.per_kv_head());
  REQUIRE(c.per_kv_head());
  REQUIRE(c.n_kv_heads == n_kv);
  REQUIRE(c.heads.size() == kLayers);
  for (int l = 0; l < kLayers; ++l) {  // asking for the heads leaves the per-layer fit as it was
    CHECK(c.key_eigenvectors[l] == per_layer.key_eigenvectors[l]);
    CHECK(c.value_eigenvectors[l] == per_layer.value_eigenvectors[l]);
    CHECK(c.value_cov[l] == per_layer.value_cov[l]);
  }

  double max_head_vs_layer = 0;
  for (int l = 0; l < kLayers; ++l) {
    const LayerDump L = r.read_layer(l, {"q", "k", "v"});
    REQUIRE(c.heads[l].size() == static_cast<size_t>(n_kv));
    for (int h = 0; h < n_kv; ++h) {
      INFO("layer " << l << " KV head " << h);
      // Direct computation with plain loops: C_K,h over the queries of h's group; C_V,h weighted by k C_K,h k^T.
      REQUIRE(L.q.tokens == kT);
      const Eigen::MatrixXd CK = test::key_cov_of_head(L, h, group), CV = test::value_cov_of_head(L, h, CK);
      const CovarianceFit& f = c.heads[l][h];
      CHECK((CK - f.key_cov).cwiseAbs().maxCoeff() <= 1e-9 * CK.cwiseAbs().maxCoeff());
      CHECK((CV - f.value_cov).cwiseAbs().maxCoeff() <= 1e-9 * CV.cwiseAbs().maxCoeff());
      const std::pair<const Eigen::MatrixXd*, const Eigen::MatrixXd*> pairs[] = {{&CK, &f.key_eigenvectors},
                                                                                  {&CV, &f.value_eigenvectors}};
      const Eigen::VectorXd* lams[] = {&f.key_eigenvalues, &f.value_eigenvalues};
      for (int which = 0; which < 2; ++which) {
        const Eigen::MatrixXd& C = *pairs[which].first;
        const Eigen::MatrixXd& U = *pairs[which].second;
        const Eigen::VectorXd& lam = *lams[which];
        CHECK(test::orthogonality_error(U) < 1e-10);
        // U diagonalizes the directly computed covariance, eigenvalues descending on the diagonal.
        const Eigen::MatrixXd D = U.transpose() * C * U;
        const Eigen::MatrixXd off = D - Eigen::MatrixXd(D.diagonal().asDiagonal());
        CHECK(off.cwiseAbs().maxCoeff() < 1e-9 * C.cwiseAbs().maxCoeff());
        for (int j = 0; j < kHd; ++j) CHECK(D(j, j) == Approx(lam(j)).epsilon(1e-9));
        for (int j = 0; j + 1 < kHd; ++j) CHECK(lam(j) >= lam(j + 1));
      }
      max_head_vs_layer = std::max(max_head_vs_layer, (f.key_eigenvectors - c.key_eigenvectors[l]).cwiseAbs().maxCoeff());
      max_head_vs_layer = std::max(max_head_vs_layer, (f.value_eigenvectors - c.value_eigenvectors[l]).cwiseAbs().maxCoeff());
    }
  }
  CHECK(max_head_vs_layer > 0.1);  // the heads' statistics differ, so per-head bases are not the layer's

  SECTION("a per-head recipe gets one orthogonal rotation per KV head, U_h H P") {
    const Recipe rh = resolved("oscar-cov-head", 2);
    for (int l = 0; l < kLayers; ++l) {
      const LayerRotations rot = layer_rotations(rh, kHd, l, &c);
      REQUIRE(rot.keys.size() == static_cast<size_t>(n_kv));
      REQUIRE(rot.values.size() == static_cast<size_t>(n_kv));
      CHECK_NOTHROW(rot.check_heads(n_kv));
      CHECK_THROWS_WITH(rot.check_heads(n_kv + 1), Contains("cover 3 KV heads but the layer has 4"));
      for (int h = 0; h < n_kv; ++h) {
        CHECK(test::orthogonality_error(rot.key(h).matrix()) < 1e-10);
        CHECK(test::orthogonality_error(rot.value(h).matrix()) < 1e-10);
        CHECK((rot.key(h).matrix() - covariance_rotation_matrix(c.heads[l][h].key_eigenvectors, "UHP")).cwiseAbs().maxCoeff() < 1e-12);
        CHECK((rot.value(h).matrix() - covariance_rotation_matrix(c.heads[l][h].value_eigenvectors, "UHP")).cwiseAbs().maxCoeff() < 1e-12);
      }
      // The per-layer recipe keeps one shared rotation, from the layer's fit.
      const LayerRotations shared = layer_rotations(resolved("oscar-cov", 2), kHd, l, &c);
      CHECK(shared.keys.size() == 1);
      CHECK(shared.key(2).matrix() == covariance_rotation_matrix(c.key_eigenvectors[l], "UHP"));
      // A mixed recipe: per-head covariance keys, shared Hadamard values.
      Recipe mixed = rh;
      mixed.value_rotation.kind = RotationKind::Hadamard;
      const LayerRotations m = layer_rotations(mixed, kHd, l, &c);
      CHECK(m.keys.size() == static_cast<size_t>(n_kv));
      CHECK(m.values.size() == 1);
    }
    // Rotations fitted per layer only cannot serve a per-head recipe.
    CHECK_THROWS_WITH(layer_rotations(rh, kHd, 0, &per_layer), Contains("holds only per-layer rotations"));
  }

  SECTION("simulate_layer rotates each KV head by its own rotation") {
    const Recipe rh = resolved("oscar-cov-head", 2);
    const LayerDump L = r.read_layer(1, {"k", "v"});
    const LayerRotations rot = layer_rotations(rh, kHd, 1, &c);
    const SimulatedLayer all = simulate_layer(rh, L.k, L.v, rot);
    for (int h = 0; h < n_kv; ++h) {
      INFO("KV head " << h);
      // KV head h alone with only its rotations: oscar-cov has no cross-head coupling (no token scaling).
      HeadTensor k1{1, kT, kHd, std::vector<float>(L.k.head(h), L.k.head(h) + kT * kHd)};
      HeadTensor v1{1, kT, kHd, std::vector<float>(L.v.head(h), L.v.head(h) + kT * kHd)};
      LayerRotations one;
      one.keys.push_back(make_dense_rotation(rot.key(h).matrix(), "k"));
      one.values.push_back(make_dense_rotation(rot.value(h).matrix(), "v"));
      const SimulatedLayer s = simulate_layer(rh, k1, v1, one);
      for (int i = 0; i < kT * kHd; ++i) {
        REQUIRE(s.k_hat.head(0)[i] == all.k_hat.head(h)[i]);
        REQUIRE(s.v_hat.head(0)[i] == all.v_hat.head(h)[i]);
      }
      // ... and another head's rotation gives another result.
      LayerRotations other;
      other.keys.push_back(make_dense_rotation(rot.key((h + 1) % n_kv).matrix(), "k"));
      other.values.push_back(make_dense_rotation(rot.value((h + 1) % n_kv).matrix(), "v"));
      const SimulatedLayer o = simulate_layer(rh, k1, v1, other);
      double diff = 0;
      for (int i = 0; i < kT * kHd; ++i) diff = std::max(diff, double(std::abs(o.k_hat.head(0)[i] - all.k_hat.head(h)[i])));
      CHECK(diff > 1e-3);
    }
  }

  SECTION("QuantizedKvCache takes the per-head rotations and refuses a model of another KV head count") {
    ModelConfig mc;
    mc.dim = n_kv * group * kHd;
    mc.n_layers = kLayers;
    mc.n_heads = n_kv * group;
    mc.n_kv_heads = n_kv;
    mc.vocab_size = 16;
    mc.seq_len = 256;
    mc.hidden_dim = 16;
    CHECK_NOTHROW(QuantizedKvCache(mc, resolved("oscar-cov-head", 2), &c));
    ModelConfig other = mc;
    other.n_kv_heads = 1;
    other.n_heads = group;
    other.dim = group * kHd;
    CHECK_THROWS_WITH(QuantizedKvCache(other, resolved("oscar-cov-head", 2), &c), Contains("cover 3 KV heads but the layer has 1"));
    CHECK_NOTHROW(QuantizedKvCache(other, resolved("oscar-cov", 2), &c));  // one shared rotation fits any head count
  }

  SECTION("the rotations file round-trips the per-head fits exactly") {
    const std::string p = (test::scratch() / "perhead_rot.h5").string();
    save_covariance_rotations(c, p);
    const CovarianceRotations b = load_covariance_rotations(p);
    REQUIRE(b.per_kv_head());
    CHECK(b.n_kv_heads == n_kv);
    REQUIRE(b.heads.size() == kLayers);
    for (int l = 0; l < kLayers; ++l) {
      CHECK(b.key_eigenvectors[l] == c.key_eigenvectors[l]);
      CHECK(b.value_cov[l] == c.value_cov[l]);
      REQUIRE(b.heads[l].size() == static_cast<size_t>(n_kv));
      for (int h = 0; h < n_kv; ++h) {
        using F = CovarianceFit;
        test::check_same_fields(b.heads[l][h], c.heads[l][h], &F::key_cov, &F::value_cov, &F::key_eigenvalues,
                                &F::value_eigenvalues, &F::key_eigenvectors, &F::value_eigenvectors);
      }
      const LayerRotations from_file = layer_rotations(resolved("oscar-cov-head", 2), kHd, l, &b);
      const LayerRotations fitted = layer_rotations(resolved("oscar-cov-head", 2), kHd, l, &c);
      for (int h = 0; h < n_kv; ++h) CHECK(from_file.key(h).matrix() == fitted.key(h).matrix());
    }
    // A per-layer file stays per-layer, with its KV head count recorded.
    const std::string q = (test::scratch() / "perlayer_rot.h5").string();
    save_covariance_rotations(per_layer, q);
    const CovarianceRotations pl = load_covariance_rotations(q);
    CHECK_FALSE(pl.per_kv_head());
    CHECK(pl.n_kv_heads == n_kv);

    // A missing head group, and a per_kv_head flag that is neither 0 nor 1, are refused naming the file.
    const std::string missing = (test::scratch() / "perhead_missing.h5").string();
    save_covariance_rotations(c, missing);
    {
      H5::H5File f(missing, H5F_ACC_RDWR);
      f.unlink("layer_001/kv_head_002");
    }
    CHECK_THROWS_WITH(load_covariance_rotations(missing),
                      Contains(missing) && Contains("layer_001/kv_head_002 is missing") && Contains("re-run the calibration"));
    const std::string flag = (test::scratch() / "perhead_flag.h5").string();
    save_covariance_rotations(c, flag);
    {
      H5::H5File f(flag, H5F_ACC_RDWR);
      f.removeAttr("per_kv_head");
      const long long two = 2;
      f.createAttribute("per_kv_head", H5::PredType::NATIVE_LLONG, H5::DataSpace()).write(H5::PredType::NATIVE_LLONG, &two);
    }
    CHECK_THROWS_WITH(load_covariance_rotations(flag), Contains(flag) && Contains("per_kv_head=2 must be 0 or 1"));
    // A fit with a wrong number of heads in one layer is refused before anything is written.
    CovarianceRotations bad = c;
    bad.heads[1].pop_back();
    CHECK_THROWS_WITH(save_covariance_rotations(bad, (test::scratch() / "bad.h5").string()), Contains("layer 1 holds 2 per-KV-head fits"));
  }
}
