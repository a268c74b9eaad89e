// dump_passage.cpp: the passage -> forward pass -> HDF5 dump pipeline.
#include "oscar/03_dump/dump_passage.h"

#include <chrono>
#include <cmath>
#include <filesystem>

#include "oscar/02_model/checkpoint.h"
#include "oscar/03_dump/dump.h"
#include "oscar/01_core/error.h"
#include "oscar/01_core/output_files.h"
#include "oscar/02_model/model.h"
#include "oscar/02_model/passage.h"
#include "oscar/01_core/progress.h"
#include "oscar/02_model/tokenizer.h"

namespace oscar {

DumpSummary dump_passage(const DumpRequest& req) {
  const auto t0 = std::chrono::steady_clock::now();
  if (req.dtype != "float32" && req.dtype != "float16") fail("--dtype {} is not supported (use float32 or float16)", req.dtype);
  check_output_file(req.out);  // before loading anything; DumpWriter checks the room once the size is known
  const Checkpoint ck = load_checkpoint(req.model);
  const Tokenizer tok = Tokenizer::load(req.tokenizer, ck.config.vocab_size);
  const auto lines = read_lines(req.text);
  if (req.tokens > ck.config.seq_len)
    fail("--tokens {} is beyond the model's context: {} has seq_len {}; use --tokens {} or fewer", req.tokens, req.model,
         ck.config.seq_len, ck.config.seq_len);
  const Passage p = select_passage(req.text, lines, req.offset, req.tokens, tok);

  DumpInfo info;
  info.model_name = ck.name;
  info.checkpoint_sha256 = ck.sha256;
  info.n_layers = ck.config.n_layers;
  info.n_heads = ck.config.n_heads;
  info.n_kv_heads = ck.config.n_kv_heads;
  info.head_dim = ck.config.head_dim();
  info.text_source = fmt::format("{} lines {}.. ({} of {} lines), BOS + llama2.c encoding, first {} tokens",
                                 std::filesystem::path(req.text).filename().string(), p.first_line,
                                 p.lines_total - p.first_line, p.lines_total, p.tokens.size());
  info.token_count = static_cast<long>(p.tokens.size());
  info.storage_dtype = req.dtype;
  info.producer = "oscar-dump " OSCAR_VERSION;
  std::vector<std::string> text;
  for (int id : p.tokens) text.push_back(tok.display(id));

  const Model model(ck);
  KvCache cache(ck.config);
  DumpWriter w(req.out, info, p.tokens, text);
  Progress bar("forward + dump", ck.config.n_layers, req.progress);
  const MatrixRM logits = model.forward(p.tokens, cache, [&](const LayerQKV& a) {
    w.write_layer(a);  // streamed: each layer goes to disk as the forward pass produces it
    bar.advance();
  });
  bar.done();
  DumpSummary s;
  s.model_name = ck.name;
  s.tokens = static_cast<int>(p.tokens.size());
  s.first_line = p.first_line;
  s.mean_loss = mean_next_token_loss(logits, p.tokens);
  const double uniform = std::log(static_cast<double>(ck.config.vocab_size));
  if (!(s.mean_loss <= uniform)) {  // NaN too
    const std::string why = fmt::format(
        "the passage's mean next-token loss is {:.2f} nats, above the {:.2f} nats of a uniform guess over the {} tokens "
        "of the vocabulary: the tokenizer probably does not belong to the model {} (or the text is nothing like its "
        "training text)",
        s.mean_loss, uniform, ck.config.vocab_size, req.model);
    if (!req.allow_high_loss)
      fail("{}: {}; use the tokenizer the model was trained with, or pass --allow-high-loss to keep the dump", req.tokenizer,
           why);
    fmt::print(stderr, "warning: {}: {}; kept (--allow-high-loss)\n", req.tokenizer, why);
  }
  w.set_mean_next_token_loss(s.mean_loss);
  w.finish();
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace oscar
