// test_fidelity.cpp: attention-fidelity metrics on hand-made caches with hand-computed values:
// identity, a two-key softmax, causal visibility of the queries, GQA averaging; and the v2 attention
// description (scaling, sliding window, soft-cap, sinks) against a float64 brute force.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "oscar/01_core/error.h"
#include "oscar/08_metrics/fidelity.h"

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

// Plain causal attention with scaling 1/sqrt(d), as these hand-computed cases assume.
std::vector<Fidelity> fid(const HeadTensor& q, const HeadTensor& k, const HeadTensor& v, const HeadTensor& k_hat,
                          const HeadTensor& v_hat, int n_queries) {
  return layer_fidelity(q, k, v, k_hat, v_hat, n_queries, LayerAttention::standard(k.head_dim));
}

// KL(p || p^) of two two-point distributions.
double kl2(double p0, double p1, double q0, double q1) { return p0 * std::log(p0 / q0) + p1 * std::log(p1 / q1); }

}  // namespace

TEST_CASE("an exact cache has no error", "[fidelity]") {
  const HeadTensor q = gaussian(4, 20, 8, 1), k = gaussian(2, 20, 8, 2), v = gaussian(2, 20, 8, 3);
  const auto f = fid(q, k, v, k, v, 5);
  REQUIRE(f.size() == 2);
  for (const Fidelity& x : f) {
    CHECK(x.k_rel_mse == 0);
    CHECK(x.v_rel_mse == 0);
    CHECK(x.logit_rel_mse == 0);
    CHECK(x.kl == 0);
    CHECK(x.out_rel_err == 0);
    CHECK(x.top8_overlap == 1);
  }
  CHECK_THROWS_AS(fid(q, k, v, k, v, 0), Error);
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
  const auto f = fid(q, k, v, k_hat, v, 1);
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
    const auto f = fid(q, k, v, k, v_hat, 2);
    // query 1: o = o^ = 1.5 -> 0; query 2: o = 2, o^ = 3 -> 0.5; mean 0.25
    CHECK(f[0].out_rel_err == Approx(0.25).epsilon(1e-12));
    CHECK(f[0].v_rel_mse == Approx(9.0 / 14).epsilon(1e-12));
    CHECK(f[0].kl == 0);
    CHECK(f[0].top8_overlap == 1);
    // With one query (the last) the mean is the last query's 0.5.
    CHECK(fid(q, k, v, k, v_hat, 1)[0].out_rel_err == Approx(0.5).epsilon(1e-12));
  }
  SECTION("a changed key at the last token: logits and KL count only the visible keys") {
    const float ln2f = static_cast<float>(std::log(2.0));
    const HeadTensor k = tensor(1, 3, 1, {1.0f, 1.0f, 1.0f});
    const HeadTensor k_hat = tensor(1, 3, 1, {1.0f, 1.0f, 1.0f + ln2f});
    const HeadTensor v = tensor(1, 3, 1, {1.0f, 2.0f, 3.0f});
    const auto f = fid(q, k, v, k_hat, v, 2);
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
  const auto f = fid(q, k, v, k_hat, v, 1);
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
  const auto f = fid(tensor(1, 10, 1, qd), tensor(1, 10, 1, kd), tensor(1, 10, 1, vd), tensor(1, 10, 1, kh),
                                tensor(1, 10, 1, vd), 1);
  CHECK(f[0].top8_overlap == Approx(7.0 / 8));
  CHECK(f[0].out_rel_err == Approx(0.0).margin(1e-12));  // V constant: the output does not move
  CHECK(f[0].kl > 0);
}

TEST_CASE("undefined metrics are NaN, not 0 or inf", "[fidelity][undefined]") {
  const HeadTensor q = gaussian(2, 12, 4, 7), zero = tensor(1, 12, 4, std::vector<float>(48, 0.0f));
  const HeadTensor k = gaussian(1, 12, 4, 8), v = gaussian(1, 12, 4, 9);
  SECTION("all-zero keys and values: relative errors are 0/0") {
    const auto f = fid(q, zero, zero, zero, zero, 5);
    REQUIRE(f.size() == 1);
    CHECK(std::isnan(f[0].k_rel_mse));
    CHECK(std::isnan(f[0].v_rel_mse));
    CHECK(std::isnan(f[0].logit_rel_mse));   // every logit is 0
    CHECK(std::isnan(f[0].out_rel_err));     // every output is 0
    CHECK(f[0].kl == 0);                     // uniform against uniform: defined
    CHECK(f[0].top8_overlap == 1);
  }
  SECTION("a zero reference with a non-zero approximation is undefined too") {
    const auto f = fid(q, zero, zero, k, v, 5);
    CHECK(std::isnan(f[0].k_rel_mse));
    CHECK(std::isnan(f[0].v_rel_mse));
    CHECK(std::isnan(f[0].logit_rel_mse));
    CHECK(std::isnan(f[0].out_rel_err));
  }
  SECTION("zero values with real keys: only the value and output errors are undefined") {
    const auto f = fid(q, k, zero, k, zero, 5);
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
    const auto f = fid(q, k, v2, k, zero, 3);
    CHECK(f[0].out_rel_err == Approx(1.0));
  }
  SECTION("more queries than tokens evaluates every position") {
    const auto a = fid(q, k, v, k, zero, 12), b = fid(q, k, v, k, zero, 1000);
    CHECK(a[0].out_rel_err == b[0].out_rel_err);
    CHECK(a[0].kl == b[0].kl);
  }
}

namespace {

// The reference attention of dump format v2, written out independently in float64, term by term: which keys
// are visible (causal, sliding window), logits (scaling, soft-cap), the softmax with the sink's term in its
// denominator. Returns {logit_rel_mse, kl, out_rel_err} of KV head 0's query heads, as layer_fidelity defines them.
struct Brute {
  double logit = 0, kl = 0, out = 0;
};
Brute brute(const HeadTensor& q, const HeadTensor& k, const HeadTensor& v, const HeadTensor& kh, const HeadTensor& vh, int n,
            double scaling, long window, double softcap, const std::vector<float>& sinks) {
  const int T = k.tokens, d = k.head_dim, group = q.heads / k.heads;
  const auto at = [](const HeadTensor& x, int h, int t, int c) { return double(x.data[(size_t(h) * x.tokens + t) * x.head_dim + c]); };
  double lnum = 0, lden = 0, kl = 0, out = 0;
  int count = 0;
  for (int g = 0; g < group; ++g) {
    for (int i = T - n; i < T; ++i) {
      std::vector<double> l, lh;
      std::vector<int> keys;
      for (int j = 0; j <= i; ++j) {
        if (window > 0 && i - j >= window) continue;
        double a = 0, b = 0;
        for (int c = 0; c < d; ++c) a += at(q, g, i, c) * at(k, 0, j, c), b += at(q, g, i, c) * at(kh, 0, j, c);
        a *= scaling;
        b *= scaling;
        if (softcap > 0) a = softcap * std::tanh(a / softcap), b = softcap * std::tanh(b / softcap);
        l.push_back(a);
        lh.push_back(b);
        keys.push_back(j);
        lnum += (a - b) * (a - b);
        lden += a * a;
      }
      double z = sinks.empty() ? 0 : std::exp(double(sinks[g])), zh = z;
      for (size_t j = 0; j < l.size(); ++j) z += std::exp(l[j]), zh += std::exp(lh[j]);
      double kli = 0;
      if (!sinks.empty()) {
        const double ps = std::exp(double(sinks[g])) / z, phs = std::exp(double(sinks[g])) / zh;
        kli += ps * std::log(ps / phs);
      }
      std::vector<double> o(d, 0.0), oh(d, 0.0);
      for (size_t j = 0; j < l.size(); ++j) {
        const double p = std::exp(l[j]) / z, ph = std::exp(lh[j]) / zh;
        kli += p * std::log(p / ph);
        for (int c = 0; c < d; ++c) o[c] += p * at(v, 0, keys[j], c), oh[c] += ph * at(vh, 0, keys[j], c);
      }
      double e = 0, on = 0;
      for (int c = 0; c < d; ++c) e += (o[c] - oh[c]) * (o[c] - oh[c]), on += o[c] * o[c];
      kl += kli;
      out += std::sqrt(e / on);
      ++count;
    }
  }
  return {lnum / lden, kl / count, out / count};
}

}  // namespace

TEST_CASE("fidelity computes the dump's attention: scaling, sliding window, soft-cap and sinks", "[fidelity][v2]") {
  // Two query heads over one KV head, d = 6, T = 24, the last 10 positions as queries; a perturbed cache.
  const int T = 24, d = 6, N = 10;
  const HeadTensor q = gaussian(2, T, d, 11), v = gaussian(1, T, d, 13);
  HeadTensor k = gaussian(1, T, d, 12), kh = gaussian(1, T, d, 14), vh = gaussian(1, T, d, 15);
  for (size_t i = 0; i < kh.data.size(); ++i) kh.data[i] = k.data[i] + 0.3f * kh.data[i];
  for (size_t i = 0; i < vh.data.size(); ++i) vh.data[i] = v.data[i] + 0.3f * vh.data[i];
  for (float& x : k.data) x *= 2.0f;  // large logits, so that the soft-cap bites
  for (float& x : kh.data) x *= 2.0f;
  LayerAttention att = LayerAttention::standard(d);
  att.scaling = 0.9;  // not 1/sqrt(6) = 0.408
  att.sliding_window = 7;
  att.softcap = 2.5;
  att.sinks = {1.5f, -0.5f};
  const Fidelity f = layer_fidelity(q, k, v, kh, vh, N, att)[0];
  const Brute b = brute(q, k, v, kh, vh, N, att.scaling, att.sliding_window, att.softcap, att.sinks);
  CHECK(f.logit_rel_mse == Approx(b.logit).epsilon(1e-10));
  CHECK(f.kl == Approx(b.kl).epsilon(1e-10));
  CHECK(f.out_rel_err == Approx(b.out).epsilon(1e-10));
  // Each term matters: leaving any one out of the reference moves the result well beyond that tolerance.
  const auto differs = [&](const Brute& x) {
    return std::abs(x.kl - f.kl) > 1e-3 * f.kl && std::abs(x.out - f.out_rel_err) > 1e-4 * f.out_rel_err;
  };
  CHECK(differs(brute(q, k, v, kh, vh, N, 1.0 / std::sqrt(double(d)), att.sliding_window, att.softcap, att.sinks)));
  CHECK(differs(brute(q, k, v, kh, vh, N, att.scaling, 0, att.softcap, att.sinks)));
  CHECK(differs(brute(q, k, v, kh, vh, N, att.scaling, att.sliding_window, 0, att.sinks)));
  CHECK(differs(brute(q, k, v, kh, vh, N, att.scaling, att.sliding_window, att.softcap, {})));
  // And the standard description reproduces plain 1/sqrt(d) causal attention.
  const Fidelity s = layer_fidelity(q, k, v, kh, vh, N, LayerAttention::standard(d))[0];
  const Brute bs = brute(q, k, v, kh, vh, N, 1.0 / std::sqrt(double(d)), 0, 0, {});
  CHECK(s.kl == Approx(bs.kl).epsilon(1e-10));
  CHECK(s.out_rel_err == Approx(bs.out).epsilon(1e-10));
  // The logit error counts only visible keys: the window shrinks the set of (query, key) pairs.
  CHECK(s.logit_rel_mse != Approx(f.logit_rel_mse).epsilon(1e-6));
}
