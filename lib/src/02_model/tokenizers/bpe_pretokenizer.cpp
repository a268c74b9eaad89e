// bpe_pretokenizer.cpp: the pre-tokenizer regexes behind GGUF tokenizer.ggml.pre names, run with PCRE2.
// Patterns (as the models' Hugging Face tokenizer.json files state them):
//   gpt2:      GPT-2's ByteLevel regex;
//   smollm:    SmolLM/StarCoder: every digit alone first (Digits, individual_digits), then the GPT-2
//              regex inside each remaining piece (a piece's end bounds the regex's look-ahead);
//   llama-bpe: Llama 3: letters with one leading non-letter, numbers in groups of up to 3 digits,
//              punctuation runs with trailing newlines, newline runs;
//   qwen2:     Llama 3's regex with single digits.
// The contraction alternatives use (?i:...) as tokenizer.json does; with UCP, PCRE2 folds case by
// Unicode rules (so U+017F LATIN SMALL LETTER LONG S matches 's' as in Hugging Face's Oniguruma).
#include "oscar/02_model/tokenizers/bpe_pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "oscar/01_core/error.h"

namespace oscar {
namespace {

const char* const kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::vector<std::string> patterns_for(const std::string& pre) {
  if (pre == "smollm") return {R"(\p{N})", kGpt2};
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return {kLlama3};
  if (pre == "qwen2") return {kQwen2};
  if (pre == "gpt2") return {kGpt2};
  return {};
}

size_t utf8_len(unsigned char c) { return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1; }

}  // namespace

const char* BpePretokenizer::supported_names() { return "smollm, llama-bpe, llama3, llama-v3, qwen2, gpt2"; }

bool BpePretokenizer::known(const std::string& pre) { return !patterns_for(pre).empty(); }

BpePretokenizer::BpePretokenizer(const std::string& pre, const std::string& source) : patterns_(patterns_for(pre)) {
  if (patterns_.empty())
    fail("{}: unknown pre-tokenizer tokenizer.ggml.pre = '{}'; supported: {}", source, pre, supported_names());
  for (const std::string& p : patterns_) {
    int err = 0;
    PCRE2_SIZE at = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.c_str()), p.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &at, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail("{}: PCRE2 cannot compile the '{}' pre-tokenizer regex at offset {}: {}; install a PCRE2 built with "
           "Unicode support (Debian libpcre2-dev)",
           source, pre, at, reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // the interpreter runs the same pattern when JIT is unavailable
    code_.push_back(code);
  }
}

BpePretokenizer::~BpePretokenizer() {
  for (void* c : code_) pcre2_code_free(static_cast<pcre2_code*>(c));
}

void BpePretokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  std::vector<std::string_view> cur{text}, next;
  if (text.empty()) return;
  for (size_t s = 0; s < code_.size(); ++s) {
    const auto* code = static_cast<const pcre2_code*>(code_[s]);
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    if (!md) fail("pre-tokenizer: out of memory for PCRE2 match data");
    next.clear();
    for (std::string_view piece : cur) {
      const auto* subj = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t pos = 0, gap = 0;  // gap: start of the text not yet emitted
      while (pos < piece.size()) {
        const int rc = pcre2_match(code, subj, piece.size(), pos, 0, md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR msg[256];
          pcre2_get_error_message(rc, msg, sizeof msg);
          pcre2_match_data_free(md);
          fail("pre-tokenizer: PCRE2 match failed: {}", reinterpret_cast<const char*>(msg));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t b = ov[0], e = ov[1];
        if (e == b) {  // no pattern here matches empty; step over one character to be safe
          pos = b + utf8_len(static_cast<unsigned char>(piece[b]));
          continue;
        }
        if (b > gap) next.push_back(piece.substr(gap, b - gap));
        next.push_back(piece.substr(b, e - b));
        gap = pos = e;
      }
      if (gap < piece.size()) next.push_back(piece.substr(gap));
    }
    pcre2_match_data_free(md);
    cur.swap(next);
  }
  out.insert(out.end(), cur.begin(), cur.end());
}

}  // namespace oscar
