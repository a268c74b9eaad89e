// test_eval_checks.cpp: the end-to-end checks can fail, and the tables say how much was quantized and how sure they are.
//   * quantized share by hand (oscar-cov's sink and recent window, KIVI's per-tensor windows, a sliding window);
//   * the block bootstrap: deterministic, its interval holds the mean and narrows with more data;
//   * the verdict: never picks a row over the budget or mostly in full precision; a tie is reported as one;
//   * the mutation check: on kjv-llama-hd128, each recipe's quantizer replaced by a broken one (its body squashed to 2%
//     of its range, windows kept) makes the teacher-forced KL, the recall test and the greedy continuation fail,
//     while the recipe itself passes them: the recalled passage lies past the sink and out of the recent window, and
//     the greedy prompt follows enough other text that the body is read.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "oscar/01_core/stats.h"
#include "oscar/07_quantize/cache_policy.h"
#include "oscar/11_eval/eval.h"
#include "oscar/08_metrics/verdict.h"
#include "oscar/13_report/verdict_text.h"
#include "eval_request.h"
#include "skip.h"
#include "test_data.h"

using namespace oscar;
using Catch::Matchers::Contains;

namespace {
Recipe preset_at(const char* name, int bits, int hd) { return resolve_recipe(load_preset(name).recipe, bits, hd); }
}  // namespace

TEST_CASE("quantized share by hand", "[eval][share]") {
  const Recipe cov = preset_at("oscar-cov", 2, 128);
  CHECK(quantized_share(cov, 320) == 0.0);                         // sink 64 + recent 256 hold everything
  CHECK(quantized_share(cov, 640) == Approx(0.5));                 // 320 of 640 in the body
  CHECK(quantized_share(cov, 2048) == Approx(1728.0 / 2048));
  CHECK(tokens_for_quantized_share(cov, 0.5, 100000) == 640);
  CHECK(tokens_for_quantized_share(cov, 0.5, 600) == 0);           // not within 600 tokens
  // the last query of a 2048-token cache sees all 2048: the body share; a query at p >= 1791 sees the whole body of
  // 1728 tokens among its p + 1 keys
  CHECK(attended_quantized_share(cov, 2048, 1, 0) == Approx(1728.0 / 2048));
  double expect = 0;
  for (int p = 2048 - 256; p < 2048; ++p) expect += 1728.0 / (p + 1) / 256;
  CHECK(attended_quantized_share(cov, 2048, 256, 0) == Approx(expect));
  // a sliding window of 512: the last query sees 512 keys, 256 of them in the body
  CHECK(attended_quantized_share(cov, 2048, 1, 512) == Approx(256.0 / 512));
  // KIVI: keys in whole blocks of 128, values all but the newest 128
  const Recipe kivi = preset_at("kivi", 2, 128);
  CHECK(quantized_share(kivi, 1000) == Approx((896.0 + 872.0) / 2000));
  CHECK(quantized_share(kivi, 100) == 0.0);
  // decoding: the mean over the predictions of the cache they read
  double sum = 0;
  for (long i = 0; i + 1 < 700; ++i) sum += quantized_share(cov, i + 1);
  CHECK(decoding_quantized_share(cov, 700) == Approx(sum / 699));
  CHECK(decoding_quantized_share(preset_at("fp16", 16, 128), 700) == 0.0);
  CHECK(windows_text(cov) == "sink 64 + recent 256");
  CHECK(windows_text(kivi) == "K residual 128, V recent 128");
}

TEST_CASE("Wilson score intervals of a proportion", "[eval][wilson]") {
  // Reference values (Wilson 1927; statsmodels' proportion_confint(method="wilson")).
  Interval w = wilson_interval(8, 10);
  CHECK(w.lo == Approx(0.4902).margin(1e-4));
  CHECK(w.hi == Approx(0.9433).margin(1e-4));
  w = wilson_interval(0, 5);
  CHECK(w.lo == 0.0);
  CHECK(w.hi == Approx(0.4345).margin(1e-4));
  w = wilson_interval(5, 5);
  CHECK(w.lo == Approx(0.5655).margin(1e-4));
  CHECK(w.hi == 1.0);
  w = wilson_interval(0, 0);  // no trials: undefined, never 0
  CHECK((std::isnan(w.lo) && std::isnan(w.hi)));
}

TEST_CASE("block bootstrap intervals", "[eval][bootstrap]") {
  std::mt19937 rng(5);
  std::normal_distribution<double> g(1.0, 2.0);
  std::vector<double> x(2000);
  for (double& v : x) v = g(rng);
  const double m = mean(x);
  const Interval a = bootstrap_mean_interval(x, 32), b = bootstrap_mean_interval(x, 32);
  CHECK(a.lo == b.lo);  // a fixed seed: the same data give the same interval
  CHECK(a.hi == b.hi);
  CHECK(a.contains(m));
  CHECK(a.hi - a.lo == Approx(2 * 1.96 * 2.0 / std::sqrt(2000.0)).epsilon(0.25));  // i.i.d.: the normal interval's width
  const std::vector<double> half(x.begin(), x.begin() + 500);
  const Interval h = bootstrap_mean_interval(half, 32);
  CHECK(h.hi - h.lo > 1.5 * (a.hi - a.lo));  // a quarter of the data: about twice as wide
  // dependence: a slowly varying series gets a wider interval with blocks than without
  std::vector<double> walk(2000);
  double w = 0;
  for (double& v : walk) v = (w = 0.95 * w + g(rng));
  CHECK(bootstrap_mean_interval(walk, 32).hi - bootstrap_mean_interval(walk, 32).lo >
        1.5 * (bootstrap_mean_interval(walk, 1).hi - bootstrap_mean_interval(walk, 1).lo));
  // paired: the difference of a series and itself plus a constant
  std::vector<double> y = x;
  for (double& v : y) v += 0.25;
  const Interval d = bootstrap_paired_difference(y, x, 32);
  CHECK(d.lo == Approx(0.25));
  CHECK(d.hi == Approx(0.25));
  CHECK(std::isnan(bootstrap_mean_interval({}, 32).lo));
  CHECK_THROWS_WITH(bootstrap_mean_interval({1.0, NAN}, 32), Contains("NaN"));
}

TEST_CASE("the verdict never ranks a row over the budget or mostly in full precision", "[eval][verdict]") {
  std::mt19937 rng(9);
  std::normal_distribution<double> g(0.0, 0.01);
  auto units = [&](double m) {
    std::vector<double> u(500);
    for (double& v : u) v = m + g(rng);
    return u;
  };
  const VerdictMetric kl{"kl", "KL", false, "positions", 32};
  const Budget budget = parse_budget("3@32K");
  CHECK(budget.bits == 3.0);
  CHECK(budget.context == 32768);
  std::vector<VerdictCandidate> c = {{"windowed", 2.5, 0.3, units(0.01)},  // best number, but mostly full precision
                                     {"fat", 4.0, 1.0, units(0.02)},       // over the budget
                                     {"good", 2.5, 0.9, units(0.10)},
                                     {"second", 2.2, 0.9, units(0.20)}};
  Verdict v = pick_recipe(c, budget, kl);
  REQUIRE(v.found);
  CHECK(v.best == "good");
  CHECK(v.runner_up == "second");
  CHECK(v.significant);
  CHECK(v.margin_ci.lo > 0.09);
  CHECK(v.over_budget == std::vector<std::string>{"fat"});
  CHECK(v.mostly_full_precision == std::vector<std::string>{"windowed"});
  const std::string t = verdict_text(v, budget, kl);
  CHECK_THAT(t, Contains("Pick good") && Contains("Runner-up second") && Contains("significant") && Contains("windowed") &&
                    Contains("Over the budget: fat"));
  // two recipes that differ by noise: not significant
  std::vector<VerdictCandidate> tie = {{"a", 2, 1, units(0.1)}, {"b", 2, 1, units(0.1)}};
  v = pick_recipe(tie, budget, kl);
  CHECK(!v.significant);
  CHECK_THAT(verdict_text(v, budget, kl), Contains("not significant"));
  // higher-is-better metrics rank the other way
  const VerdictMetric top1{"top1", "top-1", true, "positions", 32};
  v = pick_recipe(c, budget, top1);
  CHECK(v.best == "second");
  // nothing qualifies
  v = pick_recipe({{"windowed", 2.5, 0.3, units(0.01)}}, budget, kl);
  CHECK(!v.found);
  CHECK_THAT(verdict_text(v, budget, kl), Contains("No recipe to pick"));
  CHECK_THROWS_WITH(parse_budget("three"), Contains("--budget 'three'"));
  CHECK_THROWS_WITH(parse_budget("3@"), Contains("BITS@CONTEXT"));
  CHECK_THROWS_WITH(parse_budget("-1"), Contains("--budget"));
  CHECK(parse_budget("2.5@128K").context == 131072);
  CHECK(parse_budget("2@1000").context == 1000);
}

namespace {

// Each recipe, and the same recipe with its quantizer broken: the body squashed to 2% of its range, every window kept.
std::vector<RecipeFile> with_broken_twins(const std::vector<const char*>& names) {
  std::vector<RecipeFile> out = {load_preset("fp16")};
  for (const char* name : names) {
    RecipeFile good = load_preset(name), broken = good;
    broken.recipe.name = std::string(name) + "-broken";
    for (TensorQuant* q : {&broken.recipe.key, &broken.recipe.value}) {
      q->clip_mode = ClipMode::Ratio;
      q->clip_ratio = 0.02f;
    }
    out.push_back(good);
    out.push_back(broken);
  }
  return out;
}
std::string broken_name(const std::string& name) { return std::string(name).insert(name.find('@'), "-broken"); }

template <class Row>
const Row& find(const std::vector<Row>& rows, const std::string& n) {
  for (const Row& x : rows)
    if (x.recipe == n) return x;
  FAIL("no row " << n);
  return rows[0];
}

}  // namespace

TEST_CASE("teacher-forced and greedy checks fail when a recipe's quantizer is broken (mutation check)", "[eval][mutation][slow]") {
  EvalRequest r = test::hd128_request(1024);
  r.offset = -404;  // Revelation
  r.calib_offset = 0;
  r.calib_tokens = 512;
  r.bits = {4};
  r.prompt = "And God said";
  r.generate = 12;  // after enough other text that every recipe holds half of its cache in low bits
  r.recipes = with_broken_twins({"oscar-cov", "kivi"});
  const EvalResult res = run_eval(r);
  for (const std::string good : {"oscar-cov@4", "kivi@4"}) {
    const std::string broken = broken_name(good);
    INFO(good << " against " << broken);
    const EvalRow &g = find(res.rows, good), &b = find(res.rows, broken);
    // teacher-forced: a row mostly in full precision is marked and not ranked; a quantized one catches the broken twin
    CHECK(g.quantized == b.quantized);
    if (g.quantized >= kMinQuantizedShare) {
      CHECK(g.kl < 0.01);
      CHECK(b.kl > 0.1);
      CHECK(b.kl_ci.lo > g.kl_ci.hi);
    } else {
      CHECK(!g.ranked);
      CHECK(!b.ranked);
    }
    // greedy: the prompt follows enough other text that the body is read; the continuation stays full precision's
    // unless the quantizer is broken
    CHECK(find(res.greedy, good).quantized >= kMinQuantizedShare);
    CHECK(find(res.greedy, good).shared_prefix == r.generate);
    CHECK(find(res.greedy, broken).shared_prefix < r.generate);
  }
  CHECK(find(res.rows, "kivi@4").quantized >= kMinQuantizedShare);  // at 1024 tokens: the teacher-forced check bites
  CHECK(find(res.rows, "oscar-cov@4").quantized < kMinQuantizedShare);  // 64 + 256 windows: marked, not a result
}

TEST_CASE("the recall check fails when a recipe's quantizer is broken (mutation check, SmolLM2)", "[eval][mutation][slow][optional-data]") {
  OSCAR_SKIP_UNLESS_EXISTS(test::smollm2_gguf(), test::smollm2_model().fetch);
  // kjv-llama-hd128 barely copies from its context (the repeat is 0.03 nats easier than the first reading); SmolLM2 does
  EvalRequest r = test::smollm2_request(96);
  r.bits = {4};
  r.recall_distances = {320};  // the first copy is out of oscar-cov's recent window (256) when read again
  r.recall_span = 32;
  r.recipes = with_broken_twins({"oscar-cov", "kivi"});
  const EvalResult res = run_eval(r);
  CHECK(res.recall_lead == 64);  // past oscar-cov's sink
  const double fp = find(res.recall, std::string("fp16")).repeat_loss;
  CHECK(fp < find(res.recall, std::string("fp16")).first_loss - 1.0);  // the model recalls: the check can tell
  for (const std::string good : {"oscar-cov@4", "kivi@4"}) {
    INFO(good);
    const RecallRow &g = find(res.recall, good), &b = find(res.recall, broken_name(good));
    CHECK(g.quantized == 1.0);  // the whole first copy is in the body when it is read again
    CHECK(b.quantized == 1.0);
    CHECK(g.repeat_loss < fp + 0.15);
    CHECK(b.repeat_loss > fp + 0.5);
  }
}
