// passage.cpp: passage selection. Encodes only as many lines as the passage needs: when no
// multi-character vocabulary entry contains '\n', BPE merges never cross a line break, so encoding a
// prefix of whole lines gives exactly the prefix of the full encoding; otherwise the rest of the text
// is encoded whole.
#include "oscar/02_model/passage.h"

#include "oscar/01_core/error.h"
#include "oscar/01_core/file_io.h"

namespace oscar {

std::vector<std::string> read_lines(const std::string& path) {
  const std::string text = read_text_file(path);
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.emplace_back(text, start, end - start);
    start = end + 1;
  }
  return lines;
}

static bool merges_cross_newlines(const Tokenizer& tok) {
  for (int i = 0; i < tok.vocab_size(); ++i) {
    const std::string s = tok.decode_piece(0, i);
    if (s.size() > 1 && s.find('\n') != std::string::npos) return true;
  }
  return false;
}

Passage select_passage(const std::string& path, const std::vector<std::string>& lines, long offset, int tokens,
                       const Tokenizer& tok, const PassageOptions& o) {
  const long n = static_cast<long>(lines.size());
  if (n == 0) fail("{}: the text is empty", path);
  const long first = offset < 0 ? n + offset : offset;
  if (first < 0 || first >= n)
    fail("{}: {} {} is outside the text, which has {} lines (use 0..{} or -{}..-1)", path, o.offset, offset, n, n - 1, n);
  if (tokens < 2) fail("{} {} is too few: a passage needs at least 2 tokens", o.tokens, tokens);
  Passage p{path, first, n, {}};
  const bool whole = merges_cross_newlines(tok);
  long take = whole ? n - first : std::min(n - first, 16L);
  for (;;) {
    std::string text;
    for (long i = first; i < first + take; ++i) {
      if (i > first) text += '\n';
      text += lines[i];
    }
    std::vector<int> ids = tok.encode(text, true, false);
    if (static_cast<long>(ids.size()) >= tokens + 1 || first + take == n) {
      if (static_cast<long>(ids.size()) < tokens)
        fail("{}: {} {} is beyond the text: only {} tokens follow line {} ({} {}); lower {} or {}", path, o.tokens, tokens,
             ids.size(), first, o.offset, offset, o.tokens, o.offset);
      ids.resize(tokens);
      p.tokens = std::move(ids);
      return p;
    }
    take = std::min(n - first, take * 2);
  }
}

}  // namespace oscar
