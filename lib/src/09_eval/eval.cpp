// eval.cpp: oscar-eval's orchestration: every option, file, passage, recipe, calibration and the output
// folder checked first; then the full-precision reference, each recipe's quantized decoding (the CPU
// reference QuantizedKvCache, or GpuKvCache with --gpu), the recall test and greedy generation.
#include "oscar/09_eval/eval.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include "oscar/01_core/error.h"
#include "oscar/01_core/progress.h"
#include "oscar/02_model/loaded_model.h"
#include "oscar/02_model/model.h"
#include "oscar/02_model/passage.h"
#include "oscar/03_dump/layer_source.h"
#include "oscar/05_rotate/rotation.h"
#include "oscar/06_quantize/cache_policy.h"
#include "oscar/08_cache/gpu_kv_cache.h"
#include "oscar/08_cache/quantized_cache.h"
#include "oscar/09_eval/decoding.h"
#include "oscar/09_eval/metrics.h"

namespace fs = std::filesystem;

namespace oscar {

namespace {

constexpr int kDefaultTokens = 1024;

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n\v\f") == std::string::npos; }

// A passage of `lines` with the options that chose it named in every error: the text's emptiness and the
// offset first, then the length against the model's context, then against the text.
Passage pick_passage(const std::string& path, const std::vector<std::string>& lines, long offset, int tokens, int context,
                     const char* context_hint, const LoadedModel& lm, const PassageOptions& o) {
  const long n = static_cast<long>(lines.size());
  if (std::all_of(lines.begin(), lines.end(), blank))
    fail("{}: the text is empty (no line holds any text); give --text a text file, one passage a line", path);
  const long first = offset < 0 ? n + offset : offset;
  if (first < 0 || first >= n)
    fail("{}: {} {} is outside the text, which has {} lines (use 0..{} or -{}..-1)", path, o.offset, offset, n, n - 1, n);
  if (std::all_of(lines.begin() + first, lines.end(), blank))
    fail("{}: {} {} leaves only blank lines (lines {}..{}); choose an earlier {}", path, o.offset, offset, first, n - 1, o.offset);
  if (tokens > context)
    fail("{} {} is beyond the model's context of {} tokens{}; use {} {} or fewer", o.tokens, tokens, context, context_hint, o.tokens, context);
  return lm.select_passage(path, lines, offset, tokens, o);
}

DumpInfo model_info(const LoadedModel& lm) {
  DumpInfo I;
  I.model_name = lm.name;
  I.checkpoint_sha256 = lm.sha256;
  I.n_layers = lm.config.n_layers;
  I.n_heads = lm.config.n_heads;
  I.n_kv_heads = lm.config.n_kv_heads;
  I.head_dim = lm.config.head_dim();
  return I;
}

// What a passage is by content (the model's identity, token ids, the text's sha256 and line range), as
// layer_source.h's passage_origin() says, for either kind of model.
PassageOrigin origin_of(const Passage& p, const std::vector<std::string>& lines, const LoadedModel& lm) {
  PassageOrigin o;
  o.checkpoint_sha256 = lm.sha256;
  o.model_name = lm.name;
  o.token_ids = p.tokens;
  o.text_sha256 = text_lines_sha256(lines);
  o.first_line = p.first_line;
  o.last_line = lm.passage_last_line(p, lines);
  return o;
}

std::string describe(const std::string& text, const PassageOrigin& o, const char* option, long offset) {
  return fmt::format("passage ({} lines {}..{}, {} {}, {} tokens)", fs::path(text).filename().string(), o.first_line, o.last_line, option,
                     offset, o.token_ids.size());
}

}  // namespace

void validate_eval_options(const EvalRequest& req) {
  if (req.bits.empty()) fail("--bits names no bit width; give at least one, e.g. --bits 2");
  for (int b : req.bits)
    if (b < 1 || b > 8) fail("--bits {} out of range; use 1..8", b);
  if (req.tokens != 0 && req.tokens < 2)
    fail("--tokens {} is too few: the evaluated passage needs at least 2 tokens (BOS and one to predict)", req.tokens);
  if (req.calib_tokens != 0 && req.calib_tokens < 2)
    fail("--calib-tokens {} is too few: the calibration passage needs at least 2 tokens", req.calib_tokens);
  for (int d : req.recall_distances)
    if (d < 2)
      fail("--recall {} is not a recall distance: it counts the tokens of other text between the two copies of the passage and "
           "must be at least 2; e.g. --recall 256,512",
           d);
  if (req.recall_span < 1)
    fail("--recall-span {} must be a positive number of tokens (the length of the repeated passage), e.g. --recall-span 64",
         req.recall_span);
  if (req.generate < 0) fail("--generate {} is negative; give the number of tokens to generate greedily, e.g. --generate 48", req.generate);
  if (!req.prompt.empty() && req.generate == 0)
    fail("--prompt is given without --generate; add --generate N (tokens to generate greedily from the prompt) or drop --prompt");
  if (req.prompt.empty() && req.generate > 0)
    fail("--generate {} needs --prompt TEXT (the text to continue greedily)", req.generate);
}

EvalResult run_eval(const EvalRequest& req) {
  // ---- every check before any work ----
  validate_eval_options(req);
  if (req.recipes.empty()) fail("--recipes names no recipe; give at least one preset or recipe file, e.g. --recipes fp16,kivi");
  if (!req.out.empty()) check_output_folder(req.out);
  const LoadedModel lm = LoadedModel::load(req.model, req.tokenizer);
  const ModelConfig& mc = lm.config;
  const auto lines = read_lines(req.text);
  const int ctx = mc.seq_len, hd = mc.head_dim();
  // Resolve every recipe as soon as the model's shape is known, so that a recipe that cannot apply (to this
  // head_dim, or on the GPU) stops the run before any text is read.
  struct Job {
    Recipe r;
    int bits;
    bool gpu;  // attends through the CUDA kernels
  };
  std::vector<Job> jobs;
  bool need_calib = false, need_per_head = false;
  for (const auto& rf : req.recipes) {
    const bool fp = rf.bits.size() == 1 && rf.bits[0] == 16;
    Recipe spec = rf.recipe;
    if (req.gpu && !fp)  // the model's shape first: resolving a recipe for an unsupported head_dim may fail otherwise
      if (const std::string why = gpu_model_unsupported_reason(mc); !why.empty())
        fail("--gpu: recipe '{}' is not supported by the CUDA kernels ({}; {}); run it without --gpu",
             spec.name.find('@') == std::string::npos ? fmt::format("{}@{}", spec.name, req.bits.front()) : spec.name, why, gpu_supported_text());
    if (req.clamp_groups)
      for (TensorQuant* q : {&spec.key, &spec.value})
        if (q->axis == QuantAxis::PerToken && q->group > hd) q->group = 0;  // 0 = head_dim
    for (int b : fp ? std::vector<int>{16} : req.bits) {
      Recipe r = resolve_recipe(spec, b, hd);
      const bool gpu = req.gpu && (r.key.quantized() || r.value.quantized());  // fp16 stays on the CPU
      if (gpu)
        if (const std::string why = gpu_unsupported_reason(r, mc); !why.empty())
          fail("--gpu: recipe '{}' is not supported by the CUDA kernels ({}; {}); run it without --gpu", r.name, why, gpu_supported_text());
      jobs.push_back({std::move(r), b, gpu});
      need_calib = need_calib || jobs.back().r.calibrated();
      need_per_head = need_per_head || jobs.back().r.calibrated_per_kv_head();
    }
  }
  const std::string ctx_hint = fmt::format(" ({} has seq_len {})", req.model, ctx);
  const int tokens = req.tokens > 0 ? req.tokens : std::min(kDefaultTokens, ctx);
  const int calib_tokens = req.calib_tokens > 0 ? req.calib_tokens : std::min(kDefaultTokens, ctx);
  const Passage p = pick_passage(req.text, lines, req.offset, tokens, ctx, ctx_hint.c_str(), lm, {"--offset", "--tokens"});
  if (req.calib_tokens > ctx)
    fail("--calib-tokens {} is beyond the model's context of {} tokens{}; use --calib-tokens {} or fewer", req.calib_tokens, ctx, ctx_hint, ctx);

  std::vector<int> prompt;
  if (req.generate > 0) {
    prompt = lm.encode(req.prompt);
    if (prompt.empty()) fail("--prompt encodes to no tokens; give some text to continue");
    if (static_cast<long>(prompt.size()) + req.generate > ctx)
      fail("--prompt has {} tokens; with --generate {} that exceeds {}'s context of {} tokens: shorten the prompt or generate fewer "
           "tokens",
           prompt.size(), req.generate, req.model, ctx);
  }
  Passage filler;
  int newline = 0;
  if (!req.recall_distances.empty()) {
    const int span = req.recall_span;
    if (span > static_cast<int>(p.tokens.size()) - 1)
      fail("--recall-span {} is longer than the evaluated passage ({} tokens after BOS); lower --recall-span or raise --tokens", span,
           p.tokens.size() - 1);
    const int far = *std::max_element(req.recall_distances.begin(), req.recall_distances.end());
    if (2L * span + far + 1 > ctx)
      fail("--recall {} with --recall-span {} makes a sequence of {} tokens, beyond the model's context of {}{}; lower --recall or "
           "--recall-span",
           far, span, 2L * span + far + 1, ctx, ctx_hint);
    filler = pick_passage(req.text, lines, req.calib_offset, far, ctx, ctx_hint.c_str(), lm, {"--calib-offset", "--recall"});
    newline = lm.newline_token();
  }

  // The calibration passage: the same model, other text by content (token ids, line ranges).
  Passage cal_passage;
  PassageOrigin cal_origin;
  if (need_calib) {
    cal_passage = pick_passage(req.text, lines, req.calib_offset, calib_tokens, ctx, ctx_hint.c_str(), lm, {"--calib-offset", "--calib-tokens"});
    cal_origin = origin_of(cal_passage, lines, lm);
    cal_origin.where = describe(req.text, cal_origin, "--calib-offset", req.calib_offset);
    PassageOrigin eval_origin = origin_of(p, lines, lm);
    eval_origin.where = describe(req.text, eval_origin, "--offset", req.offset);
    const DumpInfo I = model_info(lm);
    check_calibration_source(I, cal_origin, I, eval_origin);
  }
  if (req.gpu) require_cuda_device();

  // ---- work ----
  const Model& m = lm.model();
  std::unique_ptr<CovarianceRotations> calib;
  if (need_calib) {
    // The model reads the calibration passage once; its q, k, v stay in memory (no file).
    const ModelLayerSource src(m, cal_origin, cal_origin.where, {"q", "k", "v"}, false);
    calib = std::make_unique<CovarianceRotations>(fit_covariance_rotations(src, false, need_per_head));
  }
  // The cache a job decodes through, sized for a sequence of `n` tokens.
  auto make_cache = [&](const Job& j, size_t n) -> std::unique_ptr<KvCache> {
    if (j.gpu) return std::make_unique<GpuKvCache>(mc, j.r, calib.get(), static_cast<int>(n));
    return std::make_unique<QuantizedKvCache>(mc, j.r, calib.get());
  };

  EvalResult res;
  res.model_name = lm.name;
  res.tokens = static_cast<int>(p.tokens.size());
  res.passage = fmt::format("{} lines {}.., {} tokens", fs::path(req.text).filename().string(), p.first_line, p.tokens.size());
  const long work = static_cast<long>(jobs.size()) * (1 + static_cast<long>(req.recall_distances.size())) + (req.generate > 0 ? 1 : 0);
  Progress bar("eval", work, req.progress);

  // Full-precision reference, decoded the same way.
  KvCache ref_cache(mc);
  const MatrixRM ref = decode_teacher_forced(m, ref_cache, p.tokens);
  const double ref_loss = mean_next_token_loss(ref, p.tokens);
  const long n_pred = static_cast<long>(p.tokens.size()) - 1;
  for (const Job& j : jobs) {
    const auto cache = make_cache(j, p.tokens.size());
    const MatrixRM q = decode_teacher_forced(m, *cache, p.tokens);
    EvalRow row;
    row.recipe = j.r.name;
    row.bits = j.bits;
    row.gpu = j.gpu;
    row.loss = mean_next_token_loss(q, p.tokens);
    row.ppl = std::exp(row.loss);
    row.dloss = row.loss - ref_loss;
    const LogitAgreement a = compare_logits(ref, q, n_pred);
    row.kl = a.kl;
    row.top1 = a.top1;
    row.eff_bits = effective_bits(j.r, static_cast<long>(p.tokens.size()), hd, mc.n_kv_heads).total();
    row.eff_bits_128k = effective_bits(j.r, 131072, hd, mc.n_kv_heads).total();
    res.rows.push_back(row);
    bar.advance();
  }

  // Recall: BOS + passage A + filler (distance tokens) + passage A again.
  if (!req.recall_distances.empty()) {
    const std::span<const int> a(p.tokens.data() + (lm.bos() >= 0 ? 1 : 0), req.recall_span);
    const std::span<const int> filler_body = std::span<const int>(filler.tokens).subspan(lm.passage_body_start());
    for (int dist : req.recall_distances) {
      const RecallSequence s = recall_sequence(a, newline, filler_body, dist, lm.bos() >= 0 ? lm.bos() : newline);
      for (const Job& j : jobs) {
        const auto cache = make_cache(j, s.tokens.size());
        const MatrixRM q = decode_teacher_forced(m, *cache, s.tokens);
        res.recall.push_back({j.r.name, dist, span_loss(q, s.tokens, s.repeat, s.span), span_loss(q, s.tokens, s.first, s.span), j.gpu});
        bar.advance();
      }
    }
  }

  // Greedy generation from a fixed prompt.
  if (req.generate > 0) {
    KvCache fp(mc);
    const std::vector<int> base = decode_greedy(m, fp, prompt, req.generate);
    auto text_of = [&](const std::vector<int>& ids) {
      std::string s;
      int prev = prompt.back();
      for (int t : ids) s += lm.decode_piece(prev, t), prev = t;
      return s;
    };
    res.greedy.push_back({"full precision (fp32)", text_of(base), static_cast<int>(base.size()), static_cast<int>(base.size())});
    for (const Job& j : jobs) {
      const auto cache = make_cache(j, std::min<size_t>(prompt.size() + req.generate, ctx));
      const std::vector<int> ids = decode_greedy(m, *cache, prompt, req.generate);
      res.greedy.push_back({j.r.name, text_of(ids), shared_prefix(ids, base), static_cast<int>(ids.size()), j.gpu});
    }
    bar.advance();
  }
  bar.done();
  return res;
}

}  // namespace oscar
