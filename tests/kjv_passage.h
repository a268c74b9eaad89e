// kjv_passage.h: the KJV passages of the shared data README's tokenizer facts, for the tokenizer tests: the text's
// lines, a passage of them joined by '\n', the sha256 of int32 little-endian ids, the check of a fact, and the tokenizer
// of a GGUF file's vocabulary.
#pragma once
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "oscar/01_core/file_io.h"
#include "oscar/02_model/formats/gguf.h"
#include "oscar/02_model/tokenizers/bpe_tokenizer.h"
#include "oscar/02_model/tokenizers/gguf_vocab.h"
#include "oscar/02_model/tokenizers/passage.h"
#include "test_data.h"

namespace oscar::test {

// The tokenizer a GGUF file's vocabulary makes; those of the fetched models, made once per process.
inline BpeTokenizer gguf_tokenizer(const std::string& gguf) {
  return BpeTokenizer(vocab_spec_from_gguf(GgufFile::open(gguf)), gguf);
}
inline const BpeTokenizer& smollm2_tokenizer() { static const BpeTokenizer t = gguf_tokenizer(smollm2_gguf()); return t; }
inline const BpeTokenizer& gemma3_tokenizer() { static const BpeTokenizer t = gguf_tokenizer(gemma3_gguf()); return t; }

inline const std::vector<std::string>& kjv_lines() {
  static const std::vector<std::string> l = oscar::read_lines(kjv_text());
  return l;
}

// Lines first.. joined by '\n', stopping at a line boundary once `chars` characters are reached.
inline std::string kjv_passage(size_t first, size_t chars) {
  std::string s;
  for (size_t i = first; i < kjv_lines().size() && s.size() < chars; ++i) s += (i > first ? "\n" : "") + kjv_lines()[i];
  return s;
}

inline std::string sha256_ids(const std::vector<int>& ids) {
  std::vector<int32_t> le(ids.begin(), ids.end());  // x86-64: int32 in memory is little-endian
  return oscar::sha256_hex(le.data(), le.size() * sizeof(int32_t));
}

// A tokenizer fact of the shared README: the passage from line `first`, its first 16 ids and the sha256 of its first
// 2048 ids.
struct PassageFact {
  size_t first;
  std::vector<int> head;
  const char* sha;
};

// `ids`, a tokenizer's encoding of the fact's passage, hold at least 2048 ids, the fact's first 16 and its sha256.
inline void check_fact(const PassageFact& f, std::vector<int> ids) {
  INFO("line " << f.first);
  REQUIRE(kjv_lines().size() == 31102);  // the text of the facts
  REQUIRE(ids.size() >= 2048);
  ids.resize(2048);
  CHECK(std::vector<int>(ids.begin(), ids.begin() + 16) == f.head);
  CHECK(sha256_ids(ids) == f.sha);
}

}  // namespace oscar::test
