// test_model.cpp: the CPU forward pass against the known facts of both shared models
// (../shared/data/README.md): greedy continuations (exact text) and mean next-token losses (0.01 nats).
#include <catch2/catch.hpp>

#include <filesystem>

#include "oscar/02_model/formats/checkpoint.h"
#include "oscar/02_model/forward/model.h"
#include "oscar/02_model/tokenizers/passage.h"
#include "oscar/02_model/tokenizers/tokenizer.h"
#include "skip.h"
#include "test_data.h"

using namespace oscar;

// Greedy continuation decoded as run.c prints it, cut to `chars` characters (each token adds >= 1).
static std::string continuation(const Model& m, const Tokenizer& tok, const std::string& prompt, size_t chars) {
  const auto ids = tok.encode(prompt, true, false);
  std::string text;
  int prev = ids.back();
  for (int t : generate_greedy(m, ids, static_cast<int>(chars))) {
    text += tok.decode_piece(prev, t);
    prev = t;
    if (text.size() >= chars) break;
  }
  return text.substr(0, chars);
}

static double passage_loss(const Model& m, const Tokenizer& tok, long offset, int tokens) {
  const auto lines = read_lines(test::kjv_text());
  const Passage p = select_passage(test::kjv_text(), lines, offset, tokens, tok);
  REQUIRE(static_cast<int>(p.tokens.size()) == tokens);
  KvCache cache(m.config());
  return mean_next_token_loss(m.forward(p.tokens, cache), p.tokens);
}

TEST_CASE("stories260K: greedy continuation and KJV loss", "[model][facts]") {
  const Checkpoint ck = load_checkpoint(test::stories_model());
  CHECK(ck.sha256 == "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696");
  CHECK(ck.config.head_dim() == 8);
  const Tokenizer tok = Tokenizer::load(test::stories_tokenizer(), ck.config.vocab_size);
  const Model m(ck);
  const std::string expect = " One day, she saw a big, red ball. She wanted to play with it, but it was too high.";
  CHECK(continuation(m, tok, "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.",
                     expect.size()) == expect);
  CHECK(passage_loss(m, tok, 0, 512) == Approx(3.262).margin(0.01));
}

TEST_CASE("kjv-llama-hd128 (float16 parts): facts", "[model][facts]") {
  const Checkpoint ck = load_checkpoint(test::hd128_model());
  CHECK(ck.storage == "float16");
  CHECK(ck.sha256 == "45680e960b34309b74b33fc51bd7771728bf31c8f57fe074f5358f06b3a510ae");
  CHECK(ck.config.head_dim() == 128);
  CHECK(ck.config.n_kv_heads == 2);
  const Tokenizer tok = Tokenizer::load(test::stories_tokenizer(), ck.config.vocab_size);
  const Model m(ck);
  SECTION("held-out Revelation, first 1024 tokens") { CHECK(passage_loss(m, tok, -404, 1024) == Approx(1.849).margin(0.01)); }
  SECTION("training text, first 512 tokens") { CHECK(passage_loss(m, tok, 0, 512) == Approx(1.741).margin(0.01)); }
  SECTION("greedy continuation") {
    const std::string expect = "\nAnd the second time was come to Jerusalem, and took them which were at the do";
    CHECK(continuation(m, tok, "And God said, Let there be light: and there was light.", expect.size()) == expect);
  }
}

TEST_CASE("prefill in one chunk equals token-by-token decoding", "[model]") {
  const Checkpoint ck = load_checkpoint(test::stories_model());
  const Tokenizer tok = Tokenizer::load(test::stories_tokenizer(), ck.config.vocab_size);
  const Model m(ck);
  const auto ids = tok.encode("The cat sat on the mat. It was happy.", true, false);
  KvCache a(ck.config), b(ck.config);
  const MatrixRM full = m.forward(ids, a);
  for (size_t t = 0; t < ids.size(); ++t) {
    const MatrixRM one = m.forward(std::span<const int>(&ids[t], 1), b);
    CHECK((one.row(0) - full.row(t)).cwiseAbs().maxCoeff() < 1e-4f);
  }
}

TEST_CASE("float16 parts and the float32 original load to the same values", "[model][optional-data]") {
  OSCAR_SKIP_UNLESS_EXISTS(test::shared_hd128_fp32(), "the float32 original lives in ../shared/data only");
  const Checkpoint a = load_checkpoint(test::hd128_model());
  const Checkpoint b = load_checkpoint(test::shared_hd128_fp32());
  CHECK(a.sha256 == b.sha256);
  CHECK(a.values == b.values);
}
