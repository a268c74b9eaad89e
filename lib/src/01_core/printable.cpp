// printable.cpp: see printable.h.
#include "oscar/01_core/printable.h"

#include <fmt/format.h>

namespace oscar {

namespace {

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 when it is not one (overlong forms, surrogates and
// code points past U+10FFFF are not valid).
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned cp = 0;
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
  if (cp >= 0x80 && cp < 0xA0) return 0;  // C1 controls (e.g. U+009B, a terminal's CSI) are escaped too
  return n;
}

}  // namespace

std::string printable_short(std::string_view s, size_t max_chars) {
  std::string out;
  size_t chars = 0;
  for (size_t i = 0; i < s.size();) {
    if (chars == max_chars) {
      out += "…";
      break;
    }
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_length(s, i);
    if (c == '\n') out += "⏎";
    else if (c == '\t') out += "\\t";
    else if (n == 0 || c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out.append(s.substr(i, n));
    i += n == 0 ? 1 : n;
    ++chars;
  }
  return out;
}

std::string printable(std::string_view s) { return printable_short(s, static_cast<size_t>(-1)); }

}  // namespace oscar
