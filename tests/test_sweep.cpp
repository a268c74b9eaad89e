// test_sweep.cpp: sweep configs (strict YAML: unknown keys and bad values name the line), calibration
// checks, and a small end-to-end sweep on real dumps of stories260K.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "dump_fixture.h"
#include "oscar/01_core/error.h"
#include "oscar/06_quantize/recipe_yaml.h"
#include "oscar/10_sweep/sweep.h"

using namespace oscar;
namespace fs = std::filesystem;

static std::string write_config(const std::string& name, const std::string& text) {
  const std::string p = (test::scratch() / name).string();
  std::ofstream(p) << text;
  return p;
}

// Two real dumps of the same model on different passages (evaluation, calibration).
static std::string eval_dump() { return test::small_dump("float32", 96); }
// The calibration reads other text (KJV lines 300..), not the evaluated passage (lines 0..): a calibration
// that contains the evaluated tokens is refused as a leak.
static std::string calib_dump() {
  const std::string path = (test::scratch() / "calib_offset300_128.h5").string();
  if (!fs::exists(path)) dump_passage(DumpRequest{test::stories_model(), test::stories_tokenizer(), test::kjv_text(), path, 300, 128, "float32", false});
  return path;
}

TEST_CASE("presets load and carry their published settings", "[sweep][recipe]") {
  const auto names = preset_names();
  for (const char* n : {"fp16", "naive", "kivi", "quarot", "oscar-omni", "oscar-cov", "oscar-cov-fp32", "turboquant"})
    CHECK(std::find(names.begin(), names.end(), n) != names.end());
  const Recipe cov = resolve_recipe(load_preset("oscar-cov").recipe, 2, 128);
  CHECK(cov.name == "oscar-cov@2");
  CHECK(cov.key.clip_ratio == Approx(0.96f));
  CHECK(cov.value.clip_ratio == Approx(0.92f));
  CHECK(cov.windows.sink == 64);
  CHECK(cov.windows.recent == 256);
  CHECK(cov.key.group == 128);
  CHECK(cov.calibrated());
  const Recipe omni = resolve_recipe(load_preset("oscar-omni").recipe, 2, 128);
  CHECK(omni.omni_token_scaling);
  CHECK(omni.key.axis == QuantAxis::PerChannel);
  CHECK(omni.key.group == 32);
  CHECK(omni.windows.residual == 128);
  CHECK(resolve_recipe(load_preset("naive").recipe, 2, 64).key.group == 64);  // group: head_dim
  CHECK_THROWS_WITH(load_preset("nope"), Catch::Contains("unknown preset 'nope'") && Catch::Contains("oscar-cov"));
}

TEST_CASE("bad sweep configs are errors naming the file and line", "[sweep][bad-input]") {
  const std::string head = "output: out\ndumps:\n  - path: " + eval_dump() + "\n";
  SECTION("unknown top-level key") {
    const auto p = write_config("unknown.yaml", head + "recipes: [kivi]\nquerys: 12\n");
    CHECK_THROWS_WITH(load_sweep_config(p), Catch::Contains("unknown.yaml:5") && Catch::Contains("unknown key 'querys'"));
  }
  SECTION("unknown key inside a recipe override") {
    const auto p = write_config("unknown2.yaml", head + "recipes:\n  - {preset: kivi, name: k2, key: {bitz: 3}}\n");
    CHECK_THROWS_WITH(load_sweep_config(p), Catch::Contains("unknown2.yaml:5") && Catch::Contains("unknown key 'bitz'"));
  }
  SECTION("bits out of range") {
    const auto p = write_config("bits.yaml", head + "recipes: [kivi]\nbits: [2, 9]\n");
    CHECK_THROWS_WITH(load_sweep_config(p), Catch::Contains("bits 9 out of range"));
  }
  SECTION("bad value") {
    const auto p = write_config("axis.yaml", head + "recipes:\n  - {preset: kivi, name: k3, key: {axis: diagonal}}\n");
    CHECK_THROWS_WITH(load_sweep_config(p), Catch::Contains("axis.yaml:5") && Catch::Contains("axis 'diagonal' unknown"));
  }
  SECTION("missing file and YAML syntax") {
    CHECK_THROWS_WITH(load_sweep_config("/nonexistent/s.yaml"), Catch::Contains("cannot read the sweep config"));
    const auto p = write_config("syntax.yaml", "output: [unclosed\n");
    CHECK_THROWS_WITH(load_sweep_config(p), Catch::Contains("YAML syntax error"));
  }
  SECTION("calibrated preset without calibration") {
    const auto p = write_config("nocal.yaml", head + "recipes:\n  - {preset: oscar-cov, key: {group: head_dim}, value: {group: head_dim}}\n");
    CHECK_THROWS_WITH(run_sweep(load_sweep_config(p), false), Catch::Contains("needs 'calibration:'"));
  }
  SECTION("group size not dividing head_dim (8)") {
    const auto p = write_config("group.yaml", head + "recipes: [kivi]\n");
    CHECK_THROWS_WITH(run_sweep(load_sweep_config(p), false), Catch::Contains("does not divide head_dim 8"));
  }
  SECTION("calibration dump from another model") {
    // A dump of the hd128 model as calibration for a stories260K dump.
    DumpRequest r{test::hd128_model(), test::stories_tokenizer(), test::kjv_text(), (test::scratch() / "hd128.h5").string()};
    r.tokens = 64;
    r.progress = false;
    if (!fs::exists(r.out)) dump_passage(r);
    const auto p = write_config("othermodel.yaml", "output: out\ndumps:\n  - path: " + eval_dump() + "\n    calibration: " + r.out +
                                                     "\nrecipes:\n  - {preset: oscar-cov, key: {group: head_dim}, value: {group: head_dim}}\n");
    CHECK_THROWS_WITH(run_sweep(load_sweep_config(p), false),
                      Catch::Contains("comes from model kjv-llama-hd128") && Catch::Contains("same model"));
  }
}

TEST_CASE("a small sweep end to end", "[sweep]") {
  const std::string out = (test::scratch() / "sweep-out").string();
  const auto p = write_config("small.yaml", "title: small\noutput: " + out + "\nqueries: 32\nbits: [2, 4]\ndumps:\n  - name: s\n    path: " +
                                                eval_dump() + "\n    calibration: " + calib_dump() +
                                                "\nrecipes:\n  - fp16\n  - naive\n"
                                                "  - {preset: oscar-cov, key: {group: head_dim}, value: {group: head_dim}}\n");
  const SweepConfig cfg = load_sweep_config(p);
  const SweepResult r = run_sweep(cfg, false);
  REQUIRE(r.summary.size() == 5);  // fp16 + naive@2,4 + oscar-cov@2,4
  CHECK(r.rows.size() == 5 * 5 * 4);  // recipes x layers x KV heads
  const auto find = [&](const std::string& n) {
    for (const auto& s : r.summary)
      if (s.recipe == n) return s;
    FAIL("no row " << n);
    return SweepSummary{};
  };
  CHECK(find("fp16").mean.out_rel_err < 1e-2);
  CHECK(find("fp16").bits_128k == 16.0);
  CHECK(find("naive@2").mean.out_rel_err > find("naive@4").mean.out_rel_err);
  CHECK(find("naive@2").bits_128k == Approx(2.0 + 16.0 / 8));  // group = head_dim 8: one fp16 scale per 8 values
  // 96 tokens < sink 64 + recent 256: the whole cache stays in bf16, whatever the bit width.
  CHECK(find("oscar-cov@2").bits_at_dump == 16.0);
  CHECK(find("oscar-cov@4").mean.kl == find("oscar-cov@2").mean.kl);
  CHECK(find("oscar-cov@2").bits_128k == Approx((130752.0 * (2 + 32.0 / 8) + 320 * 16) / 131072));  // fp16 scale+zero per 8
  write_sweep_outputs(cfg, r);
  for (const char* f : {"layers.csv", "summary.csv", "summary.md", "pareto.png"}) CHECK(fs::file_size(fs::path(out) / f) > 0);
}
