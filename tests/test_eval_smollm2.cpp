// test_eval_smollm2.cpp: oscar-eval's run_eval on the real SmolLM2-135M-Instruct GGUF (tokenizer from the
// file, no BOS): on the first 256 tokens of Revelation the full-precision reference equals one forward
// pass over the passage (as oscar-dump computes its loss), the fp16 cache is within 0.005 nats of it,
// oscar-omni at 2 bits loses a finite positive amount with top-1 agreement in (0, 1], oscar-cov calibrates
// on Genesis through the GGUF model in memory, the recall test
// and greedy generation run (greedy fp32 text = ../shared/data/README.md's fact); and the calibration
// leak check refuses a calibration passage that is the evaluated one. Skipped where the file is absent.
#include <catch2/catch.hpp>

#include <cmath>

#include "oscar/01_core/error.h"
#include "oscar/02_model/loaded_model.h"
#include "oscar/11_eval/eval.h"
#include "oscar/11_eval/long_tasks.h"
#include "eval_request.h"
#include "skip.h"
#include "test_data.h"

using namespace oscar;
using Catch::Matchers::Contains;

TEST_CASE("oscar-eval on SmolLM2's GGUF: reference, fp16, oscar-omni@2, recall, greedy", "[eval][gguf][optional-data][slow]") {
  OSCAR_SKIP_UNLESS_EXISTS(test::smollm2_gguf(), test::smollm2_model().fetch);
  const int tokens = 256;  // oscar-omni keeps the newest 128 in bf16: 128 tokens are quantized
  EvalRequest r = test::smollm2_request(tokens);
  r.recipes = {load_preset("fp16"), load_preset("oscar-omni"), load_preset("oscar-cov")};
  r.bits = {2};
  r.clamp_groups = true;  // oscar-cov's groups of 128 channels become SmolLM2's head_dim 64
  r.recall_distances = {48};
  r.recall_span = 16;
  r.prompt = "The capital of France is";
  r.generate = 24;
  r.generate_context = 0;  // the prompt alone, as ../shared/data/README.md's fact
  const EvalResult res = run_eval(r);
  CHECK(res.model_name == "SmolLM2-135M-Instruct.Q4_1");
  CHECK(res.tokens == tokens);

  // The same passage through one forward pass, as oscar-dump reads it.
  const LoadedModel lm = LoadedModel::load(r.model, "");
  const Passage p = lm.select_passage(r.text, read_lines(r.text), r.offset, tokens);
  const std::vector<int> first16{504, 26639, 282, 3886, 1926, 28, 527, 1839, 4502, 15032, 1272, 28, 288, 1041, 103, 15032};
  REQUIRE(p.tokens.size() == static_cast<size_t>(tokens));
  CHECK(std::vector<int>(p.tokens.begin(), p.tokens.begin() + 16) == first16);  // the README's ids: no BOS
  KvCache cache(lm.config);
  const double forward_loss = mean_next_token_loss(lm.model().forward(p.tokens, cache), p.tokens);

  REQUIRE(res.rows.size() == 3);
  const EvalRow& fp16 = res.rows[0];
  const EvalRow& omni = res.rows[1];
  CHECK(fp16.recipe == "fp16");
  const double reference = fp16.loss - fp16.dloss;  // the full-precision cache, decoded token by token
  CHECK(reference == Approx(forward_loss).margin(1e-4));
  CHECK(fp16.loss == Approx(forward_loss).margin(5e-3));
  CHECK(fp16.top1 > 0.99);
  CHECK(omni.recipe == "oscar-omni@2");
  CHECK(std::isfinite(omni.dloss));
  CHECK(omni.dloss > 0);
  CHECK(omni.top1 > 0);
  CHECK(omni.top1 <= 1);
  CHECK(omni.kl > 0);
  // oscar-cov: rotations fitted on Genesis run through the GGUF model in memory.
  const EvalRow& cov = res.rows[2];
  CHECK(cov.recipe == "oscar-cov@2");
  CHECK(std::isfinite(cov.dloss));
  CHECK(cov.top1 > 0);

  REQUIRE(res.recall.size() == 3);
  for (const RecallRow& row : res.recall) {
    CHECK(row.distance == 48);
    CHECK(std::isfinite(row.repeat_loss));
    CHECK(row.repeat_loss < row.first_loss);  // the repeat is easier: the model copies from context
  }
  REQUIRE(res.greedy.size() == 4);
  CHECK(res.greedy[0].text == " Paris.\n\nThe answer is: 2018-01-22 12:1");  // ../shared/data/README.md
  CHECK(res.greedy[0].generated == 24);
  for (const GreedyRow& g : res.greedy) CHECK(!g.text.empty());
}

TEST_CASE("oscar-eval on SmolLM2's GGUF refuses a calibration passage that is the evaluated one", "[eval][gguf][optional-data]") {
  OSCAR_SKIP_UNLESS_EXISTS(test::smollm2_gguf(), test::smollm2_model().fetch);
  EvalRequest r = test::smollm2_request(96);
  r.calib_offset = r.offset;
  r.recipes = {load_preset("oscar-cov")};  // calibrated: covariance rotations from the calibration passage
  r.clamp_groups = true;                     // its groups of 128 channels become SmolLM2's head_dim 64
  CHECK_THROWS_WITH(run_eval(r), Contains("are the same data") && Contains("token ids are identical"));
  // Overlapping lines, other token ids: the line ranges count on GGUF too.
  r.calib_offset = -403;
  CHECK_THROWS_WITH(run_eval(r), Contains("are the same data") && Contains("overlapping lines"));
}

TEST_CASE("oscar-eval --tasks on SmolLM2: full precision finds the passkey, a broken cache does not", "[eval][tasks][gguf][optional-data][slow]") {
  OSCAR_SKIP_UNLESS_EXISTS(test::smollm2_gguf(), test::smollm2_model().fetch);
  // Passkeys of 1024 tokens at depths 0.1, 0.5, 0.9 (oscar-tasks' generator, SmolLM2's tokenizer).
  const ModelTokens mt = model_tokens(test::smollm2_gguf(), "");
  TaskSpec spec;
  spec.tasks = {LongTask::passkey};
  spec.lengths = {1024};
  spec.depths = {0.1, 0.5, 0.9};
  spec.samples = 1;
  spec.context = mt.context_length;
  const auto samples = generate_long_tasks(spec, mt.count);
  const std::string file = (test::scratch() / "passkey-1k.jsonl").string();
  write_tasks_jsonl(file, samples);
  EvalRequest r = test::smollm2_request(128);
  r.tasks = file;
  // naive@2 with no window is the deliberately broken cache: every token in 2 bits, per-token groups, no rotation.
  // oscar-omni@4 keeps almost everything.
  // oscar-cov calibrates on Genesis (--calib-offset 0), which the default --offset 0 passage overlaps: with --tasks the
  // evaluated data are the prompts, so only the model's identity is checked.
  r.recipes = {load_preset("naive"), load_preset("oscar-omni"), load_preset("oscar-cov")};
  r.bits = {2, 4};
  r.offset = 0;
  const EvalResult res = run_eval(r);
  REQUIRE(res.tasks);
  const TaskResults& t = *res.tasks;
  REQUIRE(t.recipes.size() == 7);
  CHECK(t.cell("oscar-cov@2", "passkey", 1024).n == 3);
  CHECK(t.recipes.front() == "full precision (fp32)");
  CHECK(t.cell("full precision (fp32)", "passkey", 1024).accuracy() == 1.0);  // the README: 5 of 5 at 1K for Gemma; SmolLM2 too
  CHECK(t.cell("full precision (fp32)", "passkey", 1024).n == 3);
  CHECK(t.cell("naive@2", "passkey", 1024).accuracy() == 0.0);
  CHECK(t.cell("naive@2", "passkey", 1024).quantized > 0.99);  // in low bits: the whole prompt
  CHECK(t.cell("oscar-omni@4", "passkey", 1024).accuracy() == 1.0);
  const TaskCell& all = t.cell("naive@2", "all", 1024);
  CHECK((all.ci.lo == 0.0 && all.ci.hi == Approx(0.5615).margin(1e-3)));  // Wilson, 0 of 3
  CHECK_FALSE(all.reference_weak);
  // Every outcome keeps the generated answer; the question's tokens follow the context's.
  for (const TaskOutcome& o : t.outcomes) CHECK(!o.answer.empty());
  const LoadedModel lm = LoadedModel::load(r.model, "");
  const std::vector<int> ids = lm.encode(samples[0].prompt);
  const size_t q = static_cast<size_t>(question_start(samples[0], ids, [&lm](std::string_view x) { return lm.encode(x); }));
  CHECK(q + 30 > ids.size());  // "What is the pass key? The pass key is" and its line break: a few tokens
  CHECK(q + 5 < ids.size());
  // Bad input: --tasks with --recall is refused before any work.
  r.recall_distances = {64};
  CHECK_THROWS_WITH(run_eval(r), Contains("--tasks evaluates the task file alone"));
}
