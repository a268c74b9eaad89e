// bpe_tokenizer.h: tokenizers described by a GGUF file's tokenizer.ggml.* metadata. VocabSpec holds those
// values; BpeTokenizer encodes text to ids and decodes ids to bytes for two vocabulary kinds:
//   "gpt2":  byte-level BPE (GPT-2 byte alphabet, merges applied lowest rank first) after a regex
//            pre-tokenizer chosen by `pre` (PCRE2, UTF + UCP); see pre-tokenizer names below;
//   "llama": SentencePiece-style BPE (spaces as U+2581, optional leading U+2581, merges of the
//            highest-scoring pair, byte fallback to <0xNN> tokens, else the unknown token).
// A spec that cannot be used (no tokens, gpt2 without merges, unknown model or pre) throws oscar::Error.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace oscar {

class Tokenizer;

// GGUF token types (tokenizer.ggml.token_type), as SentencePiece numbers them.
enum VocabTokenType : int32_t {
  kTokUndefined = 0,
  kTokNormal = 1,
  kTokUnknown = 2,
  kTokControl = 3,
  kTokUserDefined = 4,
  kTokUnused = 5,
  kTokByte = 6,
};

// The tokenizer.ggml.* metadata of a GGUF file, key by key:
//   model        tokenizer.ggml.model            "gpt2" | "llama"
//   pre          tokenizer.ggml.pre              gpt2 only: "smollm", "llama-bpe" (= "llama3", "llama-v3"),
//                                                "qwen2", "gpt2"; ignored for llama
//   tokens       tokenizer.ggml.tokens           token texts (gpt2: in the GPT-2 byte alphabet;
//                                                llama: U+2581 for spaces, <0xNN> for byte tokens)
//   scores       tokenizer.ggml.scores           llama: merge priority (higher first); may be empty for gpt2
//   token_types  tokenizer.ggml.token_type       VocabTokenType per token; may be empty (all normal)
//   merges       tokenizer.ggml.merges           gpt2: "left right" per merge, rank = index
//   bos/eos/unk/pad  tokenizer.ggml.{bos,eos,unknown,padding}_token_id   -1 = none
//   add_bos/add_eos  tokenizer.ggml.add_{bos,eos}_token
//   add_space_prefix tokenizer.ggml.add_space_prefix   llama only
// Defaults when a key is missing from the file are NOT the member initialisers below: start from
// vocab_spec_defaults(model, pre) and overwrite the keys the file has (llama.cpp's behaviour).
struct VocabSpec {
  std::string model;  // "gpt2" | "llama"
  std::string pre;
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> token_types;
  std::vector<std::string> merges;
  int bos = -1, eos = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false;
  bool add_space_prefix = true;
};

// The values llama.cpp assumes for keys that a GGUF file leaves out:
//   llama: bos 1, eos 2, unk 0, pad none, add_bos true, add_eos false, add_space_prefix true;
//   gpt2:  bos 11, eos 11 (GPT-2's own ids), unk and pad none, add_bos false except for the
//          llama-bpe family (true), add_eos false, add_space_prefix false.
// Other models and pre names get the gpt2/llama defaults of their kind; BpeTokenizer rejects them later
// (llama.cpp would fall back to its "default" regexes for a missing or unknown pre; that is an error here).
VocabSpec vocab_spec_defaults(const std::string& model, const std::string& pre);

// A llama2.c tokenizer (tok512.bin) as a SentencePiece-style llama VocabSpec: token texts with ' '
// turned back into U+2581, ids 0/1/2 as <unk>/<s>/</s> (unknown, control, control), "<0xNN>" entries as
// byte tokens, bos 1, eos 2, unk 0, add_bos true, add_space_prefix true.
VocabSpec vocab_spec_from_llama2c(const Tokenizer& tok);

class BpePretokenizer;  // bpe_pretokenizer.h: the compiled PCRE2 regexes

class BpeTokenizer {
 public:
  // Validates `spec` and builds the lookup tables; `source` names where the spec came from (a file)
  // in error messages.
  explicit BpeTokenizer(VocabSpec spec, std::string source = "vocabulary");
  ~BpeTokenizer();
  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;

  // Token ids of `text`, with BOS first when spec.add_bos and EOS last when spec.add_eos. Special
  // tokens' texts inside `text` are encoded as plain text (not parsed). Thread-safe.
  std::vector<int> encode(std::string_view text) const;
  // As encode(), but with parse_special the texts of control, user-defined and unknown tokens (such as
  // "<|im_start|>") inside `text` become those tokens, leftmost-longest first; the text between them is
  // encoded as usual (llama: each such stretch gets its own space prefix, as llama.cpp does).
  std::vector<int> encode(std::string_view text, bool parse_special) const;
  // The ids of `text` alone: no BOS/EOS.
  std::vector<int> encode_text(std::string_view text) const;
  // The token's text as bytes: gpt2 pieces mapped back from the byte alphabet, llama <0xNN> as the
  // byte and U+2581 as ' '; control and user-defined tokens as their text. Throws on a bad id.
  std::string piece(int id) const;
  // The pieces concatenated; for llama with add_space_prefix, the one space that encoding added in front
  // of the text (the first piece after the start or after BOS) is dropped, so decode(encode(t)) == t.
  std::string decode(const std::vector<int>& ids) const;

  const VocabSpec& spec() const { return spec_; }
  int vocab_size() const { return static_cast<int>(spec_.tokens.size()); }
  // The id of a token text (exact, in the vocabulary's own alphabet), or -1. When a text occurs twice
  // (llama.cpp refuses such files; llama2.c files may have it) the first id wins, as in oscar::Tokenizer.
  int find(std::string_view token_text) const;

 private:
  void encode_plain(std::string_view text, std::vector<int>& out) const;
  void encode_gpt2(std::string_view text, std::vector<int>& out) const;
  void encode_spm(std::string_view text, std::vector<int>& out) const;
  // Byte-level BPE of one pre-tokenized word (raw bytes), appended to out.
  void bpe_word(std::string_view word, std::vector<int>& out) const;
  int type_of(int id) const { return spec_.token_types.empty() ? kTokNormal : spec_.token_types[id]; }

  VocabSpec spec_;
  std::string source_;
  bool gpt2_ = false;
  bool ignore_merges_ = false;  // llama-bpe: a word that is itself a token is not split
  std::unordered_map<std::string_view, int> index_;  // views into spec_.tokens (first occurrence wins)
  std::vector<std::vector<int>> special_by_byte_;     // control/user-defined ids by first byte, longest first
  // gpt2
  std::unique_ptr<BpePretokenizer> pre_;
  int byte_token_[256];                                  // id of each byte's alphabet character, -1 if absent
  std::unordered_map<uint64_t, uint64_t> merge_rank_;    // (left id, right id) -> (rank << 32 | merged id)
  // llama
  int byte_fallback_[256];                               // id of <0xNN>, -1 if absent
};

}  // namespace oscar
