// test_sweep.cpp: sweep configs (strict YAML: unknown keys and bad values name the line), calibration
// checks, and a small end-to-end sweep on real dumps of stories260K.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>

#include "dump_fixture.h"
#include "oscar/01_core/error.h"
#include "oscar/07_quantize/cache_policy.h"
#include "oscar/05_recipe/recipe_yaml.h"
#include "oscar/cov_format.h"
#include "oscar/12_sweep/sweep.h"
#include "oscar/13_report/sweep_tables.h"
#include "oscar/13_report/table_text.h"

using namespace oscar;
namespace fs = std::filesystem;

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
  CHECK(cov.windows.key == TensorWindows{64, 256, 0});
  CHECK(cov.windows.shared());
  CHECK(cov.key.group == 128);
  CHECK(cov.calibrated());
  // OSCAR's code: per-row quantile clamp, rounding half up (half away from zero on the non-negative (x - min) / scale)
  CHECK(cov.key.clip_mode == ClipMode::Quantile);
  CHECK(cov.value.clip_mode == ClipMode::Quantile);
  CHECK(cov.key.rounding == Rounding::HalfAway);
  CHECK(cov.key.zero_point == ZeroPoint::Float);
  // OSCAR defines INT2 only: at 3 and 4 bits the ratio clip (measured better), and the kernels' allocator agrees
  for (const char* name : {"oscar-cov", "oscar-cov-head", "oscar-cov-fp32"})
    for (int b : {2, 3, 4}) {
      const Recipe r = resolve_recipe(load_preset(name).recipe, b, 128);
      INFO(name << "@" << b);
      CHECK(r.key.clip_mode == (b == 2 ? ClipMode::Quantile : ClipMode::Ratio));
      CHECK(r.value.clip_mode == r.key.clip_mode);
      CHECK(r.key.clip_ratio == 0.96f);
      CHECK(r.value.clip_ratio == 0.92f);
      if (b != 3) CHECK(r.key.clip_mode == covfmt::default_clip_mode(b));
    }
  const Recipe omni = resolve_recipe(load_preset("oscar-omni").recipe, 2, 128);
  CHECK(omni.omni_token_scaling);
  CHECK(omni.key.axis == QuantAxis::PerChannel);
  CHECK(omni.key.group == 32);
  CHECK(omni.windows.key == TensorWindows{0, 0, 128});
  CHECK(omni.windows.shared());
  CHECK(omni.key.zero_point == ZeroPoint::Integer);  // OScaR's code
  CHECK(omni.value.zero_point == ZeroPoint::Integer);
  CHECK(omni.key.rounding == Rounding::HalfEven);
  const Recipe fz = resolve_recipe(load_preset("oscar-omni-fz").recipe, 2, 128);
  CHECK(fz.key.zero_point == ZeroPoint::Float);
  CHECK(fz.value.zero_point == ZeroPoint::Float);
  // KIVI's code: key residual blocks of 128, the newest 128 values in fp16 at every step
  const Recipe kivi = resolve_recipe(load_preset("kivi").recipe, 2, 128);
  CHECK(kivi.windows.key == TensorWindows{0, 0, 128});
  CHECK(kivi.windows.value == TensorWindows{0, 128, 0});
  CHECK(kivi.windows.window_dtype == ScaleDtype::F16);
  CHECK(kivi.key.zero_point == ZeroPoint::Float);
  // QuaRot's code: integer zero point, range widened to include 0
  const Recipe quarot = resolve_recipe(load_preset("quarot").recipe, 2, 128);
  CHECK(quarot.key.zero_point == ZeroPoint::Integer);
  CHECK(quarot.value.range_with_zero);
  CHECK(quarot.key.clip_ratio == 1.0f);
  CHECK(resolve_recipe(load_preset("naive").recipe, 2, 64).key.group == 64);  // group: head_dim
  CHECK_THROWS_WITH(load_preset("nope"), Catch::Contains("unknown preset 'nope'") && Catch::Contains("oscar-cov"));
}

TEST_CASE("bad sweep configs are errors naming the file and line", "[sweep][bad-input]") {
  const std::string head = "output: out\ndumps:\n  - path: " + eval_dump() + "\n";
  SECTION("unknown top-level key") {
    const auto p = test::scratch_file("unknown.yaml", head + "recipes: [kivi]\nquerys: 12\n");
    CHECK_THROWS_WITH(load_sweep_config(p), Catch::Contains("unknown.yaml:5") && Catch::Contains("unknown key 'querys'"));
  }
  SECTION("unknown key inside a recipe override") {
    const auto p = test::scratch_file("unknown2.yaml", head + "recipes:\n  - {preset: kivi, name: k2, key: {bitz: 3}}\n");
    CHECK_THROWS_WITH(load_sweep_config(p), Catch::Contains("unknown2.yaml:5") && Catch::Contains("unknown key 'bitz'"));
  }
  SECTION("bits out of range") {
    const auto p = test::scratch_file("bits.yaml", head + "recipes: [kivi]\nbits: [2, 9]\n");
    CHECK_THROWS_WITH(load_sweep_config(p), Catch::Contains("bits 9 out of range"));
  }
  SECTION("unknown clip mode, zero point or per-tensor window key") {
    auto p = test::scratch_file("clipmode.yaml", head + "recipes:\n  - {preset: kivi, name: k4, clip: {mode: percentile}}\n");
    CHECK_THROWS_WITH(load_sweep_config(p), Catch::Contains("clipmode.yaml:5") && Catch::Contains("clip mode 'percentile' unknown"));
    p = test::scratch_file("clipkey.yaml", head + "recipes:\n  - {preset: kivi, name: k4, clip: {keys: 0.9}}\n");
    CHECK_THROWS_WITH(load_sweep_config(p), Catch::Contains("clipkey.yaml:5") && Catch::Contains("unknown key 'keys' in clip"));
    p = test::scratch_file("cliprange.yaml", head + "recipes:\n  - {preset: kivi, name: k4, clip: {mode: quantile, key: 1.5}}\n");
    CHECK_THROWS_WITH(load_sweep_config(p), Catch::Contains("cliprange.yaml:5") && Catch::Contains("must be in (0, 1]"));
    p = test::scratch_file("zero.yaml", head + "recipes:\n  - {preset: kivi, name: k4, zero_point: half}\n");
    CHECK_THROWS_WITH(load_sweep_config(p), Catch::Contains("zero.yaml:5") && Catch::Contains("zero_point 'half' unknown"));
    p = test::scratch_file("win.yaml", head + "recipes:\n  - {preset: kivi, name: k4, windows: {value: {recnt: 3}}}\n");
    CHECK_THROWS_WITH(load_sweep_config(p), Catch::Contains("win.yaml:5") && Catch::Contains("unknown key 'recnt' in windows.value"));
    p = test::scratch_file("winneg.yaml", head + "recipes:\n  - {preset: kivi, name: k4, windows: {key: {sink: -1}}}\n");
    CHECK_THROWS_WITH(load_sweep_config(p), Catch::Contains("winneg.yaml:5") && Catch::Contains("windows.key sizes must be >= 0"));
  }
  SECTION("bad value") {
    const auto p = test::scratch_file("axis.yaml", head + "recipes:\n  - {preset: kivi, name: k3, key: {axis: diagonal}}\n");
    CHECK_THROWS_WITH(load_sweep_config(p), Catch::Contains("axis.yaml:5") && Catch::Contains("axis 'diagonal' unknown"));
  }
  SECTION("missing file and YAML syntax") {
    CHECK_THROWS_WITH(load_sweep_config("/nonexistent/s.yaml"), Catch::Contains("cannot read the sweep config"));
    const auto p = test::scratch_file("syntax.yaml", "output: [unclosed\n");
    CHECK_THROWS_WITH(load_sweep_config(p), Catch::Contains("YAML syntax error"));
  }
  SECTION("calibrated preset without calibration") {
    const auto p = test::scratch_file("nocal.yaml", head + "recipes:\n  - {preset: oscar-cov, key: {group: head_dim}, value: {group: head_dim}}\n");
    CHECK_THROWS_WITH(run_sweep(load_sweep_config(p), false), Catch::Contains("needs 'calibration:'"));
  }
  SECTION("group size not dividing head_dim (8)") {
    const auto p = test::scratch_file("group.yaml", head + "recipes: [kivi]\n");
    CHECK_THROWS_WITH(run_sweep(load_sweep_config(p), false), Catch::Contains("does not divide head_dim 8"));
  }
  SECTION("calibration dump from another model") {
    // A dump of the hd128 model as calibration for a stories260K dump.
    DumpRequest r{test::hd128_model(), test::stories_tokenizer(), test::kjv_text(), (test::scratch() / "hd128.h5").string()};
    r.tokens = 64;
    r.progress = false;
    if (!fs::exists(r.out)) dump_passage(r);
    const auto p = test::scratch_file("othermodel.yaml", "output: out\ndumps:\n  - path: " + eval_dump() + "\n    calibration: " + r.out +
                                                     "\nrecipes:\n  - {preset: oscar-cov, key: {group: head_dim}, value: {group: head_dim}}\n");
    CHECK_THROWS_WITH(run_sweep(load_sweep_config(p), false),
                      Catch::Contains("comes from model kjv-llama-hd128") && Catch::Contains("same model"));
  }
}

TEST_CASE("a small sweep end to end", "[sweep]") {
  const std::string out = (test::scratch() / "sweep-out").string();
  const auto p = test::scratch_file("small.yaml", "title: small\noutput: " + out + "\nqueries: 32\nbits: [2, 4]\ndumps:\n  - name: s\n    path: " +
                                                eval_dump() + "\n    calibration: " + calib_dump() +
                                                "\nrecipes:\n  - fp16\n  - naive\n"
                                                "  - {preset: oscar-cov, key: {group: head_dim}, value: {group: head_dim}}\n");
  SweepConfig cfg = load_sweep_config(p);
  cfg.budget = parse_budget("16");  // every row within the budget: what is ranked is decided by the share quantized
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
  // What was quantized: nothing of oscar-cov (its windows hold all 96 tokens), everything of naive. A row mostly in full
  // precision is marked, warned about, and never ranked: the verdict skips it although its error is the lowest.
  CHECK(find("oscar-cov@2").quantized_share == 0.0);
  CHECK(!find("oscar-cov@2").ranked);
  CHECK(find("naive@2").quantized_share == 1.0);
  CHECK(find("fp16").quantized_share == 0.0);
  CHECK(!find("fp16").quantizes);
  CHECK(find("oscar-cov@2").mean.kl < find("naive@2").mean.kl);
  REQUIRE(r.verdicts.size() == 1);
  const Verdict& v = r.verdicts[0].second;
  CHECK(v.best != "oscar-cov@2");
  CHECK(std::find(v.mostly_full_precision.begin(), v.mostly_full_precision.end(), "oscar-cov@2") != v.mostly_full_precision.end());
  bool warned = false;
  for (const auto& w : r.warnings)
    warned = warned || (w.find("oscar-cov@2, oscar-cov@4 (sink 64 + recent 256 in full precision: 640 tokens or more)") != std::string::npos &&
                        w.find("not ranked") != std::string::npos);
  CHECK(warned);
  const std::string md = summary_markdown(cfg, r);
  CHECK(md.find("| oscar-cov@2 | 2 | ⚠ 0% |") != std::string::npos);
  CHECK(md.find("| naive@2 | 2 | 100% |") != std::string::npos);
  write_sweep_outputs(cfg, r);
  for (const char* f : {"layers.csv", "summary.csv", "summary.md", "summary.json", "pareto.png"}) CHECK(fs::file_size(fs::path(out) / f) > 0);
}

TEST_CASE("no table ranks a row under half quantized", "[sweep][share]") {
  // Every preset on a short dump: whatever the sweep's verdict picks is mostly in low bits and within the budget, and
  // every row marked as ranked is too.
  const std::string out = (test::scratch() / "sweep-share").string();
  std::string recipes;
  for (const std::string& n : preset_names())
    if (n != "turboquant") recipes += "  - " + n + "\n";
  const auto p = test::scratch_file("share.yaml", "output: " + out + "\nqueries: 32\nbits: [2, 4]\ndumps:\n  - name: s\n    path: " + eval_dump() +
                                                "\n    calibration: " + calib_dump() + "\nrecipes:\n" + recipes);
  SweepConfig cfg = load_sweep_config(p);
  for (RecipeFile& rf : cfg.recipes) rf.recipe.key.group = rf.recipe.key.group == 32 ? 8 : rf.recipe.key.group;  // head_dim 8
  for (RecipeFile& rf : cfg.recipes) rf.recipe.value.group = rf.recipe.value.group == 32 ? 8 : rf.recipe.value.group;
  for (const char* budget : {"3", "6@96", "16@96"}) {
    cfg.budget = parse_budget(budget);
    const SweepResult r = run_sweep(cfg, false);
    INFO("budget " << budget);
    for (const SweepSummary& s : r.summary) {
      if (s.ranked) {
        CHECK(s.quantized_share >= kMinQuantizedShare);
        CHECK(s.bits_budget <= cfg.budget.bits + 1e-9);
      }
      if (r.verdicts[0].second.found && s.recipe == r.verdicts[0].second.best) CHECK(s.ranked);
    }
  }
}

TEST_CASE("a sweep runs every width it asks, keeps a recipe's own widths and labels them truly", "[sweep][widths]") {
  RecipeFile naive = load_preset("naive");
  CHECK(recipe_widths(naive, {2, 8}) == std::vector<RecipeWidths>{{2, 2}, {8, 8}});
  CHECK(widths_label(naive, {8, 8}) == "naive@8");
  RecipeFile fp16 = load_preset("fp16");
  CHECK(recipe_widths(fp16, {2, 8}) == std::vector<RecipeWidths>{{16, 16}});  // fixes both: runs once
  CHECK(widths_label(fp16, {16, 16}) == "fp16");
  const std::string head = "output: out\ndumps:\n  - path: " + eval_dump() + "\n";
  SECTION("a recipe's key bits stay; the label says K4V2") {
    const auto p = test::scratch_file("k4.yaml", head + "bits: [2, 4]\nrecipes:\n  - {preset: naive, name: nk4, key: {bits: 4}}\n");
    const SweepConfig c = load_sweep_config(p);
    REQUIRE(c.recipes.size() == 1);
    CHECK(c.recipes[0].key_bits_fixed);
    CHECK(!c.recipes[0].value_bits_fixed);
    const auto ws = recipe_widths(c.recipes[0], c.recipes[0].bits);
    REQUIRE(ws == std::vector<RecipeWidths>{{4, 2}, {4, 4}});
    const Recipe r = resolve_recipe(c.recipes[0], ws[0], 8);
    CHECK(r.name == "nk4@K4V2");
    CHECK(r.key.bits == 4);
    CHECK(r.value.bits == 2);
    CHECK(resolve_recipe(c.recipes[0], ws[1], 8).name == "nk4@4");
  }
  SECTION("the entry's own bits win over the config's") {
    const auto p = test::scratch_file("own.yaml", head + "bits: [2]\nrecipes:\n  - naive\n  - {preset: quarot, bits: [3, 8]}\n");
    const SweepConfig c = load_sweep_config(p);
    CHECK(c.recipes[0].bits == std::vector<int>{2});
    CHECK(c.recipes[1].bits == std::vector<int>{3, 8});
  }
  SECTION("a width a recipe cannot take stops the run before any work, naming both") {
    const auto p = test::scratch_file("tq8.yaml", head + "bits: [2, 8]\nrecipes: [naive, turboquant]\n");
    CHECK_THROWS_WITH(run_sweep(load_sweep_config(p), false),
                      Catch::Contains("tq8.yaml") && Catch::Contains("recipe 'turboquant@8' cannot run with 8-bit keys") &&
                          Catch::Contains("LloydMax"));
  }
  SECTION("bits that are not integers, none, or repeated are errors naming the line") {
    CHECK_THROWS_WITH(load_sweep_config(test::scratch_file("two.yaml", head + "recipes: [naive]\nbits: two\n")),
                      Catch::Contains("two.yaml:5: bad value 'two' for 'bits'"));
    CHECK_THROWS_WITH(load_sweep_config(test::scratch_file("half.yaml", head + "recipes: [naive]\nbits: [2, 2.5]\n")),
                      Catch::Contains("half.yaml:5: bad value '2.5' for 'bits'"));
    CHECK_THROWS_WITH(load_sweep_config(test::scratch_file("none.yaml", head + "recipes: [naive]\nbits: []\n")),
                      Catch::Contains("none.yaml:5") && Catch::Contains("asks for no width"));
    CHECK_THROWS_WITH(load_sweep_config(test::scratch_file("rep.yaml", head + "recipes: [naive]\nbits: [3, 3]\n")),
                      Catch::Contains("bits 3 is listed twice"));
    CHECK_THROWS_WITH(load_sweep_config(test::scratch_file("kb.yaml", head + "recipes:\n  - {preset: naive, name: x, key: {bits: 12}}\n")),
                      Catch::Contains("kb.yaml:5") && Catch::Contains("key bits 12 out of range"));
  }
}

TEST_CASE("dumps with one file name get labels that tell them apart", "[sweep][names]") {
  const fs::path a = test::scratch() / "dupA", b = test::scratch() / "dupB";
  fs::create_directories(a);
  fs::create_directories(b);
  fs::copy_file(eval_dump(), a / "p.h5", fs::copy_options::overwrite_existing);
  fs::copy_file(calib_dump(), b / "p.h5", fs::copy_options::overwrite_existing);
  const auto p = test::scratch_file("dup.yaml", "output: out\nrecipes: [naive]\ndumps:\n  - path: dupA/p.h5\n  - path: dupB/p.h5\n  - path: " +
                                              eval_dump() + "\n");
  const SweepConfig c = load_sweep_config(p);
  REQUIRE(c.dumps.size() == 3);
  CHECK(c.dumps[0].name == "dupA/p.h5");
  CHECK(c.dumps[1].name == "dupB/p.h5");
  CHECK(c.dumps[2].name == fs::path(eval_dump()).stem().string());
  const auto q = test::scratch_file("dup2.yaml", "output: out\nrecipes: [naive]\ndumps:\n  - {name: x, path: dupA/p.h5}\n  - {name: x, path: dupB/p.h5}\n");
  CHECK_THROWS_WITH(load_sweep_config(q), Catch::Contains("dup2.yaml:5: two dumps are named 'x'"));
}

TEST_CASE("the summary states the queries evaluated and renders undefined values", "[sweep][undefined]") {
  CHECK(metric_text(NAN, "{:.4f}", false) == "undefined");
  CHECK(metric_text(NAN, "{:.4f}", true) == "");
  CHECK(metric_text(0.5, "{:.4f}", true) == "0.5000");
  CHECK(widths_text(4, 2) == "K4V2");
  CHECK(widths_text(3, 3) == "3");
  const auto p = test::scratch_file("q.yaml", "output: out\nqueries: 5000\nbits: [2]\nrecipes: [naive]\ndumps:\n  - {name: s, path: " + eval_dump() + "}\n");
  const SweepConfig cfg = load_sweep_config(p);
  const SweepResult r = run_sweep(cfg, false);
  REQUIRE(r.summary.size() == 1);
  CHECK(r.summary[0].queries == 96);
  CHECK(summary_markdown(cfg, r).find("96 queries") != std::string::npos);
  CHECK(r.warnings.empty());
}
