// tokenizer.h: llama2.c's BPE tokenizer (tokenizer.bin: int32 max_token_length, then per token a
// float32 score, an int32 length and the bytes). encode() gives exactly run.c's ids: optional BOS (1),
// a dummy-prefix space when the text is non-empty, UTF-8 code points looked up whole or split into
// byte-fallback ids (byte + 3), then greedy merges of the highest-scoring pair, leftmost first.
#pragma once
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace oscar {

class Tokenizer {
 public:
  // Reads exactly vocab_size entries; throws Error when the file holds fewer or more.
  static Tokenizer load(const std::string& path, int vocab_size);

  std::vector<int> encode(std::string_view text, bool bos, bool eos) const;
  // The text run.c prints for `token` after `prev` (leading space dropped after BOS, <0xXX> as a byte).
  std::string decode_piece(int prev, int token) const;
  // The vocabulary entry, printable: control and non-UTF-8 bytes escaped (for tables).
  std::string display(int token) const;
  int vocab_size() const { return static_cast<int>(vocab_.size()); }
  const std::string& path() const { return path_; }
  // The entries as stored (spaces as ' ', <0xNN> byte tokens) and their scores (bpe_tokenizer.h converts them).
  const std::vector<std::string>& vocab() const { return vocab_; }
  const std::vector<float>& scores() const { return scores_; }

  static constexpr int kBos = 1, kEos = 2;

 private:
  int lookup(std::string_view s) const;
  std::string path_;
  std::vector<std::string> vocab_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int> index_;
};

}  // namespace oscar
