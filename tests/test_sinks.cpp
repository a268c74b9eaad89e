// test_sinks.cpp: attention sinks per layer (lib/src/04_stats/sinks.cpp). A synthetic dump with a planted sink
// (position 0 with a tiny key and value, every query aligned with its key so that its logit is ln 3 or ln 7
// while every other logit is 0) gives exact numbers: attention on position 0 for query t is E / (E + t); and
// the real SmolLM2-135M-Instruct on Revelation (skipped where its GGUF is absent) shows the sinks of
// ../shared/data/README.md: layers 12-29 put 24-60% of the last 256 queries' attention on the first token.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "oscar/01_core/error.h"
#include "oscar/02_model/formats/checkpoint.h"
#include "oscar/03_dump/dump.h"
#include "oscar/03_dump/dump_passage.h"
#include "oscar/04_stats/analyze.h"
#include "oscar/04_stats/sinks.h"
#include "oscar/13_report/tni_report.h"
#include "skip.h"
#include "test_data.h"

using namespace oscar;
using Catch::Contains;

namespace {

constexpr int T = 8, HD = 4, NH = 4, KV = 2;  // query heads 0, 1 read KV head 0; heads 2, 3 read KV head 1

// Element (h, t, c) of the planted layer. KV head 0: k_0 = (0.5,0,0,0), k_t = (0,2,0,0); v_0 = (0.1,0,0,0),
// v_t = (0,0,0,4). KV head 1: k_0 = (0.25,0,0,0), k_t = (0,0,2,0); v_0 = (0,0.2,0,0), v_t = (0,0,0,4).
// Queries of KV head 0: (4 ln 3, 0, 0, 0) -> logit 0.5 * 4 ln 3 * 0.5 = ln 3 on position 0, 0 elsewhere;
// of KV head 1: (8 ln 7, 0, 0, 0) -> ln 7. So the key ratios are 0.25 and 0.125, the value ratios 0.025, 0.05.
struct Planted {
  HeadTensor q{NH, T, HD, std::vector<float>(NH * T * HD, 0.f)};
  HeadTensor k{KV, T, HD, std::vector<float>(KV * T * HD, 0.f)};
  HeadTensor v{KV, T, HD, std::vector<float>(KV * T * HD, 0.f)};
  Planted() {
    auto at = [](HeadTensor& x, int h, int t, int c) -> float& { return x.data[(static_cast<size_t>(h) * T + t) * HD + c]; };
    for (int t = 0; t < T; ++t) {
      at(k, 0, t, t == 0 ? 0 : 1) = t == 0 ? 0.5f : 2.f;
      at(k, 1, t, t == 0 ? 0 : 2) = t == 0 ? 0.25f : 2.f;
      at(v, 0, t, t == 0 ? 0 : 3) = t == 0 ? 0.1f : 4.f;
      at(v, 1, t, t == 0 ? 1 : 3) = t == 0 ? 0.2f : 4.f;
      for (int h = 0; h < NH; ++h) at(q, h, t, 0) = h < 2 ? 4.f * std::log(3.f) : 8.f * std::log(7.f);
    }
  }
};

// Mean over queries t = T - n .. T - 1 of E / (E + t): the weight on position 0 when its logit is ln E and
// the t other visible positions have logit 0.
double expected_mass(double E, int n) {
  double s = 0;
  for (int t = T - n; t < T; ++t) s += E / (E + t);
  return s / n;
}

}  // namespace

TEST_CASE("a planted sink: exact norm ratios and attention mass", "[sinks]") {
  const Planted p;
  const LayerSinks s = layer_sinks(3, p.q, p.k, p.v, 0.5);
  CHECK(s.layer == 3);
  CHECK(s.queries == T);  // min(256, T)
  CHECK(s.key_ratio_mean == Approx((0.25 + 0.125) / 2));
  CHECK(s.key_ratio_min == Approx(0.125));
  CHECK(s.value_ratio_mean == Approx((0.025 + 0.05) / 2).epsilon(1e-6));
  CHECK(s.value_ratio_min == Approx(0.025).epsilon(1e-6));
  // By hand for E = 3 over t = 0..7: (1 + 3/4 + 3/5 + 3/6 + 3/7 + 3/8 + 3/9 + 3/10) / 8 = 0.535774...
  CHECK(expected_mass(3, 8) == Approx((1 + 3. / 4 + 3. / 5 + 3. / 6 + 3. / 7 + 3. / 8 + 3. / 9 + 3. / 10) / 8));
  CHECK(s.attention_mean == Approx((expected_mass(3, 8) + expected_mass(7, 8)) / 2).epsilon(1e-6));
  CHECK(s.attention_max_head == Approx(expected_mass(7, 8)).epsilon(1e-6));
  CHECK(s.attention_max_head_index == 2);
  // only the last 3 queries
  const LayerSinks last3 = layer_sinks(3, p.q, p.k, p.v, 0.5, 3);
  CHECK(last3.queries == 3);
  CHECK(last3.attention_mean == Approx((expected_mass(3, 3) + expected_mass(7, 3)) / 2).epsilon(1e-6));
  // a logit scale of 0 spreads attention evenly: 1 / (t + 1)
  double even = 0;
  for (int t = 0; t < T; ++t) even += 1.0 / (t + 1);
  CHECK(layer_sinks(0, p.q, p.k, p.v, 0.0).attention_mean == Approx(even / T));
}

TEST_CASE("sink statistics refuse shapes that do not fit", "[sinks]") {
  Planted p;
  HeadTensor q3 = p.q;
  q3.heads = 3;  // 3 query heads over 2 KV heads
  q3.data.resize(3 * T * HD);
  CHECK_THROWS_WITH(layer_sinks(5, q3, p.k, p.v, 0.5), Contains("layer 5") && Contains("do not fit together"));
  CHECK_THROWS_WITH(layer_sinks(5, HeadTensor{}, HeadTensor{}, HeadTensor{}, 0.5), Contains("no tokens or heads"));
  // an all-zero value head has an undefined ratio: left out of the mean and min, rendered as undefined
  std::fill(p.v.data.begin(), p.v.data.end(), 0.f);
  const LayerSinks s = layer_sinks(0, p.q, p.k, p.v, 0.5);
  CHECK(std::isnan(s.value_ratio_mean));
  CHECK(sinks_json({s})[0]["value_ratio_mean"].is_null());
  CHECK_THAT(sinks_csv({s}), Contains(",0.1875,0.125,,,0,8\n"));
}

TEST_CASE("oscar-analyze's report finds the planted sink in a dump file", "[sinks]") {
  const Planted p;
  const std::string path = (test::scratch() / "planted_sink.h5").string();
  DumpInfo info;
  info.model_name = "planted-sink";
  info.checkpoint_sha256 = std::string(64, '0');
  info.n_layers = 2, info.n_heads = NH, info.n_kv_heads = KV, info.head_dim = HD, info.token_count = T;
  info.text_source = "synthetic";
  {
    DumpWriter w(path, info, std::vector<int>(T, 7), {});
    // rows are tokens, columns head-major
    auto rows = [](const HeadTensor& x) {
      MatrixRM m(T, x.heads * HD);
      for (int h = 0; h < x.heads; ++h)
        for (int t = 0; t < T; ++t)
          for (int c = 0; c < HD; ++c) m(t, h * HD + c) = x.data[(static_cast<size_t>(h) * T + t) * HD + c];
      return m;
    };
    const MatrixRM q = rows(p.q), k = rows(p.k), v = rows(p.v);
    for (int l = 0; l < 2; ++l) w.write_layer(LayerQKV{l, 0, q, k, q, k, v});
    w.finish();
  }
  const DumpReader reader(path);
  const TniReport r = analyze_dump(reader, AnalyzeOptions{3.5, false});
  REQUIRE(r.sinks.size() == 2);
  const double mass = (expected_mass(3, T) + expected_mass(7, T)) / 2;  // the analyzer scales logits by 1/sqrt(4)
  for (const LayerSinks& s : r.sinks) {
    CHECK(s.scaling == Approx(0.5));
    CHECK(s.attention_mean == Approx(mass).epsilon(1e-6));
    CHECK(s.key_ratio_min == Approx(0.125));
  }
  // the table section, CSV and JSON carry it
  const std::string table = (test::scratch() / "planted_table.txt").string();
  std::FILE* f = std::fopen(table.c_str(), "w");
  print_tni_table(r, f, 3);
  std::fclose(f);
  std::stringstream ss;
  ss << std::ifstream(table).rdbuf();
  CHECK_THAT(ss.str(), Contains("sink: the attention on position 0") &&
                           Contains(fmt::format(" |  {:.3f} {:.3f} h2  |   0.125   0.025\n", mass, expected_mass(7, T))));
  CHECK_THAT(sinks_csv(r.sinks), Contains(fmt::format("1,8,0.5,{:.6g},{:.6g},2,0.1875,0.125,0.0375,0.025,0,8\n", mass, expected_mass(7, T))));
  const auto j = sinks_json(r.sinks);
  CHECK(j[1]["attention_mean"].get<double>() == Approx(mass).epsilon(1e-6));
}

TEST_CASE("SmolLM2 on Revelation: the first token is an attention sink in layers 12-29", "[sinks][optional-data][slow]") {
  const std::string gguf = test::smollm2_gguf();
  OSCAR_SKIP_UNLESS_EXISTS(gguf, test::smollm2_model().fetch);
  const std::string out = (test::scratch() / "smollm2_revelation_2048.h5").string();
  DumpRequest req;
  req.model = gguf;
  req.text = test::kjv_text();
  req.offset = -404;
  req.tokens = 2048;
  req.out = out;
  req.dtype = "float16";
  req.progress = false;
  dump_passage(req);
  const TniReport r = analyze_dump(DumpReader(out), AnalyzeOptions{3.5, false});
  REQUIRE(r.sinks.size() == 30);
  // ../shared/data/README.md (Hugging Face transformers, float32, eager attention): layers 12-29
  const double facts[18] = {0.395, 0.375, 0.400, 0.384, 0.243, 0.391, 0.516, 0.380, 0.390,
                            0.406, 0.445, 0.489, 0.418, 0.583, 0.477, 0.458, 0.400, 0.303};
  for (int l = 0; l < 30; ++l) {
    const LayerSinks& s = r.sinks[static_cast<size_t>(l)];
    INFO("layer " << l);
    CHECK(s.queries == 256);
    if (l < 12) {
      CHECK(s.attention_mean <= 0.046 + 0.002);  // "layers 0-11 at most 0.046"
    } else {
      CHECK(s.attention_mean == Approx(facts[l - 12]).margin(0.005));  // float16 storage: within 0.003 seen
      CHECK(s.attention_mean >= 0.24);
      CHECK(s.attention_mean <= 0.60);
    }
    if (l >= 12 && l <= 27) {  // "about 0.15-0.36x the median key norm, value norm about 0.08-0.45x"
      CHECK(s.key_ratio_min >= 0.14);
      CHECK(s.key_ratio_mean <= 0.36);
      CHECK(s.value_ratio_min >= 0.07);
      CHECK(s.value_ratio_mean <= 0.45);
    }
  }
}

TEST_CASE("sink statistics follow the layer's attention: sliding window and learned sink logits", "[sinks]") {
  const Planted p;
  LayerAttention a;
  a.scaling = 0.0;  // every visible logit 0: the mass on position 0 is 1 / (visible keys [+ e^sink])
  a.sliding_window = 4;
  double expect = 0;
  for (int t = 0; t < T; ++t) expect += t < 4 ? 1.0 / (t + 1) : 0.0;  // beyond the window position 0 is unseen
  // The mean is over the 4 queries whose window holds position 0; the others do not count as zeros.
  LayerSinks w = layer_sinks(0, p.q, p.k, p.v, a);
  CHECK(w.attention_mean == Approx(expect / 4));
  CHECK(w.queries_seeing_0 == 4);
  CHECK(!w.out_of_window());
  // Only the last 3 queries averaged, none of which sees position 0: undefined, shown as out of window.
  w = layer_sinks(0, p.q, p.k, p.v, a, 3);
  CHECK(w.out_of_window());
  CHECK(std::isnan(w.attention_mean));
  CHECK_THAT(sinks_csv({w}), Contains(",,,"));  // attention_mean and max head empty, never 0
  a.sliding_window = 0;
  a.sinks.assign(static_cast<size_t>(p.q.heads), static_cast<float>(std::log(2.0)));  // e^sink = 2 in each denominator
  expect = 0;
  for (int t = 0; t < T; ++t) expect += 1.0 / (t + 1 + 2);
  CHECK(layer_sinks(0, p.q, p.k, p.v, a).attention_mean == Approx(expect / T).epsilon(1e-6));
  a.sinks.resize(1);
  CHECK_THROWS_WITH(layer_sinks(0, p.q, p.k, p.v, a), Contains("sink logits"));
}
