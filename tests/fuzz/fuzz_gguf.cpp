// fuzz_gguf.cpp: a GGUF file from a stranger: the reader (header, metadata, tensor table), the model load (shapes and
// the small tensors it dequantizes and checks), the tokenizer built from its metadata, and one short encode. A refusal
// (oscar::Error) is the expected answer to a bad file; anything else is a finding.
#include <cstdint>

#include "fuzz_input.h"
#include "oscar/01_core/error.h"
#include "oscar/02_model/tokenizers/bpe_tokenizer.h"
#include "oscar/02_model/forward/gguf_model.h"
#include "oscar/02_model/tokenizers/gguf_vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = oscar::fuzz::as_file(data, size, ".gguf");
  try {
    const oscar::GgufFile f = oscar::GgufFile::open(path);
    try {  // the tokenizer alone: a file with a vocabulary but no usable weights still exercises it
      const oscar::BpeTokenizer tok(oscar::vocab_spec_from_gguf(f), path);
      (void)tok.encode("In the beginning God created the heaven and the earth.\n\tcaf\xc3\xa9 <|endoftext|>", true);
    } catch (const oscar::Error&) {
    }
    const oscar::GgufModel m = oscar::GgufModel::load(path);
    (void)m.storage();
  } catch (const oscar::Error&) {
  }
  return 0;
}
