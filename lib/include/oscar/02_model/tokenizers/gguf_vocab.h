// gguf_vocab.h: a GGUF file's tokenizer.ggml.* metadata as a VocabSpec (bpe_tokenizer.h), with llama.cpp's
// defaults for the keys the file leaves out. Throws Error naming the file and the missing key.
#pragma once
#include "oscar/02_model/tokenizers/bpe_tokenizer.h"
#include "oscar/02_model/formats/gguf.h"

namespace oscar {

VocabSpec vocab_spec_from_gguf(const GgufFile& f);

}  // namespace oscar
