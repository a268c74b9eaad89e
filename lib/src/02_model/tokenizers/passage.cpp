// passage.cpp: passage selection. Encodes only as many lines as the passage needs: when no
// multi-character vocabulary entry contains '\n', BPE merges never cross a line break, so encoding a
// prefix of whole lines gives exactly the prefix of the full encoding; otherwise the rest of the text
// is encoded whole. Text that is not UTF-8 (binary garbage, another encoding) is refused with its offset.
#include "oscar/02_model/tokenizers/passage.h"

#include <algorithm>

#include "oscar/01_core/error.h"
#include "oscar/01_core/file_io.h"

namespace oscar {

namespace {

// Offset of the first byte that does not belong to well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF) or is NUL, or text.size() when all is well.
size_t first_bad_utf8(const std::string& text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c == 0) return i;
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c >= 0xEE && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else return i;
    if (i + len > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (int k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    i += len;
  }
  return n;
}

}  // namespace

std::vector<std::string> read_lines(const std::string& path) {
  const std::string text = read_text_file(path);
  if (const size_t bad = first_bad_utf8(text); bad < text.size()) {
    const long line = 1 + std::count(text.begin(), text.begin() + static_cast<long>(bad), '\n');
    fail("{}: not UTF-8 text: byte {} (line {}{}) is 0x{:02x}, {}; give a UTF-8 text file, one line per verse or paragraph",
         path, bad, line, path.size() > 3 && path.substr(path.size() - 3) == ".gz" ? ", after decompression" : "",
         static_cast<unsigned char>(text[bad]), text[bad] == 0 ? "a NUL (a binary file?)" : "not valid UTF-8");
  }
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

namespace {

// Lines [first..] joined by '\n', encoded by `encode` (BOS as the tokenizer adds it), cut to `tokens` ids.
// With `whole` the rest of the text is encoded at once; otherwise a prefix of lines that doubles until the
// ids exceed `tokens` by `margin` (so that where the prefix ends cannot change the ids kept).
template <class Encode>
Passage select_with(const std::string& path, const std::vector<std::string>& lines, long offset, int tokens, Encode encode,
                    bool whole, long margin, const PassageOptions& o) {
  const long n = static_cast<long>(lines.size());
  if (n == 0) fail("{}: the text is empty", path);
  const long first = offset < 0 ? n + offset : offset;
  if (first < 0 || first >= n)
    fail("{}: {} {} is outside the text, which has {} lines (use 0..{} or -{}..-1)", path, o.offset, offset, n, n - 1, n);
  if (tokens < 2) fail("{} {} is too few: a passage needs at least 2 tokens", o.tokens, tokens);
  Passage p{path, first, n, {}};
  long take = whole ? n - first : std::min(n - first, 16L);
  for (;;) {
    std::string text;
    for (long i = first; i < first + take; ++i) {
      if (i > first) text += '\n';
      text += lines[i];
    }
    std::vector<int> ids = encode(text);
    if (static_cast<long>(ids.size()) >= tokens + margin || first + take == n) {
      if (static_cast<long>(ids.size()) < tokens && !o.up_to)
        fail("{}: {} {} is beyond the text: only {} tokens follow line {} ({} {}); lower {} or {}", path, o.tokens, tokens,
             ids.size(), first, o.offset, offset, o.tokens, o.offset);
      if (static_cast<long>(ids.size()) < 2)
        fail("{}: only {} token follows line {} ({} {}); a passage needs at least 2: choose an earlier {}", path, ids.size(), first,
             o.offset, offset, o.offset);
      p.cut = static_cast<long>(ids.size()) > tokens;
      ids.resize(std::min<size_t>(ids.size(), static_cast<size_t>(tokens)));
      p.tokens = std::move(ids);
      return p;
    }
    take = std::min(n - first, take * 2);
  }
}

}  // namespace

Passage select_passage(const std::string& path, const std::vector<std::string>& lines, long offset, int tokens,
                       const Tokenizer& tok, const PassageOptions& o) {
  return select_with(path, lines, offset, tokens, [&](const std::string& t) { return tok.encode(t, true, false); },
                     merges_cross_newlines(tok), 1, o);
}

Passage select_passage(const std::string& path, const std::vector<std::string>& lines, long offset, int tokens,
                       const BpeTokenizer& tok, const PassageOptions& o) {
  return select_with(path, lines, offset, tokens, [&](const std::string& t) { return tok.encode(t); }, false, 64, o);
}

long passage_last_line(const Passage& p, long lines_count, size_t first_token,
                       const std::function<std::string(int previous, int id)>& piece) {
  long breaks = 0;
  bool ends_with_break = false;
  for (size_t i = first_token; i < p.tokens.size(); ++i) {
    const std::string s = piece(i > 0 ? p.tokens[i - 1] : -1, p.tokens[i]);
    breaks += std::count(s.begin(), s.end(), '\n');
    if (!s.empty()) ends_with_break = s.back() == '\n';
  }
  const long last = std::min<long>(p.first_line + breaks - (ends_with_break ? 1 : 0), lines_count - 1);
  return std::max(last, p.first_line);
}

}  // namespace oscar
