// kjv_passage.h: the KJV passages of the shared data README's tokenizer facts, for the tokenizer tests: the text's
// lines, a passage of them joined by '\n', and the sha256 of int32 little-endian ids.
#pragma once
#include <string>
#include <vector>

#include "oscar/01_core/file_io.h"
#include "oscar/02_model/tokenizers/passage.h"
#include "test_data.h"

namespace oscar::test {

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

}  // namespace oscar::test
