// test_bpe_tokenizer_gemma3.cpp: BpeTokenizer on Gemma 3 270M's real vocabulary (llama / SentencePiece-style BPE:
// 262,144 tokens with scores, byte fallback, add_space_prefix false, BOS 2 added) against the facts in
// ../shared/data/README.md: "The capital of France is", and the first 16 ids and the sha256 of the first 2048 ids
// (BOS included) of two KJV passages, which the shared README computed with a reference tokenizer built by the
// sentencepiece library from the file's own tokens and scores. The vocabulary comes from the GGUF file itself,
// fetched by data/fetch_gemma3.sh into the git-ignored data/models/ (or named by OSCAR_GEMMA3_GGUF). Without it the
// test prints why and exits 77 (skipped).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "kjv_passage.h"
#include "test_data.h"

using oscar::BpeTokenizer;
using oscar::test::gemma3_tokenizer;
using V = std::vector<int>;

TEST_CASE("Gemma 3 vocabulary metadata", "[bpe_tokenizer][gemma3]") {
  const auto& s = gemma3_tokenizer().spec();
  CHECK(s.model == "llama");
  CHECK(s.tokens.size() == 262144);
  CHECK((s.bos == 2 && s.eos == 1 && s.unk == 3 && s.pad == 0));
  CHECK(s.add_bos);
  CHECK_FALSE(s.add_space_prefix);
}

TEST_CASE("Gemma 3 token ids of the README facts", "[bpe_tokenizer][gemma3]") {
  const BpeTokenizer& t = gemma3_tokenizer();
  CHECK(t.encode("The capital of France is") == V{2, 818, 5279, 529, 7001, 563});
  const oscar::test::PassageFact facts[] = {
      {30698, {2, 818, 101985, 529, 9699, 3351, 236764, 837, 3803, 5877, 31273, 1515, 236764, 531, 211141, 31273},
       "830ad748caf9bf80936dc9252a1bba72b9a311133b48f782fbdc2bb68f01b9b8"},
      {0, {2, 902, 506, 6534, 3803, 4464, 506, 20808, 532, 506, 7764, 236761, 107, 3133, 506, 7764},
       "ff4367f72af8c9b5341b5e4c22c8cae71c4c951e6784436c8cffa78590a88462"}};
  for (const auto& f : facts) oscar::test::check_fact(f, t.encode(oscar::test::kjv_passage(f.first, 12000)));
}

int main(int argc, char** argv) {
  if (!oscar::test::present(oscar::test::gemma3_model())) return 77;
  return Catch::Session().run(argc, argv);
}
