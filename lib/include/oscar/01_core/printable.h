// printable.h: text from files (token texts, GGUF strings, passage lines) made safe for a terminal or a table cell:
// a line break becomes "⏎", a tab "\t", any other control byte, DEL and every byte that is not part of valid UTF-8
// "\xNN", so that a file's author cannot move the cursor, recolour the terminal or break a table row.
#pragma once
#include <string>
#include <string_view>

namespace oscar {

std::string printable(std::string_view s);
// printable(s) cut to at most `max_chars` characters (code points), the cut marked with "…".
std::string printable_short(std::string_view s, size_t max_chars);

}  // namespace oscar
