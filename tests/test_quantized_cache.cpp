// test_quantized_cache.cpp: decoding token by token from a QuantizedKvCache leaves the cache exactly as
// the CPU reference simulates the policy over the same tokens (the state a server would hold), and
// end-to-end evaluation on stories260K ranks recipes sensibly.
#include <catch2/catch.hpp>

#include <filesystem>
#include <random>

#include "oscar/07_quantize/cache_sim.h"
#include "oscar/02_model/formats/checkpoint.h"
#include "oscar/01_core/error.h"
#include "oscar/11_eval/eval.h"
#include "oscar/08_metrics/next_token.h"
#include "oscar/13_report/eval_tables.h"
#include <nlohmann/json.hpp>
#include "oscar/02_model/tokenizers/passage.h"
#include "oscar/09_cache/quantized_cache.h"
#include "oscar/02_model/tokenizers/tokenizer.h"
#include "oscar/float_formats.h"
#include "eval_request.h"
#include "test_data.h"

using namespace oscar;

// stories260K and the first `tokens` tokens of the KJV from line 100.
struct StoriesPassage {
  Checkpoint ck = load_checkpoint(test::stories_model());
  std::vector<int> tokens;
  explicit StoriesPassage(int n) {
    const Tokenizer tok = Tokenizer::load(test::stories_tokenizer(), ck.config.vocab_size);
    tokens = select_passage(test::kjv_text(), read_lines(test::kjv_text()), 100, n, tok).tokens;
  }
};

static HeadTensor heads_of(const MatrixRM& m, int rows, int heads, int d) {
  HeadTensor h{heads, rows, d, {}};
  for (int hh = 0; hh < heads; ++hh)
    for (int t = 0; t < rows; ++t)
      for (int c = 0; c < d; ++c) h.data.push_back(m(t, hh * d + c));
  return h;
}

TEST_CASE("token-by-token quantized cache equals the simulated policy", "[quantized-cache]") {
  const StoriesPassage p(300);
  const Checkpoint& ck = p.ck;
  const Model m(ck);
  const int d = ck.config.head_dim(), H = ck.config.n_kv_heads;
  for (const char* name : {"kivi", "quarot", "oscar-omni", "turboquant", "naive", "oscar-cov"}) {
    RecipeFile rf = load_preset(name);
    if (rf.recipe.value.group == 32) rf.recipe.value.group = 0;  // head_dim 8
    if (std::string(name) == "oscar-cov") {  // its windows, scaled to 300 tokens; no calibration needed without rotations
      rf.recipe.key_rotation.kind = rf.recipe.value_rotation.kind = RotationKind::Hadamard;
      rf.recipe.key.group = rf.recipe.value.group = 0;
      rf.recipe.windows.key = rf.recipe.windows.value = TensorWindows{16, 40, 0};
    }
    const Recipe r = resolve_recipe(rf.recipe, 2, d);
    QuantizedKvCache cache(ck.config, r, nullptr);
    for (int t : p.tokens) m.forward(std::span<const int>(&t, 1), cache);
    for (int l = 0; l < ck.config.n_layers; ++l) {
      MatrixRM Ks, Vs;
      cache.state(l, Ks, Vs);
      const MatrixRM *K = &Ks, *V = &Vs;
      const int T = static_cast<int>(p.tokens.size());
      REQUIRE(K->rows() == T);
      const LayerRotations rot = layer_rotations(r, d, l, nullptr);
      const SimulatedLayer s = simulate_layer(r, heads_of(cache.keys(l), T, H, d), heads_of(cache.values(l), T, H, d), rot);
      const HeadTensor kh = heads_of(*K, T, H, d), vh = heads_of(*V, T, H, d);
      // FWHT rotations and per-group quantization are row-local: bit-identical. The dense random rotation
      // (turboquant) is a matrix product whose blocking depends on the number of rows: float rounding.
      const double tol = r.key_rotation.kind == RotationKind::RandomOrthogonal ? 1e-5 : 0.0;
      double worst = 0;
      for (size_t i = 0; i < kh.data.size(); ++i) {
        worst = std::max(worst, std::abs(kh.data[i] - s.k_hat.data[i]) / (1.0 + std::abs(s.k_hat.data[i])));
        worst = std::max(worst, std::abs(vh.data[i] - s.v_hat.data[i]) / (1.0 + std::abs(s.v_hat.data[i])));
      }
      INFO(name << " layer " << l);
      CHECK(worst <= tol);
    }
  }
}

TEST_CASE("KIVI's windows over appends: keys flush by 128-token blocks, values keep the newest 128 at every step",
          "[quantized-cache]") {
  const StoriesPassage p(420);
  const Checkpoint& ck = p.ck;
  const Model m(ck);
  const int d = ck.config.head_dim(), H = ck.config.n_kv_heads;
  RecipeFile rf = load_preset("kivi");
  rf.recipe.value.group = 0;  // head_dim 8
  const Recipe r = resolve_recipe(rf.recipe, 2, d);
  QuantizedKvCache cache(ck.config, r, nullptr);
  // Whether row t of a [T, H*d] view holds the fp16 rounding of the model's own row (a window row), for every head.
  auto window_row = [&](const MatrixRM& hat, const MatrixRM& raw, int t) {
    for (int c = 0; c < H * d; ++c)
      if (hat(t, c) != round_to_half(raw(t, c))) return false;
    return true;
  };
  int checked = 0;
  for (size_t i = 0; i < p.tokens.size(); ++i) {
    m.forward(std::span<const int>(&p.tokens[i], 1), cache);
    const int T = static_cast<int>(i) + 1;
    if (T % 37 != 0 && T != 128 && T != 129 && T != 256 && T != 257 && T != 384 && T != 420) continue;
    MatrixRM Ks, Vs;
    cache.state(0, Ks, Vs);
    const MatrixRM *K = &Ks, *V = &Vs;
    const int key_body = T / 128 * 128, value_body = std::max(0, T - 128);
    INFO("T = " << T);
    for (int t = 0; t < T; ++t) {
      INFO("row " << t);
      CHECK(window_row(*K, cache.keys(0), t) == (t >= key_body));
      CHECK(window_row(*V, cache.values(0), t) == (t >= value_body));
    }
    ++checked;
  }
  CHECK(checked >= 14);  // lengths inside the first block, at and after three key flushes, with values flushing each step
}

TEST_CASE("oscar-eval on stories260K: fp16 ~ exact, 2-bit naive far worse than 4-bit", "[quantized-cache][eval]") {
  EvalRequest req = test::stories_request(160);
  req.bits = {2, 4};
  req.recall_distances = {32, 96};
  req.recall_span = 24;
  req.prompt = "Once upon a time";
  req.generate = 12;
  req.recipes = {load_preset("fp16"), load_preset("naive")};
  RecipeFile cov = load_preset("oscar-cov");
  cov.recipe.key.group = cov.recipe.value.group = 0;
  cov.recipe.windows.key = cov.recipe.windows.value = TensorWindows{4, 16, 0};
  req.recipes.push_back(cov);
  const EvalResult r = run_eval(req);
  REQUIRE(r.rows.size() == 5);
  auto row = [&](const std::string& n) {
    for (const auto& x : r.rows)
      if (x.recipe == n) return x;
    FAIL(n);
    return EvalRow{};
  };
  CHECK(std::abs(row("fp16").dloss) < 0.01);
  CHECK(row("fp16").top1 > 0.98);
  CHECK(row("naive@2").kl > row("naive@4").kl);
  CHECK(row("naive@2").kl > 10 * row("fp16").kl);
  CHECK(row("oscar-cov@2").eff_bits_128k < row("oscar-cov@4").eff_bits_128k);
  CHECK(r.recall.size() == 2 * 5);
  for (const auto& c : r.recall)
    if (c.recipe == "fp16") CHECK(c.repeat_loss < c.first_loss);  // copying from context works in full precision
  REQUIRE(r.greedy.size() == 6);
  CHECK(r.greedy[1].recipe == "fp16");
  CHECK(r.greedy[1].shared_prefix >= 8);  // fp16 rounding may flip a late argmax, rarely
  // eval.json carries the ids another engine needs to evaluate the same passage and prompt (vllm_loss_check.py)
  const nlohmann::json j = nlohmann::json::parse(eval_json(req, r));
  REQUIRE(j["passage_ids"].size() == 160);
  CHECK(j["passage_ids"][0] == r.passage_ids[0]);
  CHECK(j["greedy_context_ids"].size() == r.greedy_context_ids.size());
  CHECK(r.greedy_context_ids.size() > 12);
  for (size_t i = 0; i < r.greedy.size(); ++i) {
    CHECK(j["greedy"][i]["ids"].size() == 12);
    CHECK(j["greedy"][i]["ids"].get<std::vector<int>>() == r.greedy[i].ids);
  }
  CHECK(shared_prefix(r.greedy[1].ids, r.greedy[0].ids) == r.greedy[1].shared_prefix);
  // ... and every row's top-1 predictions, whose agreement with full precision's is the row's top-1 column
  REQUIRE(j["fp32_argmax_ids"].size() == 159);
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const auto ids = j["rows"][i]["argmax_ids"].get<std::vector<int>>();
    const auto ref = j["fp32_argmax_ids"].get<std::vector<int>>();
    REQUIRE(ids.size() == 159);
    int same = 0;
    for (size_t t = 0; t < ids.size(); ++t) same += ids[t] == ref[t];
    CHECK(std::abs(same / 159.0 - r.rows[i].top1) < 1e-12);
  }
  // Bad input: calibration passage equal to the evaluated one, or overlapping its lines.
  req.calib_offset = req.offset;
  CHECK_THROWS_WITH(run_eval(req), Catch::Contains("same data") && Catch::Contains("--calib-offset"));
  req.calib_offset = req.offset + 1;  // one line into the evaluated passage
  CHECK_THROWS_WITH(run_eval(req), Catch::Contains("same data") && Catch::Contains("overlapping lines"));
}

TEST_CASE("a chunk's view gives each query the cache of its own time, bit for bit", "[quantized-cache]") {
  // One append of T rows (a prefill, or a teacher-forced passage in one forward pass) against T appends of one row
  // (a server decoding token by token): for every query t of the chunk, the rows its view reads (body rows from the
  // body form within its own body range, the rest from the window form) equal the token-by-token cache after t + 1
  // tokens. A view that gave every query the chunk's final cache would fail here for every row that entered the body
  // inside the chunk.
  const int H = 2, d = 8, T = 300;
  ModelConfig mc;
  mc.n_layers = 1, mc.n_heads = H, mc.n_kv_heads = H, mc.dim = H * d, mc.hidden_dim = 1, mc.vocab_size = 1, mc.seq_len = T;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  MatrixRM K(T, H * d), V(T, H * d);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < H * d; ++c) K(t, c) = nd(rng) * (t % 17 == 0 ? 6.0f : 1.0f), V(t, c) = nd(rng);
  for (const char* name : {"kivi", "quarot", "oscar-omni", "turboquant", "naive", "oscar-cov"}) {
    RecipeFile rf = load_preset(name);
    if (rf.recipe.value.group == 32) rf.recipe.value.group = 0;
    if (std::string(name) == "oscar-cov") {
      rf.recipe.key_rotation.kind = rf.recipe.value_rotation.kind = RotationKind::Hadamard;
      rf.recipe.key.group = rf.recipe.value.group = 0;
      rf.recipe.windows.key = rf.recipe.windows.value = TensorWindows{16, 40, 0};
    }
    if (rf.recipe.key.group == 128) rf.recipe.key.group = 32;  // per-channel key blocks that fill inside 300 tokens
    const Recipe r = resolve_recipe(rf.recipe, 2, d);
    QuantizedKvCache chunk(mc, r, nullptr), steps(mc, r, nullptr);
    chunk.append(0, K, V);
    AttentionView view;
    chunk.attention_view(0, T, view);
    // FWHT rotations and per-group quantization are row-local: bit-identical. The dense random rotation (turboquant)
    // is a matrix product whose blocking depends on the number of rows: float rounding.
    const double tol = r.key_rotation.kind == RotationKind::RandomOrthogonal ? 1e-5 : 0.0;
    int64_t bad = 0, body_rows = 0;
    for (int t = 0; t < T; ++t) {
      steps.append(0, K.middleRows(t, 1), V.middleRows(t, 1));
      AttentionView one;
      steps.attention_view(0, 1, one);
      steps.advance(1);
      MatrixRM ks, vs;
      steps.state(0, ks, vs);
      for (int j = 0; j <= t; ++j) {
        const bool kb = view.k_body && j >= view.key_body[t].first && j < view.key_body[t].second;
        const bool vb = view.v_body && j >= view.value_body[t].first && j < view.value_body[t].second;
        body_rows += kb + vb;
        auto differs = [&](float a, float b) { return std::abs(a - b) > tol * (1.0 + std::abs(b)); };
        for (int c = 0; c < H * d; ++c) {
          bad += differs(kb ? (*view.k_body)(j, c) : (*view.k)(j, c), ks(j, c));
          bad += differs(vb ? (*view.v_body)(j, c) : (*view.v)(j, c), vs(j, c));
        }
      }
    }
    INFO(name);
    CHECK(bad == 0);
    CHECK(body_rows > 0);  // the recipe quantized something within the chunk
  }
}
