// dump_passage.cpp: the passage -> forward pass -> HDF5 dump pipeline.
#include "oscar/03_dump/dump_passage.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>

#include "oscar/02_model/loaded_model.h"
#include "oscar/03_dump/dump.h"
#include "oscar/01_core/error.h"
#include "oscar/01_core/output_files.h"
#include "oscar/02_model/forward/model.h"
#include "oscar/02_model/tokenizers/passage.h"
#include "oscar/01_core/progress.h"

namespace oscar {

namespace {
long first_nonfinite_row(const MatrixRM& m) {
  for (long t = 0; t < m.rows(); ++t)
    if (!m.row(t).allFinite()) return t;
  return -1;
}
}  // namespace

DumpSummary dump_passage(const DumpRequest& req) {
  const auto t0 = std::chrono::steady_clock::now();
  if (req.dtype != "float32" && req.dtype != "float16") fail("--dtype {} is not supported (use float32 or float16)", req.dtype);
  check_output_file(req.out);  // before loading anything; DumpWriter checks the room once the size is known
  check_not_input(req.out, {req.model, req.tokenizer, req.text});
  const LoadedModel lm = LoadedModel::load(req.model, req.tokenizer);
  const ModelConfig& cfg = lm.config;
  const auto lines = read_lines(req.text);
  if (req.tokens > cfg.seq_len)
    fail("--tokens {} is beyond the model's context: {} has seq_len {}; use --tokens {} or fewer (or --tokens all)", req.tokens,
         req.model, cfg.seq_len, cfg.seq_len);
  PassageOptions po;
  po.up_to = req.tokens == kAllTokens;
  const Passage p = lm.select_passage(req.text, lines, req.offset, po.up_to ? cfg.seq_len : req.tokens, po);

  DumpInfo info;
  info.model_name = lm.name;
  info.checkpoint_sha256 = lm.sha256;
  set_model_fields(info, cfg);  // shapes, RoPE, architecture, config_json, per-layer attention (v2)
  info.text_source = fmt::format("{} lines {}.. ({} of {} lines), {}, first {} tokens",
                                 std::filesystem::path(req.text).filename().string(), p.first_line,
                                 p.lines_total - p.first_line, p.lines_total, lm.encoding, p.tokens.size());
  info.token_count = static_cast<long>(p.tokens.size());
  info.storage_dtype = req.dtype;
  info.producer = "oscar-dump " OSCAR_VERSION;
  std::vector<std::string> text;
  for (int id : p.tokens) text.push_back(lm.display(id));

  const Model& model = lm.model();
  KvCache cache(cfg);
  DumpWriter w(req.out, info, p.tokens, text);
  Progress bar("forward + dump", cfg.n_layers, req.progress);
  const MatrixRM logits = model.forward(p.tokens, cache, [&](const LayerQKV& a) {
    // a damaged model shows here first: name it, not the tokenizer or the output file
    for (const auto& [name, m] : {std::pair<const char*, const MatrixRM*>{"q", &a.q}, {"k", &a.k}, {"v", &a.v}})
      if (const long t = first_nonfinite_row(*m); t >= 0)
        fail("{}: layer {}'s {} at position {} is not finite (NaN or infinity); the model file is damaged or its weights "
             "overflow: check its sha256 or fetch it again",
             req.model, a.layer, name, a.first_position + t);
    w.write_layer(a);  // streamed: each layer goes to disk as the forward pass produces it
    bar.advance();
  });
  bar.done();
  DumpSummary s;
  s.model_name = lm.name;
  s.tokens = static_cast<int>(p.tokens.size());
  s.first_line = p.first_line;
  s.context = cfg.seq_len;
  s.cut = p.cut;
  if (const long t = first_nonfinite_row(logits); t >= 0)
    fail("{}: the logits at position {} are not finite (NaN or infinity); the model file is damaged or its weights "
         "overflow: check its sha256 or fetch it again",
         req.model, t);
  s.mean_loss = mean_next_token_loss(logits, p.tokens);
  const double uniform = std::log(static_cast<double>(cfg.vocab_size));
  if (!(s.mean_loss <= uniform)) {  // NaN too
    const std::string why = fmt::format(
        "the passage's mean next-token loss is {:.2f} nats, above the {:.2f} nats of a uniform guess over the {} tokens "
        "of the vocabulary: the tokenizer probably does not belong to the model {} (or the text is nothing like its "
        "training text)",
        s.mean_loss, uniform, cfg.vocab_size, req.model);
    if (!req.allow_high_loss)
      fail("{}: {}; use the tokenizer the model was trained with, or pass --allow-high-loss to keep the dump",
           lm.tokenizer_source, why);
    fmt::print(stderr, "warning: {}: {}; kept (--allow-high-loss)\n", lm.tokenizer_source, why);
  }
  w.set_mean_next_token_loss(s.mean_loss);
  w.finish();
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace oscar
