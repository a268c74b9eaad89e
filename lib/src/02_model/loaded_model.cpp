// loaded_model.cpp: loading either kind of model file with its tokenizer, and the one tokenizer facade.
#include "oscar/02_model/loaded_model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "oscar/01_core/error.h"
#include "oscar/02_model/tokenizers/gguf_vocab.h"

namespace oscar {

// By content, not by name: a file starting with the GGUF magic is a GGUF whatever it is called (a .bin GGUF is common).
// A non-regular file is left to the loaders, which refuse it without blocking.
bool is_gguf(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::path(path).extension() == ".gguf") return true;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

LoadedModel LoadedModel::load(const std::string& model, const std::string& tokenizer, const char* tokenizer_option) {
  LoadedModel m;
  m.path = model;
  if (is_gguf(model)) {
    if (!tokenizer.empty())
      fail("{}: a GGUF file carries its own tokenizer; drop {} {}", model, tokenizer_option, tokenizer);
    m.gguf.emplace(GgufModel::load(model));
    m.bpe.emplace(vocab_spec_from_gguf(m.gguf->file()), model);
    m.config = m.gguf->config();
    m.name = m.gguf->name();
    m.sha256 = m.gguf->sha256();
    m.tokenizer_source = model;
    m.encoding = fmt::format("the GGUF's {} tokenizer{}", m.bpe->spec().model, m.bpe->spec().add_bos ? " with BOS" : " (no BOS)");
    if (m.bpe->vocab_size() != m.config.vocab_size)
      fail("{}: the tokenizer has {} tokens but the model's embedding {} rows; the file is inconsistent", model, m.bpe->vocab_size(),
           m.config.vocab_size);
  } else {
    if (tokenizer.empty()) fail("{}: a llama2.c checkpoint needs {} (its tokenizer.bin)", model, tokenizer_option);
    m.ck = std::make_unique<Checkpoint>(load_checkpoint(model));
    m.tok.emplace(Tokenizer::load(tokenizer, m.ck->config.vocab_size));
    m.config = m.ck->config;
    m.name = m.ck->name;
    m.sha256 = m.ck->sha256;
    m.tokenizer_source = tokenizer;
    m.encoding = "BOS + llama2.c encoding";
    m.llama2c = std::make_unique<Model>(*m.ck);
  }
  return m;
}

std::vector<int> LoadedModel::encode(std::string_view text) const { return bpe ? bpe->encode(text) : tok->encode(text, true, false); }

int LoadedModel::bos() const {
  if (!bpe) return Tokenizer::kBos;
  return bpe->spec().add_bos ? bpe->spec().bos : -1;
}

std::string LoadedModel::decode_piece(int prev, int token) const { return bpe ? bpe->piece(token) : tok->decode_piece(prev, token); }

std::string LoadedModel::display(int id) const { return bpe ? bpe->piece(id) : tok->display(id); }

Passage LoadedModel::select_passage(const std::string& path, const std::vector<std::string>& lines, long offset, int tokens,
                                    const PassageOptions& options) const {
  return bpe ? oscar::select_passage(path, lines, offset, tokens, *bpe, options)
             : oscar::select_passage(path, lines, offset, tokens, *tok, options);
}

int LoadedModel::newline_token() const {
  const std::vector<int> ids = bpe ? bpe->encode_text("\n") : tok->encode("\n", false, false);
  // llama2.c's encoding puts a dummy-prefix space first: the line break is its last id.
  if (ids.empty() || (bpe && ids.size() != 1))
    fail("{}: the tokenizer encodes a line break as {} tokens, not one; the recall test needs a single newline token",
         tokenizer_source, ids.size());
  return ids.back();
}

int LoadedModel::passage_body_start() const {
  const int after_bos = bos() >= 0 ? 1 : 0;
  const bool space_prefix = !bpe || (bpe->spec().model == "llama" && bpe->spec().add_space_prefix);
  return after_bos + (space_prefix ? 1 : 0);
}

long LoadedModel::passage_last_line(const Passage& p, const std::vector<std::string>& lines) const {
  return oscar::passage_last_line(p, static_cast<long>(lines.size()), bos() >= 0 ? 1 : 0,
                                  [&](int prev, int id) { return decode_piece(prev, id); });
}

}  // namespace oscar
