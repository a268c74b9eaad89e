// test_bpe_tokenizer_smollm2.cpp: BpeTokenizer on SmolLM2-135M-Instruct's real vocabulary (gpt2, pre
// smollm, 49,152 tokens, 48,900 merges) against the facts in ../shared/data/README.md: the first 16 ids and
// the sha256 of the first 2048 ids of two KJV passages, and "The capital of France is". The vocabulary
// comes from the GGUF file itself (vocab_spec_from_gguf), fetched by data/fetch_smollm2.sh into the git-ignored
// data/models/ (or named by OSCAR_SMOLLM2_GGUF). Without it the test prints why and exits 77 (skipped).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kjv_passage.h"
#include "test_data.h"

using oscar::BpeTokenizer;
using oscar::VocabSpec;
using V = std::vector<int>;
using oscar::test::sha256_ids;
using oscar::test::smollm2_tokenizer;

TEST_CASE("SmolLM2 vocabulary metadata", "[bpe_tokenizer][smollm2]") {
  const VocabSpec& s = smollm2_tokenizer().spec();
  CHECK(s.model == "gpt2");
  CHECK(s.pre == "smollm");
  CHECK(s.tokens.size() == 49152);
  CHECK(s.merges.size() == 48900);
  CHECK((s.bos == 1 && s.eos == 2 && s.unk == 0));
  CHECK_FALSE(s.add_bos);  // the file says add_bos_token = false: no BOS is prepended
  CHECK_FALSE(s.add_eos);
}

TEST_CASE("SmolLM2 token ids of the README facts", "[bpe_tokenizer][smollm2]") {
  const BpeTokenizer& t = smollm2_tokenizer();
  CHECK(t.encode("The capital of France is") == V{504, 3575, 282, 4649, 314});
  const oscar::test::PassageFact facts[] = {
      {30698, {504, 26639, 282, 3886, 1926, 28, 527, 1839, 4502, 15032, 1272, 28, 288, 1041, 103, 15032},
       "c470784bac4d48fc1f7ae582de8f7c7f890021a75ee477129ed910d86cb1a0a3"},
      {0, {788, 260, 3616, 1839, 2312, 260, 10419, 284, 260, 3103, 30, 198, 3528, 260, 3103, 436},
       "0faeb170687fa97eb9c7ba77c5c4b2d749d981feb920fa4b04fa148c756eca31"}};
  for (const auto& f : facts) {
    // ~12,000 characters give well over 2048 tokens; a longer cut must not change the first 2048 (the
    // words before a line boundary do not depend on what follows it).
    const std::string text = oscar::test::kjv_passage(f.first, 12000), longer = oscar::test::kjv_passage(f.first, 24000);
    const auto t0 = std::chrono::steady_clock::now();
    V ids = t.encode(text);
    const double s = oscar::test::seconds_since(t0);
    REQUIRE(ids.size() >= 2048);
    std::printf("line %zu: %zu characters -> %zu tokens in %.2f ms (%.0f tokens/s)\n", f.first, text.size(), ids.size(),
                s * 1e3, ids.size() / s);
    V more = t.encode(longer);
    CHECK(V(more.begin(), more.begin() + 2048) == V(ids.begin(), ids.begin() + 2048));
    oscar::test::check_fact(f, ids);
    CHECK(t.decode(t.encode(text)) == text);
  }
}

// Reference ids from Hugging Face tokenizers 0.23.3 given the same vocabulary and merges with SmolLM2's
// pre-tokenizer (Digits(individual_digits) then ByteLevel(add_prefix_space=false)).
TEST_CASE("SmolLM2 ids agree with Hugging Face tokenizers on mixed text", "[bpe_tokenizer][smollm2]") {
  const BpeTokenizer& t = smollm2_tokenizer();
  const std::vector<std::pair<std::string, V>> cases = {
      {"Caf\u00e9 d\u00e9j\u00e0 vu.", {51, 1939, 2756, 32564, 90, 16739, 386, 101, 30}},
      {"Hello world! 123", {19556, 905, 17, 216, 33, 34, 35}},
      {"  multiple   spaces", {216, 2701, 256, 5600}},
      {"\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \U0001F44D\U0001F3FD emoji!",
       {23274, 115, 40993, 179, 120, 248, 26453, 11100, 224, 10391, 251, 10391, 134, 11100, 226, 15107, 235, 231, 10813,
        233, 138, 649, 33777, 17}},
      {"I'm sure they've said 'don't' \u2014 it's 3.14159 or 2,048,000.\n\n\tTabs\r\nand CRLF  ",
       {57, 5248, 2090, 502, 3543, 1137, 637, 12420, 982, 23, 1841, 357, 506, 216, 35, 30, 33, 36, 33, 37, 41, 355, 216,
        34, 28, 32, 36, 40, 28, 32, 32, 32, 30, 1116, 197, 68, 7366, 201, 198, 397, 340, 9483, 54, 256}},
      {"na\u00efve fa\u00e7ade \u00fcber Stra\u00dfe \u00c0\u00c9\u00ce\u00d5\u00dc",
       {3546, 46494, 40852, 5549, 137, 593, 19144, 34878, 85, 5549, 218, 39614, 142, 232, 142, 239, 142, 246}},
      {"x\u00a0y\u3000z\u2003w", {104, 15442, 105, 12109, 218, 106, 321, 221, 103}},
      // Special tokens' texts are not parsed: <|im_start|> is plain text here.
      {"<|im_start|>user\nHi<|im_end|>", {44, 108, 306, 79, 3738, 108, 46, 4093, 198, 26843, 44, 108, 306, 79, 486, 108, 46}},
  };
  for (const auto& [text, ids] : cases) {
    INFO(text);
    CHECK(t.encode(text) == ids);
    CHECK(t.decode(ids) == text);
  }
  CHECK(t.piece(1) == "<|im_start|>");
  // Parsed, the chat markers are the control tokens 1 and 2 (Hugging Face with ids 0..16 as added
  // special tokens gives the same).
  CHECK(t.encode("<|im_start|>user\nHi<|im_end|>", true) == V{1, 4093, 198, 26843, 2});
  CHECK(t.encode("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                 "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
                 true) == V{1,    9690, 198,   2683, 359,  253, 5356, 5646, 11173, 3365, 3511, 308, 34519,
                            28,   7018, 411,   407,  19712, 8182, 2,   198,  1,     4093, 198,  1780, 314,
                            216,  34,   27,    34,   47,   2,   198,  1,    520,   9531, 198});
}

TEST_CASE("SmolLM2 encodes the whole KJV like Hugging Face tokenizers, in seconds", "[bpe_tokenizer][smollm2]") {
  const BpeTokenizer& t = smollm2_tokenizer();
  const std::string all = oscar::test::kjv_passage(0, std::string::npos);
  REQUIRE(all.size() == 4137849);
  const auto t0 = std::chrono::steady_clock::now();
  const V ids = t.encode(all);
  const double s = oscar::test::seconds_since(t0);
  std::printf("whole KJV: %zu characters -> %zu tokens in %.2f s (%.0f tokens/s)\n", all.size(), ids.size(), s,
              ids.size() / s);
  // Hugging Face tokenizers 0.23.3 (as above): 1,022,989 ids with this sha256.
  CHECK(ids.size() == 1022989);
  CHECK(sha256_ids(ids) == "3b4d3f0cdb44ccccbe205c7b9204d270a7669def1afcce317108578ca01754b3");
  CHECK(s < 30.0);
}

int main(int argc, char** argv) {
  if (!oscar::test::present(oscar::test::smollm2_model())) return 77;
  return Catch::Session().run(argc, argv);
}
