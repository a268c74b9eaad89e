// gguf_vocab.cpp: tokenizer.ggml.* keys -> VocabSpec, key by key (see bpe_tokenizer.h for their meaning).
#include "oscar/02_model/gguf_vocab.h"

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
  if (f.has(k + "token_type")) s.token_types = f.get_i32_array(k + "token_type");
  if (f.has(k + "merges")) s.merges = f.get_string_array(k + "merges");
  auto id = [&](const char* key, int& out) {
    if (f.has(k + key)) out = static_cast<int>(f.get_u32(k + key));
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
