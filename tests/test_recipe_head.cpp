// test_recipe_head.cpp: recipes on any head_dim. `group: head` (and its synonym `head_dim`) spans the whole
// head: the presets that mean it (oscar-cov, oscar-cov-fp32, quarot, naive) resolve on head_dim 64, 128 and
// 256; their bit accounting and the GPU support check count it as head_dim; and on a head_dim that
// Hadamard cannot take (96) the error names the recipe and the presets that do run there, found by trying
// each one.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "oscar/01_core/error.h"
#include "oscar/07_quantize/cache_policy.h"
#include "oscar/07_quantize/cache_sim.h"
#include "oscar/05_recipe/recipe_yaml.h"
#include "oscar/09_cache/gpu_kv_cache.h"

using namespace oscar;
using Catch::Contains;

namespace {
RecipeFile inline_recipe(const std::string& yaml) { return parse_recipe(YAML::Load(yaml), "inline.yaml"); }
bool has(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }
}  // namespace

TEST_CASE("group: head and group: head_dim parse to the whole head", "[recipe][head]") {
  for (const char* word : {"head", "head_dim"}) {
    const RecipeFile rf = inline_recipe(fmt::format("name: x\nbits: [2]\nkey: {{group: {0}}}\nvalue: {{group: {0}}}\n", word));
    CHECK(rf.recipe.key.group == kGroupHead);
    for (int hd : {64, 96, 128, 256}) {
      const Recipe r = resolve_recipe(rf, {2, 2}, hd);
      CHECK(r.key.group == hd);
      CHECK(r.value.group == hd);
    }
  }
  CHECK_THROWS_WITH(inline_recipe("name: x\nkey: {group: heads}\n"), Contains("inline.yaml:2"));
  CHECK_THROWS_WITH(inline_recipe("name: x\nkey: {group: 0}\n"), Contains("must be positive (or head"));
}

TEST_CASE("the whole-head presets run on head_dim 64, 128 and 256 at 2, 3 and 4 bits", "[recipe][head]") {
  for (const char* name : {"oscar-cov", "oscar-cov-fp32", "quarot", "naive"}) {
    const RecipeFile rf = load_preset(name);
    CHECK(rf.recipe.key.group == kGroupHead);
    CHECK(rf.recipe.value.group == kGroupHead);
    for (int hd : {64, 128, 256})
      for (int b : {2, 3, 4}) {
        const Recipe r = resolve_recipe(rf, {b, b}, hd);
        CHECK(r.key.group == hd);
        CHECK(r.value.group == hd);
      }
  }
  // every preset resolves on head_dim 64 (SmolLM2), 128 (the bundled model) and 256 (Gemma 3), and runs there: a layer of
  // random keys and values through the whole recipe comes back finite and changed (quantized), windows included
  for (const std::string& name : preset_names()) {
    const RecipeFile rf = load_preset(name);
    for (const RecipeWidths w : recipe_widths(rf, {2, 3, 4}))
      for (int hd : {64, 128, 256}) {
        INFO(name << " at " << w.key << "/" << w.value << " bits, head_dim " << hd);
        Recipe r;
        REQUIRE_NOTHROW(r = resolve_recipe(rf, w, hd));
        if (r.calibrated()) r.key_rotation.kind = r.value_rotation.kind = RotationKind::Hadamard;  // no calibration here
        const int T = 448;
        HeadTensor k{2, T, hd, std::vector<float>(size_t(2) * T * hd)}, v = k;
        std::mt19937 rng(3);
        std::normal_distribution<float> g(0.0f, 1.0f);
        for (float& x : k.data) x = g(rng);
        for (float& x : v.data) x = g(rng);
        const SimulatedLayer s = simulate_layer(r, k, v, layer_rotations(r, hd, 0, nullptr));
        double err = 0;
        for (size_t i = 0; i < k.data.size(); ++i) {
          REQUIRE(std::isfinite(s.k_hat.data[i]));
          REQUIRE(std::isfinite(s.v_hat.data[i]));
          err += std::fabs(s.k_hat.data[i] - k.data[i]) + std::fabs(s.v_hat.data[i] - v.data[i]);
        }
        CHECK(err > 0);
      }
  }
}

TEST_CASE("bit accounting counts group: head as head_dim channels", "[recipe][head]") {
  Recipe r = load_preset("naive").recipe;  // symmetric: one fp16 scale per group, no windows
  r.key.bits = r.value.bits = 2;
  for (int hd : {64, 128, 256}) {
    const EffectiveBits e = effective_bits(r, 4096, hd, 3);  // unresolved: group = kGroupHead
    CHECK(e.key == Approx(2.0 + 16.0 / hd));
    CHECK(e.value == Approx(2.0 + 16.0 / hd));
    const EffectiveBits resolved = effective_bits(resolve_recipe(load_preset("naive"), {2, 2}, hd), 4096, hd, 3);
    CHECK(resolved.total() == Approx(e.total()));
  }
  // oscar-cov (asymmetric: scale and zero point per group) at 64: body codes + 32 bits per 64 values
  Recipe cov = load_preset("oscar-cov").recipe;
  cov.key.bits = cov.value.bits = 2;
  const long T = 64 + 256 + 64 * 100;
  const double body = 64 * 100, full = 64 + 256;
  CHECK(effective_bits(cov, T, 64, 3).key == Approx((body * (2 + 32.0 / 64) + full * 16) / T));
}

TEST_CASE("the GPU check takes group: head as the model's head_dim", "[recipe][head]") {
  ModelConfig c;
  c.dim = 512, c.n_layers = 6, c.n_heads = 4, c.n_kv_heads = 2, c.vocab_size = 512, c.seq_len = 2048;  // head_dim 128
  Recipe cov = load_preset("oscar-cov").recipe;
  cov.key.bits = cov.value.bits = 2;
  CHECK(gpu_unsupported_reason(cov, c).empty());                                          // unresolved
  CHECK(gpu_unsupported_reason(resolve_recipe(load_preset("oscar-cov"), {2, 2}, 128), c).empty());  // resolved
  cov.key.group = 64;
  CHECK_THAT(gpu_unsupported_reason(cov, c), Contains("keys in groups of 64 channels, the kernels use 128"));
  ModelConfig small = c;
  small.dim = 9 * 64, small.n_heads = 9, small.n_kv_heads = 3;  // SmolLM2's head_dim 64
  CHECK(gpu_unsupported_reason(resolve_recipe(load_preset("oscar-cov"), {2, 2}, 64), small).empty());  // compiled for 64
}

TEST_CASE("a head_dim that Hadamard cannot take names the recipe and the presets that apply", "[recipe][head]") {
  const std::vector<std::string> ok96 = presets_for_head_dim(96, {2, 2});
  // computed by trying each preset: exactly those without a Hadamard step
  for (const std::string& name : preset_names()) {
    const RecipeFile p = load_preset(name);
    const bool hadamard = p.recipe.key_rotation.kind == RotationKind::Hadamard || p.recipe.key_rotation.kind == RotationKind::Covariance;
    CHECK(has(ok96, name) == !hadamard);
  }
  CHECK(has(ok96, "naive"));
  CHECK(has(ok96, "kivi"));
  CHECK(has(ok96, "turboquant"));
  CHECK(has(ok96, "fp16"));
  CHECK_FALSE(has(ok96, "quarot"));
  CHECK_FALSE(has(ok96, "oscar-cov"));
  CHECK_FALSE(has(ok96, "oscar-omni"));
  CHECK(presets_for_head_dim(128, {2, 2}) == preset_names());
  // at 8 bits the Lloyd-Max codebook (TurboQuant) is out too
  CHECK_FALSE(has(presets_for_head_dim(96, {8, 8}), "turboquant"));
  try {
    resolve_recipe(load_preset("quarot"), {2, 2}, 96);
    FAIL("quarot resolved on head_dim 96");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK_THAT(m, Contains("recipe 'quarot@2'") && Contains("head_dim 96 is not a power of two") &&
                      Contains("presets that run on head_dim 96 at 2 bits: fp16, kivi, naive, turboquant"));
  }
  CHECK_THROWS_WITH(resolve_recipe(load_preset("oscar-cov").recipe, 3, 96),
                    Contains("recipe oscar-cov") && Contains("presets that run on head_dim 96 at 3 bits: fp16, kivi, naive, turboquant"));
}
