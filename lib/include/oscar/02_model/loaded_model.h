// loaded_model.h: a model ready to run, with its tokenizer, from either kind of file: a llama2.c checkpoint
// plus its tokenizer.bin, or a GGUF file (the tokenizer from its tokenizer.ggml.* metadata). One facade for
// the tools: encode as the model expects (BOS where the model/file says), decode generated pieces, display a
// token, select a passage, the newline token; callers never branch on the file kind.
// load() throws oscar::Error naming the file (and the option to change) on a bad pair of files.
#pragma once
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "oscar/02_model/tokenizers/bpe_tokenizer.h"
#include "oscar/02_model/formats/checkpoint.h"
#include "oscar/02_model/forward/gguf_model.h"
#include "oscar/02_model/forward/model.h"
#include "oscar/02_model/tokenizers/passage.h"
#include "oscar/02_model/tokenizers/tokenizer.h"

namespace oscar {

// True for a model file named *.gguf (its tokenizer comes from the file; no --tokenizer).
bool is_gguf(const std::string& path);

struct LoadedModel {
  // `model` is a *.gguf file (then `tokenizer` must be empty: the file carries it) or a llama2.c
  // checkpoint (then `tokenizer` names its tokenizer.bin). `tokenizer_option` is the flag named in errors.
  static LoadedModel load(const std::string& model, const std::string& tokenizer, const char* tokenizer_option = "--tokenizer");

  std::string path;              // the model file
  std::string name, sha256;      // the model's identity (sha256 of the checkpoint or of the whole GGUF file)
  std::string tokenizer_source;  // the file the tokenizer came from (the GGUF itself, or tokenizer.bin)
  std::string encoding;          // how passages are encoded, for dump attributes and tables
  ModelConfig config;

  const Model& model() const { return gguf ? gguf->model() : *llama2c; }
  bool from_gguf() const { return gguf.has_value(); }

  // ---- the tokenizer facade ----
  // `text` as the model reads a document: BOS first where the model adds one (llama2.c: always, with the
  // dummy-prefix space; GGUF: as tokenizer.ggml.add_bos_token says).
  std::vector<int> encode(std::string_view text) const;
  // The BOS id that encode() puts first, or -1 when it adds none.
  int bos() const;
  // The text that `token` adds to generated output after `prev` (llama2.c: run.c's rule; GGUF: the
  // token's bytes, which may be part of a UTF-8 character that the next pieces complete).
  std::string decode_piece(int prev, int token) const;
  // The vocabulary entry of `id`, for tables and dump token texts.
  std::string display(int id) const;
  // The passage of `tokens` ids starting at line `offset` of `lines` (passage.h), encoded as encode() does.
  Passage select_passage(const std::string& path, const std::vector<std::string>& lines, long offset, int tokens,
                         const PassageOptions& options = {}) const;
  // The id of "\n" alone; throws Error when the tokenizer encodes a line break as more than one token.
  int newline_token() const;
  // The index of a passage's first id that can follow a line break inside other text: after BOS, and for
  // llama2.c also after the first piece, which carries the dummy-prefix space.
  int passage_body_start() const;
  // The last line (0-based, inclusive) of `lines` that passage `p` reads: its first line plus the line
  // breaks its tokens decode to (a passage that ends on a break has read nothing of the next line).
  long passage_last_line(const Passage& p, const std::vector<std::string>& lines) const;

  // The files behind the facade (one of each pair is set). Heap-held: Model keeps references into them.
  std::unique_ptr<Checkpoint> ck;
  std::unique_ptr<Model> llama2c;
  std::optional<Tokenizer> tok;
  std::optional<GgufModel> gguf;
  std::optional<BpeTokenizer> bpe;
};

}  // namespace oscar
