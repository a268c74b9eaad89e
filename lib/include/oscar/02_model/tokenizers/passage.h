// passage.h: picks a passage of a line-oriented text (one verse a line, plain or .gz) as tokens.
// With a llama2.c tokenizer a passage is BOS followed by the encoding of lines[offset..] joined by '\n'
// (run.c's encoding, with its dummy-prefix space); with a GGUF tokenizer, those lines encoded as the file
// says (BOS where add_bos). Cut to `tokens` tokens in all. A negative offset counts lines from the end.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "oscar/02_model/tokenizers/bpe_tokenizer.h"
#include "oscar/02_model/tokenizers/tokenizer.h"

namespace oscar {

struct Passage {
  std::string source;        // file the lines came from
  long first_line = 0;       // 0-based index of the first line used
  long lines_total = 0;      // lines in the file
  std::vector<int> tokens;   // BOS first where the tokenizer adds one
  bool cut = false;          // the text went on past the passage (it was cut at its token count)
};

// The lines of a text file (plain or gzip); throws Error naming the file, byte offset and line when the
// text is not well-formed UTF-8 or holds a NUL byte.
std::vector<std::string> read_lines(const std::string& path);

// The last line of `lines` a passage reads from: its first line plus the line breaks in the text of
// tokens[first_token..] (each decoded by piece(previous id or -1, id)), not counting a final break (it has read
// nothing of the next line); kept within first_line..lines_count-1.
long passage_last_line(const Passage& p, long lines_count, size_t first_token,
                       const std::function<std::string(int previous, int id)>& piece);

// The command-line options that set a passage's offset and length, named in error messages.
struct PassageOptions {
  const char* offset = "--offset";
  const char* tokens = "--tokens";
  bool up_to = false;  // `tokens` is a limit (--tokens all: the model's context): fewer when the text ends first
};
// `--tokens all`: the rest of the text from the offset, up to the model's context (a tool's int option's value).
inline constexpr int kAllTokens = -1;

// Throws Error (naming the file and the options) when the offset is outside the text or the text after it
// has fewer than `tokens` tokens.
Passage select_passage(const std::string& path, const std::vector<std::string>& lines, long offset, int tokens,
                       const Tokenizer& tok, const PassageOptions& options = {});
// The same with a GGUF file's tokenizer: the lines joined by '\n' encoded as one string, BOS only where the
// file says to add it (SmolLM2: none), cut to `tokens` ids.
Passage select_passage(const std::string& path, const std::vector<std::string>& lines, long offset, int tokens,
                       const BpeTokenizer& tok, const PassageOptions& options = {});

}  // namespace oscar
