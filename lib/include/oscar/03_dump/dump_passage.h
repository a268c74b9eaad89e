// dump_passage.h: oscar-dump's work: load a model (a llama2.c checkpoint and its tokenizer, or a GGUF file of
// architecture llama/qwen2/qwen3 with the tokenizer in its metadata), pick a passage of a text, run the
// model over it and write dump format v2, layer by layer, as the forward pass produces it. A passage
// whose loss is worse than uniform is refused before the file appears (see allow_high_loss).
#pragma once
#include <string>

#include "oscar/02_model/loaded_model.h"  // is_gguf

namespace oscar {

struct DumpRequest {
  std::string model, tokenizer, text, out;
  long offset = 0;        // first line (negative: from the end)
  int tokens = 512;       // passage length including BOS; kAllTokens: the rest of the text, up to the model's context
  std::string dtype = "float16";
  bool progress = true;
  // A passage whose mean next-token loss is above ln(vocab_size) (worse than a uniform guess) means the
  // tokenizer (or text) does not belong to the model: refused unless this is set (then a warning).
  bool allow_high_loss = false;
};

struct DumpSummary {
  std::string model_name;
  int tokens = 0;
  int context = 0;   // the model's context (seq_len)
  bool cut = false;  // the text went on past the passage
  long first_line = 0;
  double mean_loss = 0;   // mean next-token loss over tokens-1 predictions
  double seconds = 0;
};

DumpSummary dump_passage(const DumpRequest& req);

}  // namespace oscar
