// test_fidelity.cpp: attention-fidelity metrics on hand-made caches with hand-computed values:
// identity, a two-key softmax, causal visibility of the queries, and GQA averaging.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "oscar/01_core/error.h"
#include "oscar/07_metrics/fidelity.h"

using namespace oscar;

namespace {

HeadTensor tensor(int heads, int tokens, int d, std::vector<float> data) {
  HeadTensor x;
  x.heads = heads;
  x.tokens = tokens;
  x.head_dim = d;
  x.data = std::move(data);
  REQUIRE(x.data.size() == static_cast<size_t>(heads) * tokens * d);
  return x;
}

HeadTensor gaussian(int heads, int tokens, int d, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(heads) * tokens * d);
  for (float& v : x) v = n(rng);
  return tensor(heads, tokens, d, x);
}

// KL(p || p^) of two two-point distributions.
double kl2(double p0, double p1, double q0, double q1) { return p0 * std::log(p0 / q0) + p1 * std::log(p1 / q1); }

}  // namespace

TEST_CASE("an exact cache has no error", "[fidelity]") {
  const HeadTensor q = gaussian(4, 20, 8, 1), k = gaussian(2, 20, 8, 2), v = gaussian(2, 20, 8, 3);
  const auto f = layer_fidelity(q, k, v, k, v, 5);
  REQUIRE(f.size() == 2);
  for (const Fidelity& x : f) {
    CHECK(x.k_rel_mse == 0);
    CHECK(x.v_rel_mse == 0);
    CHECK(x.logit_rel_mse == 0);
    CHECK(x.kl == 0);
    CHECK(x.out_rel_err == 0);
    CHECK(x.top8_overlap == 1);
  }
  CHECK_THROWS_AS(layer_fidelity(q, k, v, k, v, 0), Error);
}

TEST_CASE("two keys by hand", "[fidelity]") {
  // d = 1 (scale 1/sqrt(1) = 1), T = 2, one query at the last position seeing both keys.
  const float ln3f = static_cast<float>(std::log(3.0));
  const double ln3 = ln3f, e = std::exp(ln3);  // e == 3 up to the float rounding of ln 3
  const double p0 = 1 / (1 + e), p1 = e / (1 + e);  // 1/4, 3/4
  REQUIRE(p0 == Approx(0.25));
  const HeadTensor q = tensor(1, 2, 1, {0.0f, 1.0f});
  const HeadTensor k = tensor(1, 2, 1, {0.0f, ln3f}), k_hat = tensor(1, 2, 1, {0.0f, 0.0f});
  const HeadTensor v = tensor(1, 2, 1, {1.0f, 2.0f});
  const auto f = layer_fidelity(q, k, v, k_hat, v, 1);
  REQUIRE(f.size() == 1);
  CHECK(f[0].k_rel_mse == 1.0);  // all key energy lost
  CHECK(f[0].v_rel_mse == 0.0);
  CHECK(f[0].logit_rel_mse == Approx(1.0).epsilon(1e-12));  // (ln3)^2 / (ln3)^2
  // KL(p || p^) with p = {1/4, 3/4}, p^ = {1/2, 1/2}: 0.25 ln 0.5 + 0.75 ln 1.5 = 0.1308...
  CHECK(f[0].kl == Approx(kl2(p0, p1, 0.5, 0.5)).epsilon(1e-12));
  CHECK(f[0].kl == Approx(0.25 * std::log(0.5) + 0.75 * std::log(1.5)).epsilon(1e-6));
  // o = 1/4 + 3/2 = 1.75, o^ = 1.5: 0.25 / 1.75 = 1/7
  CHECK(f[0].out_rel_err == Approx(std::abs(p0 + 2 * p1 - 1.5) / (p0 + 2 * p1)).epsilon(1e-12));
  CHECK(f[0].out_rel_err == Approx(1.0 / 7).epsilon(1e-6));
  CHECK(f[0].top8_overlap == 1.0);  // fewer than 8 keys: both sets hold both keys
}

TEST_CASE("queries only see keys up to their position", "[fidelity]") {
  // T = 3, N = 2: the first query (position 1) sees tokens 0..1, the second (position 2) all three.
  const HeadTensor q = tensor(1, 3, 1, {5.0f, 1.0f, 1.0f});  // position 0 is not a query
  SECTION("a changed value at the last token only hurts the last query") {
    const HeadTensor k = tensor(1, 3, 1, {0.0f, 0.0f, 0.0f});  // uniform attention
    const HeadTensor v = tensor(1, 3, 1, {1.0f, 2.0f, 3.0f}), v_hat = tensor(1, 3, 1, {1.0f, 2.0f, 6.0f});
    const auto f = layer_fidelity(q, k, v, k, v_hat, 2);
    // query 1: o = o^ = 1.5 -> 0; query 2: o = 2, o^ = 3 -> 0.5; mean 0.25
    CHECK(f[0].out_rel_err == Approx(0.25).epsilon(1e-12));
    CHECK(f[0].v_rel_mse == Approx(9.0 / 14).epsilon(1e-12));
    CHECK(f[0].kl == 0);
    CHECK(f[0].top8_overlap == 1);
    // With one query (the last) the mean is the last query's 0.5.
    CHECK(layer_fidelity(q, k, v, k, v_hat, 1)[0].out_rel_err == Approx(0.5).epsilon(1e-12));
  }
  SECTION("a changed key at the last token: logits and KL count only the visible keys") {
    const float ln2f = static_cast<float>(std::log(2.0));
    const HeadTensor k = tensor(1, 3, 1, {1.0f, 1.0f, 1.0f});
    const HeadTensor k_hat = tensor(1, 3, 1, {1.0f, 1.0f, 1.0f + ln2f});
    const HeadTensor v = tensor(1, 3, 1, {1.0f, 2.0f, 3.0f});
    const auto f = layer_fidelity(q, k, v, k_hat, v, 2);
    // Logits: query 1 sees {1, 1}, query 2 sees {1, 1, 1} -> sum l^2 = 5; only query 2's last logit moves.
    const double dl = double(1.0f + ln2f) - 1.0;
    CHECK(f[0].logit_rel_mse == Approx(dl * dl / 5).epsilon(1e-9));
    // Query 2: p = 1/3 each, p^ = {1/4, 1/4, 1/2} (up to float ln 2); query 1: no change.
    const double w = std::exp(dl), s = 2 + w;
    const double kl_last = 2.0 / 3 * std::log((1.0 / 3) / (1 / s)) + 1.0 / 3 * std::log((1.0 / 3) / (w / s));
    CHECK(kl_last == Approx(2.0 / 3 * std::log(4.0 / 3) + 1.0 / 3 * std::log(2.0 / 3)).epsilon(1e-6));
    CHECK(f[0].kl == Approx(kl_last / 2).epsilon(1e-9));
    // o = 2, o^ = 1/4 + 2/4 + 3/2 = 2.25 -> 0.125 for query 2, 0 for query 1
    CHECK(f[0].out_rel_err == Approx((std::abs((1 + 2 + 3 * w) / s - 2) / 2) / 2).epsilon(1e-9));
    CHECK(f[0].out_rel_err == Approx(0.0625).epsilon(1e-6));
  }
}

TEST_CASE("GQA: a KV head's result averages its query heads", "[fidelity]") {
  // 2 KV heads, 4 query heads (group 2): query heads 0, 1 use KV head 0; 2, 3 use KV head 1.
  // d = 1, T = 2, one query at position 1. KV head 0: K = {0, ln3}, K^ = {0, 0}, V = {1, 2}.
  // Query head 0 (q = 1): p = {1/4, 3/4}; query head 1 (q = 2): logits {0, 2 ln3}, p = {1/10, 9/10};
  // p^ = {1/2, 1/2} for both. KV head 1 is exact.
  const float ln3f = static_cast<float>(std::log(3.0));
  const double ln3 = ln3f;
  const HeadTensor q = tensor(4, 2, 1, {0, 1, 0, 2, 0, 1, 0, 2});
  const HeadTensor k = tensor(2, 2, 1, {0, ln3f, 0, ln3f}), k_hat = tensor(2, 2, 1, {0, 0, 0, ln3f});
  const HeadTensor v = tensor(2, 2, 1, {1, 2, 1, 2});
  const auto f = layer_fidelity(q, k, v, k_hat, v, 1);
  REQUIRE(f.size() == 2);
  const double a1 = 1 / (1 + std::exp(ln3)), b1 = 1 - a1;          // 1/4, 3/4
  const double a2 = 1 / (1 + std::exp(2 * ln3)), b2 = 1 - a2;      // 1/10, 9/10
  const double o1 = a1 + 2 * b1, o2 = a2 + 2 * b2;                 // 1.75, 1.9; o^ = 1.5
  CHECK(f[0].kl == Approx((kl2(a1, b1, 0.5, 0.5) + kl2(a2, b2, 0.5, 0.5)) / 2).epsilon(1e-12));
  CHECK(f[0].kl == Approx((0.25 * std::log(0.5) + 0.75 * std::log(1.5) + 0.1 * std::log(0.2) + 0.9 * std::log(1.8)) / 2)
                       .epsilon(1e-6));
  CHECK(f[0].out_rel_err == Approx(((o1 - 1.5) / o1 + (o2 - 1.5) / o2) / 2).epsilon(1e-12));
  CHECK(f[0].out_rel_err == Approx((1.0 / 7 + 0.4 / 1.9) / 2).epsilon(1e-6));
  // Logits pool over both query heads: (ln3^2 + 4 ln3^2) / (ln3^2 + 4 ln3^2) = 1.
  CHECK(f[0].logit_rel_mse == Approx(1.0).epsilon(1e-12));
  CHECK(f[0].k_rel_mse == 1.0);
  CHECK(f[0].top8_overlap == 1.0);
  // KV head 1 is exact, whatever its query heads.
  CHECK(f[1].kl == 0);
  CHECK(f[1].out_rel_err == 0);
  CHECK(f[1].logit_rel_mse == 0);
  CHECK(f[1].k_rel_mse == 0);
}

TEST_CASE("top-8 overlap counts the eight most attended keys", "[fidelity]") {
  // d = 1, T = 10, one query (q = 1) seeing all ten keys. K has distinct logits 0..9: top 8 are keys
  // 2..9. K^ swaps keys 9 and 0: top 8 of p^ are keys 1..8, sharing 7 of 8.
  std::vector<float> kd(10), kh(10), qd(10, 1.0f), vd(10, 1.0f);
  for (int j = 0; j < 10; ++j) kd[j] = kh[j] = static_cast<float>(j);
  kh[0] = 9;
  kh[9] = 0;
  const auto f = layer_fidelity(tensor(1, 10, 1, qd), tensor(1, 10, 1, kd), tensor(1, 10, 1, vd), tensor(1, 10, 1, kh),
                                tensor(1, 10, 1, vd), 1);
  CHECK(f[0].top8_overlap == Approx(7.0 / 8));
  CHECK(f[0].out_rel_err == Approx(0.0).margin(1e-12));  // V constant: the output does not move
  CHECK(f[0].kl > 0);
}

TEST_CASE("undefined metrics are NaN, not 0 or inf", "[fidelity][undefined]") {
  const HeadTensor q = gaussian(2, 12, 4, 7), zero = tensor(1, 12, 4, std::vector<float>(48, 0.0f));
  const HeadTensor k = gaussian(1, 12, 4, 8), v = gaussian(1, 12, 4, 9);
  SECTION("all-zero keys and values: relative errors are 0/0") {
    const auto f = layer_fidelity(q, zero, zero, zero, zero, 5);
    REQUIRE(f.size() == 1);
    CHECK(std::isnan(f[0].k_rel_mse));
    CHECK(std::isnan(f[0].v_rel_mse));
    CHECK(std::isnan(f[0].logit_rel_mse));   // every logit is 0
    CHECK(std::isnan(f[0].out_rel_err));     // every output is 0
    CHECK(f[0].kl == 0);                     // uniform against uniform: defined
    CHECK(f[0].top8_overlap == 1);
  }
  SECTION("a zero reference with a non-zero approximation is undefined too") {
    const auto f = layer_fidelity(q, zero, zero, k, v, 5);
    CHECK(std::isnan(f[0].k_rel_mse));
    CHECK(std::isnan(f[0].v_rel_mse));
    CHECK(std::isnan(f[0].logit_rel_mse));
    CHECK(std::isnan(f[0].out_rel_err));
  }
  SECTION("zero values with real keys: only the value and output errors are undefined") {
    const auto f = layer_fidelity(q, k, zero, k, zero, 5);
    CHECK(f[0].k_rel_mse == 0);
    CHECK(f[0].logit_rel_mse == 0);
    CHECK(std::isnan(f[0].v_rel_mse));
    CHECK(std::isnan(f[0].out_rel_err));
  }
  SECTION("queries whose output is zero are left out of the output error's mean") {
    // Values zero on tokens 0..9, one on 10..11: the query at position 9 (of the last 3) sees only zero
    // values; the queries at 10 and 11 have an output and an error of 1 (v^ = 0).
    std::vector<float> vv(48, 0.0f);
    for (int t = 10; t < 12; ++t)
      for (int c = 0; c < 4; ++c) vv[t * 4 + c] = 1.0f;
    const HeadTensor v2 = tensor(1, 12, 4, vv);
    const auto f = layer_fidelity(q, k, v2, k, zero, 3);
    CHECK(f[0].out_rel_err == Approx(1.0));
  }
  SECTION("more queries than tokens evaluates every position") {
    const auto a = layer_fidelity(q, k, v, k, zero, 12), b = layer_fidelity(q, k, v, k, zero, 1000);
    CHECK(a[0].out_rel_err == b[0].out_rel_err);
    CHECK(a[0].kl == b[0].kl);
  }
}
