// test_gguf_model_gemma3.cpp: the gemma3 forward pass (sandwich norms, q/k norms, GeGLU, sqrt(d)-scaled embeddings,
// five local layers of a 512-token window and RoPE base 10000 to every global one) on the real Gemma 3 270M Q4_K_M
// GGUF (data/fetch_gemma3.sh), against the facts of ../shared/data/README.md, which transformers 5.17 computed on the
// file's weights dequantized to float32: the mean next-token losses of Revelation and Genesis (2048 ids, BOS first;
// their sha256 checked) within 0.01 nats, the loss without the sliding window (which shows the window is applied),
// the first 11 greedy ids of "The capital of France is" exactly (a near-tie follows), and the attention-sink
// statistics of the global layers within 0.01. Prints the timings. When the file is absent the test prints
// "SKIPPED: Gemma 3 ..." and CTest reports it as skipped. The loss, sink and passkey cases (minutes on 2 cores) are
// [slow]: the full suite runs them, the quick and the sanitized suites leave them out.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include <omp.h>

#include "oscar/02_model/loaded_model.h"
#include "oscar/03_dump/layer_source.h"
#include "oscar/04_stats/sinks.h"
#include "oscar/11_eval/long_tasks.h"
#include "oscar/11_eval/task_eval.h"
#include "kjv_passage.h"
#include "test_data.h"

using namespace oscar;

namespace {

const LoadedModel& gemma3() {
  static const LoadedModel m = LoadedModel::load(oscar::test::gemma3_gguf(), "");
  return m;
}

// The shared README's passage: lines from `first` joined by '\n', BOS prepended, cut to 2048 ids.
std::vector<int> passage(size_t first, const std::string& sha) {
  std::vector<int> ids = gemma3().encode(oscar::test::kjv_passage(first, 40000));
  REQUIRE(ids.size() >= 2048);
  ids.resize(2048);
  REQUIRE(oscar::test::sha256_ids(ids) == sha);
  return ids;
}

// Checks the two losses against the README's; returns the 2048-token loss.
double check_losses(const char* name, size_t first, const std::string& sha, double loss1024, double loss2048) {
  INFO(name);
  const Model& m = gemma3().model();
  const auto ids = passage(first, sha);
  KvCache cache(m.config());
  const auto t0 = std::chrono::steady_clock::now();
  const MatrixRM logits = m.forward(ids, cache);
  const double secs = test::seconds_since(t0);
  const double l1 = mean_next_token_loss(logits.topRows(1024), std::span<const int>(ids).first(1024));
  const double l2 = mean_next_token_loss(logits, ids);
  std::printf("Gemma 3 270M %s: loss first 1024 %.5f (README %.4f), 2048 %.5f (README %.4f); 2048 tokens in one chunk: "
              "%.2f s on %d threads\n",
              name, l1, loss1024, l2, loss2048, secs, omp_get_max_threads());
  CHECK(std::abs(l1 - loss1024) < 0.01);
  CHECK(std::abs(l2 - loss2048) < 0.01);
  CHECK(secs < 60);
  return l2;
}

constexpr const char* kRevelationSha = "830ad748caf9bf80936dc9252a1bba72b9a311133b48f782fbdc2bb68f01b9b8";

}  // namespace

TEST_CASE("Gemma 3 GGUF: config from the file and the architecture table", "[gguf][model][real]") {
  if (!test::present(test::gemma3_model())) return;
  const ModelConfig& c = gemma3().config;
  CHECK(c.architecture == "gemma3");
  CHECK((c.n_layers == 18 && c.dim == 640 && c.hidden_dim == 2048 && c.n_heads == 4 && c.n_kv_heads == 1));
  CHECK(c.head_dim() == 256);
  CHECK(c.rope_convention == "half-split");
  CHECK(c.rope_theta == 1e6);
  CHECK(c.rope_theta_local == 10000.0);
  CHECK(c.scale() == 1.0 / 16);  // query_pre_attn_scalar 256
  CHECK(c.seq_len == 32768);
  CHECK(c.qk_norm);
  for (int l = 0; l < c.n_layers; ++l) {
    INFO("layer " << l);
    CHECK(c.window(l) == (l % 6 == 5 ? 0 : 512));  // layers 5, 11 and 17 are global
    CHECK(c.rope_theta_of(l) == (l % 6 == 5 ? 1e6 : 1e4));
  }
  CHECK(gemma3().model().facts().block().post_norms());
}

TEST_CASE("Gemma 3 GGUF: Revelation losses, with and without the sliding window", "[gguf][model][real][slow]") {
  if (!test::present(test::gemma3_model())) return;
  const double loss = check_losses("Revelation", 30698, kRevelationSha, 1.8289, 2.0432);
  // The README's 2048-token loss to five places, 2.04319, against 2.04330 / 2.04305 with a window of 511 / 513: the
  // window's edge is where transformers puts it (the query at i sees keys j with i - j < 512).
  CHECK(std::abs(loss - 2.04319) < 5e-5);
  // Without the window every layer reads the whole passage (the local layers keep their RoPE base): the README's
  // 4.7402. A forward pass that ignored the window would match this instead of 2.0432.
  ModelConfig c = gemma3().config;
  for (int& w : c.layer_windows)
    if (w > 0) w = c.seq_len;
  const Model full(c, gemma3().model().weights());
  const auto ids = passage(30698, kRevelationSha);
  KvCache cache(c);
  const double no_window = mean_next_token_loss(full.forward(ids, cache), ids);
  std::printf("Gemma 3 270M Revelation without the sliding window: %.4f (README 4.7402)\n", no_window);
  CHECK(std::abs(no_window - 4.7402) < 0.01);
}

TEST_CASE("Gemma 3 GGUF: Genesis losses", "[gguf][model][real][slow]") {
  if (!test::present(test::gemma3_model())) return;
  check_losses("Genesis", 0, "ff4367f72af8c9b5341b5e4c22c8cae71c4c951e6784436c8cffa78590a88462", 0.6362, 0.9051);
}

TEST_CASE("Gemma 3 GGUF: greedy continuation of 'The capital of France is'", "[gguf][model][real]") {
  if (!test::present(test::gemma3_model())) return;
  const std::vector<int> prompt = gemma3().encode("The capital of France is");
  REQUIRE(prompt == std::vector<int>{2, 818, 5279, 529, 7001, 563});
  // The README's 24 ids; the top-two gap is 0.0136 at step 12, so the first 11 are compared strictly.
  const std::vector<int> expect = {506, 5279, 529, 506, 2891, 529, 7001, 236761, 1030, 563, 506};
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int> got = generate_greedy(gemma3().model(), prompt, 24);
  std::printf("Gemma 3 270M: 24 greedy tokens in %.2f s\n", test::seconds_since(t0));
  REQUIRE(got.size() == 24);
  CHECK(std::vector<int>(got.begin(), got.begin() + 11) == expect);
}

TEST_CASE("Gemma 3 GGUF: attention sinks of the global layers", "[gguf][model][real][slow]") {
  if (!test::present(test::gemma3_model())) return;
  const Model& m = gemma3().model();
  PassageOrigin origin;
  origin.where = "Revelation";
  origin.token_ids = passage(30698, kRevelationSha);
  const ModelLayerSource src(m, origin, "kjv", {"q", "k", "v"});
  // README: the last 256 queries put 0.402, 0.343 and 0.423 of their attention on BOS in layers 5, 11, 17;
  // position 0's key norm over the median is 1.04 / 1.06 / 0.42, its value norm 0.44 / 0.16 / 0.26.
  const struct {
    int layer;
    double attention, key, value;
  } facts[] = {{5, 0.402, 1.04, 0.44}, {11, 0.343, 1.06, 0.16}, {17, 0.423, 0.42, 0.26}};
  for (const auto& f : facts) {
    INFO("layer " << f.layer);
    const LayerDump d = src.layer(f.layer, {"q", "k", "v"});
    const LayerSinks s = layer_sinks(f.layer, d.q, d.k, d.v, src.attention(f.layer));
    CHECK(std::abs(s.attention_mean - f.attention) < 0.01);
    CHECK(std::abs(s.key_ratio_mean - f.key) < 0.01);
    CHECK(std::abs(s.value_ratio_mean - f.value) < 0.01);
  }
  // The local layers 12-16: position 0 is out of every measured query's window, so their attention is undefined, not
  // 0; README: position 0's value norm is 0.09-0.19 of the median there.
  for (int l = 12; l <= 16; ++l) {
    INFO("layer " << l);
    const LayerDump d = src.layer(l, {"q", "k", "v"});
    const LayerSinks s = layer_sinks(l, d.q, d.k, d.v, src.attention(l));
    CHECK(s.out_of_window());
    CHECK(std::isnan(s.attention_mean));
    CHECK(s.window == 512);
    CHECK((s.value_ratio_mean > 0.09 - 0.005 && s.value_ratio_mean < 0.19 + 0.005));
  }
}

TEST_CASE("Gemma 3 GGUF: passkeys at 1K in full precision", "[gguf][model][real][slow]") {
  if (!test::present(test::gemma3_model())) return;
  // The README's fact: KIVI's passkey prompt at 1K, greedy, full precision, 5 samples at each of the depths 0.1 / 0.5 /
  // 0.9: 5 / 5 / 5. This project's generator (oscar-tasks) writes its own keys and haystacks in KIVI's layout, so the
  // samples differ; the rate must agree: at least 13 of 15 (the README's 15 of 15 lies above its Wilson interval
  // otherwise). It finds 15; with the needle inside the noise's line instead of a line of its own, 10.
  TaskSpec spec;
  spec.tasks = {LongTask::passkey};
  spec.lengths = {1024};
  spec.depths = {0.1, 0.5, 0.9};
  spec.samples = 5;
  spec.context = gemma3().config.seq_len;
  const LoadedModel& lm = gemma3();
  const auto samples = generate_long_tasks(spec, [&](std::string_view s) { return static_cast<int>(lm.encode(s).size()); });
  REQUIRE(samples.size() == 15);
  Progress bar("passkey", 15, false);
  const TaskResults r = run_tasks(lm, "passkeys", samples,
                                  {TaskCache{"full precision", false, {}, [&](size_t) { return std::make_unique<KvCache>(lm.config); }}},
                                  bar);
  const TaskCell& c = r.cell("full precision", "passkey", 1024);
  std::printf("Gemma 3 270M: %g of 15 passkeys at 1K in full precision (README: 15 of 15 on its own prompts)\n", c.score);
  CHECK(c.n == 15);
  CHECK(c.score >= 13);
}
