// test_job_plan.cpp: the job planner that oscar-eval and oscar-sweep share: a recipe that fixes one tensor's width runs
// at that width in both tools (K4V2 when --bits 2 is asked of a recipe with 4-bit keys), under the same label and with
// the same effective bits.
#include <catch2/catch.hpp>

#include <filesystem>

#include "dump_fixture.h"
#include "eval_request.h"
#include "oscar/05_recipe/recipe_yaml.h"
#include "oscar/11_eval/eval.h"
#include "oscar/12_sweep/sweep.h"

using namespace oscar;
namespace fs = std::filesystem;

namespace {

// naive with its keys fixed at 4 bits: asked for 2 bits, it runs with 4-bit keys and 2-bit values.
constexpr const char* kFixedKeys = "preset: naive\nname: naive-k4\nkey: {bits: 4}\n";

}  // namespace

TEST_CASE("a recipe file's fixed key width runs as K4V2 in oscar-eval and oscar-sweep alike", "[plan][eval][sweep]") {
  const std::string recipe = test::scratch_file("naive-k4.yaml", kFixedKeys);
  EvalRequest e = test::stories_request(96);
  e.bits = {2};
  e.recipes = {load_recipe_file(recipe)};
  const EvalResult er = run_eval(e);
  REQUIRE(er.rows.size() == 1);
  CHECK(er.rows[0].recipe == "naive-k4@K4V2");

  SweepConfig s = load_sweep_config(test::scratch_file("fixed-width.yaml", "output: fixed-width-out\nbits: [2]\ndumps:\n  - path: " +
                                                                        test::small_dump() + "\nrecipes:\n  - {" +
                                                                        "preset: naive, name: naive-k4, key: {bits: 4}}\n"));
  const SweepResult sr = run_sweep(s, false);
  REQUIRE(sr.summary.size() == 1);
  CHECK(sr.summary[0].recipe == "naive-k4@K4V2");
  CHECK(sr.summary[0].key_bits == 4);
  CHECK(sr.summary[0].value_bits == 2);
  // The same cache in both tools: the same bits per element at 128K and at the budget's context.
  CHECK(er.rows[0].eff_bits_128k == Approx(sr.summary[0].bits_128k).epsilon(1e-12));
  CHECK(er.rows[0].eff_bits_budget == Approx(sr.summary[0].bits_budget).epsilon(1e-12));
  CHECK(sr.summary[0].key_bits_128k > sr.summary[0].value_bits_128k + 1.5);  // 4-bit key codes against 2-bit value codes
}
