// bpe_pretokenizer.h: splits text into the words that byte-level BPE encodes separately, with the regex
// sequence that a GGUF tokenizer.ggml.pre name stands for (compiled by PCRE2 with UTF and UCP, JIT when
// available). Stages run in order; each splits every piece of the previous stage into its matches and the
// text between them (nothing is dropped), so the pieces always concatenate back to the input.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace oscar {

class BpePretokenizer {
 public:
  // The pre-tokenizer names understood, for error messages: "smollm, llama-bpe, llama3, llama-v3, qwen2, gpt2".
  static const char* supported_names();
  // True when `pre` names a known pre-tokenizer.
  static bool known(const std::string& pre);
  // Throws oscar::Error naming `source` when `pre` is unknown.
  BpePretokenizer(const std::string& pre, const std::string& source);
  ~BpePretokenizer();
  BpePretokenizer(const BpePretokenizer&) = delete;
  BpePretokenizer& operator=(const BpePretokenizer&) = delete;

  // Appends the pieces of `text` (views into it) to `out`. Invalid UTF-8 never matches a class and so
  // ends up in the between-match pieces. Thread-safe.
  void split(std::string_view text, std::vector<std::string_view>& out) const;
  const std::vector<std::string>& patterns() const { return patterns_; }

 private:
  std::vector<std::string> patterns_;
  std::vector<void*> code_;  // pcre2_code_8*
};

}  // namespace oscar
