// test_tokenizer.cpp: llama2.c BPE against ids from a direct transcription of run.c's quadratic
// merge loop (computed once with Python on the same tok512.bin), and decoding.
#include <catch2/catch.hpp>

#include "oscar/02_model/tokenizers/tokenizer.h"
#include "oscar/01_core/error.h"
#include "test_data.h"

using oscar::Tokenizer;

TEST_CASE("encode matches run.c's greedy BPE", "[tokenizer]") {
  const Tokenizer tok = Tokenizer::load(oscar::test::stories_tokenizer(), 512);
  CHECK(tok.encode("Once upon a time, there was a little girl named Lily.", true, false) ==
        std::vector<int>{1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426});
  // UTF-8 code points missing from the vocabulary fall back to bytes + 3; '\n' and '\t' too.
  CHECK(tok.encode("H\xc3\xa9llo w\xc3\xb6rld \xe2\x80\x94 na\xc3\xafve caf\xc3\xa9 \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac\n\tend", true, false) ==
        std::vector<int>{1, 320, 485, 306, 414, 263, 198, 185, 420, 341, 410, 481, 297, 412, 198, 178, 360, 280,
                         412, 431, 485, 410, 229, 159, 150, 410, 233, 154, 168, 233, 159, 175, 13, 12, 367});
  CHECK(tok.encode("", true, false) == std::vector<int>{1});
  CHECK(tok.encode("", false, true) == std::vector<int>{2});
  CHECK(tok.encode("And God said, Let there be light: and there was light.", true, false) ==
        std::vector<int>{1, 410, 447, 264, 410, 463, 414, 418, 336, 432, 307, 316, 383, 329, 278, 333, 415, 413, 467, 269,
                         383, 286, 278, 333, 415, 413, 426});
}

TEST_CASE("decode follows run.c", "[tokenizer]") {
  const Tokenizer tok = Tokenizer::load(oscar::test::stories_tokenizer(), 512);
  const auto ids = tok.encode("Once upon a time.\n", true, false);
  std::string text;
  for (size_t i = 1; i < ids.size(); ++i) text += tok.decode_piece(ids[i - 1], ids[i]);
  CHECK(text == "Once upon a time.\n");  // leading space dropped after BOS; <0x0A> decodes to a newline
  CHECK(tok.display(1) == "<s>");
  CHECK(tok.display(13) == "<0x0A>");
}

TEST_CASE("tokenizer vocab size must agree with the model", "[tokenizer][bad-input]") {
  CHECK_THROWS_WITH(Tokenizer::load(oscar::test::stories_tokenizer(), 600), Catch::Contains("holds only 512 tokens"));
  CHECK_THROWS_WITH(Tokenizer::load(oscar::test::stories_tokenizer(), 256), Catch::Contains("more than the model's vocab_size"));
  CHECK_THROWS_WITH(Tokenizer::load("/nonexistent/tok.bin", 512), Catch::Contains("no such file"));
}
