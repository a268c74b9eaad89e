// gguf_vocab.cpp: tokenizer.ggml.* keys -> VocabSpec, key by key (see bpe_tokenizer.h for their meaning).
#include "oscar/02_model/tokenizers/gguf_vocab.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "oscar/01_core/error.h"

namespace oscar {

VocabSpec vocab_spec_from_gguf(const GgufFile& f) {
  const std::string k = "tokenizer.ggml.";
  if (!f.has(k + "model"))
    fail("{}: no tokenizer metadata (tokenizer.ggml.model is missing); use a GGUF file converted with its tokenizer",
         f.path());
  const std::string model = f.get_string(k + "model");
  const std::string pre = f.has(k + "pre") ? f.get_string(k + "pre") : std::string();
  VocabSpec s = vocab_spec_defaults(model, pre);
  s.model = model;
  s.pre = pre;
  if (!f.has(k + "tokens")) fail("{}: tokenizer.ggml.tokens is missing; the file carries no vocabulary", f.path());
  s.tokens = f.get_string_array(k + "tokens");
  if (f.has(k + "scores")) s.scores = f.get_f32_array(k + "scores");
  for (size_t i = 0; i < s.scores.size(); ++i)
    if (!std::isfinite(s.scores[i]))
      fail("{}: tokenizer.ggml.scores[{}] = {} is not a finite number; the file's tokenizer metadata is damaged", f.path(), i,
           s.scores[i]);
  if (f.has(k + "token_type")) s.token_types = f.get_i32_array(k + "token_type");
  if (f.has(k + "merges")) s.merges = f.get_string_array(k + "merges");
  auto id = [&](const char* key, int& out) {  // -1 (as int32, or 0xFFFFFFFF as uint32): no such token
    if (!f.has(k + key)) return;
    const int64_t v = f.get_i64(k + key);
    out = v == -1 || v == 0xFFFFFFFFll ? -1 : static_cast<int>(std::clamp<int64_t>(v, -2, INT32_MAX));
  };
  id("bos_token_id", s.bos);
  id("eos_token_id", s.eos);
  id("unknown_token_id", s.unk);
  id("padding_token_id", s.pad);
  if (f.has(k + "add_bos_token")) s.add_bos = f.get_bool(k + "add_bos_token");
  if (f.has(k + "add_eos_token")) s.add_eos = f.get_bool(k + "add_eos_token");
  if (f.has(k + "add_space_prefix")) s.add_space_prefix = f.get_bool(k + "add_space_prefix");
  return s;
}

}  // namespace oscar
