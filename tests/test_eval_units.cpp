// test_eval_units.cpp: oscar-eval's units on their own: metrics from logits (KL, top-1, span loss), the
// recall sequence's layout, greedy decoding against generate_greedy, option validation (one message per
// option) and the output folder check (creates nothing).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "oscar/01_core/error.h"
#include "oscar/01_core/output_files.h"
#include "oscar/02_model/formats/checkpoint.h"
#include "oscar/02_model/forward/model.h"
#include "oscar/11_eval/decoding.h"
#include "oscar/11_eval/eval.h"
#include "oscar/11_eval/eval_plan.h"
#include "oscar/08_metrics/next_token.h"
#include "oscar/13_report/eval_tables.h"
#include "test_data.h"

using namespace oscar;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

TEST_CASE("metrics from logits: KL, top-1 agreement, span loss", "[eval][metrics]") {
  MatrixRM ref(3, 2), q(3, 2);
  ref << 0, 0, 1, 0, 0, 2;
  q << 0, 0, 1, 0, 3, 0;  // rows 0, 1 equal; row 2's argmax flips
  const LogitAgreement same = compare_logits(ref, ref, 3);
  CHECK(same.kl == Approx(0).margin(1e-15));
  CHECK(same.top1 == 1.0);
  const LogitAgreement a = compare_logits(ref, q, 3);
  // Row 2: p = softmax(0, 2), r = softmax(3, 0): KL(p || r) by hand.
  const double p0 = 1 / (1 + std::exp(2.0)), p1 = 1 - p0, r0 = 1 / (1 + std::exp(-3.0)), r1 = 1 - r0;
  CHECK(a.kl == Approx((p0 * std::log(p0 / r0) + p1 * std::log(p1 / r1)) / 3).epsilon(1e-12));
  CHECK(a.top1 == Approx(2.0 / 3.0));  // row 0 ties pick index 0 in both
  CHECK(compare_logits(ref, q, 2).kl == Approx(0).margin(1e-15));
  CHECK_THROWS(compare_logits(ref, q, 4));

  const std::vector<int> toks{0, 1, 1};
  const std::vector<double> l = next_token_losses(ref, toks);
  CHECK(span_loss(ref, toks, 1, 2) == Approx((l[0] + l[1]) / 2));
  CHECK(span_loss(ref, toks, 2, 1) == Approx(l[1]));
  CHECK_THROWS(span_loss(ref, toks, 2, 2));
  CHECK(shared_prefix({1, 2, 3}, {1, 2, 4, 5}) == 2);
  CHECK(shared_prefix({}, {1}) == 0);
}

TEST_CASE("the recall sequence: BOS, [lead, newline,] A, newline, filler, newline, A", "[eval][decoding]") {
  const std::vector<int> a{10, 11, 12}, filler{51, 52, 53, 54, 55};
  const RecallSequence s = recall_sequence(a, 13, filler, 0, 5, 1);
  CHECK(s.tokens == std::vector<int>{1, 10, 11, 12, 13, 51, 52, 53, 13, 10, 11, 12});
  CHECK(s.first == 1);
  CHECK(s.repeat == 9);
  CHECK(s.span == 3);
  CHECK(s.repeat - s.first == 3 + 5);  // span + distance
  CHECK(recall_sequence(a, 13, filler, 0, 2, 1).tokens == std::vector<int>{1, 10, 11, 12, 13, 13, 10, 11, 12});
  CHECK_THROWS_WITH(recall_sequence(a, 13, filler, 0, 1, 1), Contains("at least 2"));
  CHECK_THROWS_WITH(recall_sequence(a, 13, filler, 0, 8, 1), Contains("filler has 5 tokens"));
  // A model that reads no BOS (SmolLM2) starts with a line break instead.
  const RecallSequence n = recall_sequence(a, 198, filler, 0, 4, 198);
  CHECK(n.tokens == std::vector<int>{198, 10, 11, 12, 198, 51, 52, 198, 10, 11, 12});
  CHECK(n.first == 1);
  CHECK(n.repeat - n.first == 3 + 4);
  // A lead of other text puts A past a cache's sink: the filler's first tokens, a line break, then A; the distance
  // is unchanged and the filler between the copies continues after the lead.
  const RecallSequence l = recall_sequence(a, 13, filler, 2, 4, 1);
  CHECK(l.tokens == std::vector<int>{1, 51, 52, 13, 10, 11, 12, 13, 53, 54, 13, 10, 11, 12});
  CHECK(l.first == 4);
  CHECK(l.repeat - l.first == 3 + 4);
  CHECK_THROWS_WITH(recall_sequence(a, 13, filler, 2, 6, 1), Contains("lead 2 and distance 6 need 6"));
}

TEST_CASE("greedy decoding through a cache equals generate_greedy", "[eval][decoding]") {
  const Checkpoint ck = load_checkpoint(test::stories_model());
  const Model m(ck);
  const std::vector<int> prompt{1, 403, 407};
  KvCache cache(ck.config);
  const std::vector<int> ids = decode_greedy(m, cache, prompt, 12);
  const std::vector<int> ref = generate_greedy(m, prompt, 12);
  REQUIRE(ids.size() == 12);
  CHECK(ref == ids);  // the prompt fed token by token here, as one chunk there
  CHECK(cache.length() == 3 + 12);
}

TEST_CASE("each bad option has its own message", "[eval][bad-input]") {
  EvalRequest ok;
  CHECK_NOTHROW(validate_eval_options(ok));
  auto bad = [&](auto edit) {
    EvalRequest r = ok;
    edit(r);
    return r;
  };
  CHECK_THROWS_WITH(validate_eval_options(bad([](EvalRequest& r) { r.recall_distances = {256, 0}; })), Contains("--recall 0 is not a recall distance"));
  CHECK_THROWS_WITH(validate_eval_options(bad([](EvalRequest& r) { r.recall_distances = {-4}; })), Contains("--recall -4"));
  CHECK_THROWS_WITH(validate_eval_options(bad([](EvalRequest& r) { r.recall_span = 0; })), Contains("--recall-span 0 must be a positive"));
  CHECK_THROWS_WITH(validate_eval_options(bad([](EvalRequest& r) { r.prompt = "x"; })), Contains("--prompt is given without --generate"));
  CHECK_THROWS_WITH(validate_eval_options(bad([](EvalRequest& r) { r.generate = 3; })), Contains("--generate 3 needs --prompt"));
  CHECK_THROWS_WITH(validate_eval_options(bad([](EvalRequest& r) { r.prompt = "x", r.generate = -1; })), Contains("--generate -1 is negative"));
  CHECK_THROWS_WITH(validate_eval_options(bad([](EvalRequest& r) { r.bits = {2, 0}; })), Contains("--bits 0 out of range"));
  CHECK_THROWS_WITH(validate_eval_options(bad([](EvalRequest& r) { r.tokens = 1; })), Contains("--tokens 1 is too few"));
  CHECK_THROWS_WITH(validate_eval_options(bad([](EvalRequest& r) { r.calib_tokens = -5; })), Contains("--calib-tokens -5 is too few"));
}

TEST_CASE("the output folder is checked without creating anything", "[eval][bad-input]") {
  const fs::path dir = test::scratch() / "eval-out-check";
  fs::create_directories(dir);
  CHECK_NOTHROW(check_output_folder(dir.string()));                    // exists
  CHECK_NOTHROW(check_output_folder((dir / "new" / "deeper").string()));  // can be created
  CHECK_FALSE(fs::exists(dir / "new"));
  std::ofstream(dir / "file") << "x";
  CHECK_THROWS_WITH(check_output_folder((dir / "file").string()), Contains("is a file, expected an output folder"));
  CHECK_THROWS_WITH(check_output_folder((dir / "file" / "sub").string()), Contains("cannot be created"));
  for (const auto& e : fs::directory_iterator(dir)) CHECK(e.path().filename().string().rfind(".oscar-", 0) != 0);
}
