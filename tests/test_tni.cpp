// test_tni.cpp: TNI statistics on hand-made fixtures with hand-computed values, and on a real dump.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "dump_fixture.h"
#include "oscar/13_report/tni_report.h"
#include "oscar/01_core/stats.h"
#include "oscar/04_stats/tni.h"

using namespace oscar;

TEST_CASE("quantiles interpolate linearly between ranks", "[tni]") {
  const std::vector<double> x{5, 1, 2, 10, 4};  // sorted 1 2 4 5 10
  CHECK(quantile(x, 0.0) == 1);
  CHECK(quantile(x, 0.5) == 4);
  CHECK(quantile(x, 0.25) == 2);
  CHECK(quantile(x, 0.9) == Approx(8.0));  // pos 3.6: 5 + 0.6*5
  CHECK(quantile(x, 1.0) == 10);
}

TEST_CASE("head statistics by hand", "[tni]") {
  // Five tokens of head_dim 2 with norms 5, 1, 2, 10, 4 (3-4-5 triangles and axis vectors).
  const float x[] = {3, 4, 1, 0, 0, -2, 6, -8, 0, 4};
  const HeadStats s = head_stats(x, 5, 2);
  CHECK(s.token_norms == std::vector<double>{5, 1, 2, 10, 4});
  CHECK(s.norms.min == 1);
  CHECK(s.norms.median == 4);
  CHECK(s.norms.max == 10);
  CHECK(s.norms.tni == 10);
  CHECK(s.norms.max_over_median == 2.5);
  CHECK(s.norms.min_over_median == 0.25);
  CHECK(s.norms.mean == Approx(4.4));
  // population std: sqrt((0.6^2 + 3.4^2 + 2.4^2 + 5.6^2 + 0.4^2) / 5) = sqrt(49.2 / 5) = sqrt(9.84)
  CHECK(s.norms.cv == Approx(std::sqrt(9.84) / 4.4));
  CHECK(s.channels.absmax == std::vector<double>{6, 8});
  CHECK(s.channels.median_absmax == 7);
  CHECK(s.channels.spread == Approx(8.0 / 7.0));
  CHECK(s.channels.argmax_channel == 1);
}

TEST_CASE("a sink token with a tiny norm is flagged as an outlier", "[tni]") {
  // 64 tokens with norms 10 * (1 + small spread), one at position 0 with norm 1.
  std::vector<float> x;
  for (int t = 0; t < 64; ++t) {
    const float n = t == 0 ? 1.0f : 10.0f * (1.0f + 0.01f * static_cast<float>(t % 7));
    x.push_back(n);
    x.push_back(0.0f);
  }
  const HeadStats s = head_stats(x.data(), 64, 2);
  REQUIRE(s.outliers.size() == 1);
  CHECK(s.outliers[0].position == 0);
  CHECK(s.outliers[0].ratio == Approx(1.0 / s.norms.median));
  CHECK(s.outliers[0].robust_z < -3.5);
}

TEST_CASE("analyze_dump covers every layer, KV head and tensor of a real dump", "[tni]") {
  const DumpReader r(test::small_dump("float32", 96));
  const TniReport rep = analyze_dump(r, AnalyzeOptions{3.5, false});
  REQUIRE(rep.rows.size() == 5 * 4 * 3);
  for (const TniRow& row : rep.rows) {
    CHECK(row.stats.token_norms.size() == 96);
    CHECK(row.stats.norms.tni >= 1.0);
  }
  // RoPE rotates pairs of channels: token norms before and after it agree.
  for (size_t i = 0; i < rep.rows.size(); i += 3) {
    REQUIRE(rep.rows[i].tensor == "k_pre");
    REQUIRE(rep.rows[i + 1].tensor == "k");
    for (int t = 0; t < 96; ++t)
      REQUIRE(rep.rows[i].stats.token_norms[t] == Approx(rep.rows[i + 1].stats.token_norms[t]).epsilon(1e-5));
  }
  // Statistics of one row recomputed from the raw head.
  const auto v = r.read_head(2, "v", 1);
  const HeadStats direct = head_stats(v.data(), 96, 8);
  const TniRow& row = rep.rows[(2 * 4 + 1) * 3 + 2];
  CHECK(row.tensor == "v");
  CHECK(row.stats.norms.tni == direct.norms.tni);
  CHECK(rep.token_label(0) == "<s>");
}

TEST_CASE("an all-zero head has undefined ratios and no outliers", "[tni][undefined]") {
  const std::vector<float> zero(32 * 4, 0.0f);
  const HeadStats s = head_stats(zero.data(), 32, 4);
  CHECK(std::isnan(s.norms.tni));
  CHECK(std::isnan(s.norms.max_over_median));
  CHECK(std::isnan(s.norms.min_over_median));
  CHECK(std::isnan(s.norms.cv));
  CHECK(std::isnan(s.channels.spread));
  CHECK(s.outliers.empty());
  CHECK(s.norms.max == 0);
}

TEST_CASE("one zero-norm token among others: infinite TNI, and the token is the outlier", "[tni][undefined]") {
  std::vector<float> x;
  for (int t = 0; t < 16; ++t) x.insert(x.end(), {t == 3 ? 0.0f : 1.0f + 0.01f * static_cast<float>(t % 3), 0.0f});
  const HeadStats s = head_stats(x.data(), 16, 2);
  CHECK(std::isinf(s.norms.tni));
  CHECK(s.norms.min_over_median == 0);
  REQUIRE(s.outliers.size() == 1);
  CHECK(s.outliers[0].position == 3);
}

TEST_CASE("the report counts undefined rows and renders them as undefined", "[tni][undefined]") {
  TniReport r;
  r.info.n_layers = 1;
  const std::vector<float> zero(8 * 2, 0.0f);
  const float ok[] = {1, 0, 2, 0, 1, 1, 0, 3, 1, 0, 2, 0, 1, 1, 0, 3};
  r.rows.push_back({0, 0, "k", head_stats(zero.data(), 8, 2)});
  r.rows.push_back({0, 1, "k", head_stats(ok, 8, 2)});
  r.rows.push_back({0, 0, "v", head_stats(zero.data(), 8, 2)});
  CHECK(r.undefined_tni() == 2);
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  print_tni_table(r, f, 3);
  std::fclose(f);
  const std::string out(buf, len);
  std::free(buf);
  CHECK(out.find("2 undefined (all-zero) rows left out") != std::string::npos);
  CHECK(out.find("|     3.00 ") != std::string::npos);             // K: the defined head's TNI (3 / 1)
  CHECK(out.find("| undefined undefined\n") != std::string::npos);  // V: no defined head
  CHECK(out.find("nan") == std::string::npos);
}
