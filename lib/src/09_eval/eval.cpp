// eval.cpp: oscar-eval's orchestration: every option, file, passage, recipe, calibration and the output
// folder checked first; then the full-precision reference, each recipe's quantized decoding (the CPU
// reference QuantizedKvCache, or GpuKvCache with --gpu), the recall test and greedy generation.
#include "oscar/09_eval/eval.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include <fmt/ranges.h>

#include "oscar/01_core/error.h"
#include "oscar/01_core/output_files.h"
#include "oscar/01_core/progress.h"
#include "oscar/02_model/loaded_model.h"
#include "oscar/02_model/forward/model.h"
#include "oscar/02_model/tokenizers/passage.h"
#include "oscar/03_dump/layer_source.h"
#include "oscar/05_rotate/rotation.h"
#include "oscar/06_quantize/cache_policy.h"
#include "oscar/08_cache/gpu_kv_cache.h"
#include "oscar/08_cache/quantized_cache.h"
#include "oscar/09_eval/decoding.h"
#include "oscar/09_eval/metrics.h"
#include "oscar/11_report/verdict.h"

namespace fs = std::filesystem;

namespace oscar {

namespace {

constexpr int kDefaultTokens = 1024;
constexpr int kBootstrapBlock = 32;  // consecutive predictions resampled together (their losses are dependent)

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

std::string describe(const std::string& text, const PassageOrigin& o, const std::string& option) {
  return fmt::format("passage ({} lines {}..{}, {}, {} tokens)", fs::path(text).filename().string(), o.first_line, o.last_line, option,
                     o.token_ids.size());
}

}  // namespace

void validate_eval_options(const EvalRequest& req) {
  if (req.bits.empty()) fail("--bits names no bit width; give at least one, e.g. --bits 2");
  for (size_t i = 0; i < req.bits.size(); ++i) {
    if (req.bits[i] < 1 || req.bits[i] > 8) fail("--bits {} out of range; use 1..8", req.bits[i]);
    if (std::find(req.bits.begin(), req.bits.begin() + static_cast<long>(i), req.bits[i]) != req.bits.begin() + static_cast<long>(i))
      fail("--bits names {} twice; give each width once", req.bits[i]);
  }
  if (req.tokens != 0 && req.tokens != kAllTokens && req.tokens < 2)
    fail("--tokens {} is too few: the evaluated passage needs at least 2 tokens (BOS and one to predict)", req.tokens);
  if (req.calib_tokens != 0 && req.calib_tokens != kAllTokens && req.calib_tokens < 2)
    fail("--calib-tokens {} is too few: the calibration passage needs at least 2 tokens", req.calib_tokens);
  if (!req.calib_dump.empty() && (!req.calib_text.empty() || req.calib_tokens != 0))
    fail("--calib-dump takes the rotations from a dump: drop --calib-text and --calib-tokens (they choose a passage instead)");
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
  if (req.generate_context < -1)
    fail("--generate-context {} is negative; give the tokens of other text before the prompt (0: none), or leave it out", req.generate_context);
  eval_metric(req.metric);  // names --metric when unknown
  if (!req.tasks.empty()) {
    if (!req.recall_distances.empty() || req.generate > 0)
      fail("--tasks evaluates the task file alone: drop --recall and --prompt/--generate (or run them without --tasks)");
    if (req.gpu)
      fail("--tasks runs on the CPU reference caches; for the CUDA kernels run experiments/hf_eval.py --tasks, or drop --gpu");
  }
}

VerdictMetric eval_metric(const std::string& name) {
  if (name == "kl") return {"kl", "KL(fp32 ‖ quant) of the next-token distributions", false, "predicted positions", kBootstrapBlock};
  if (name == "dloss") return {"dloss", "Δ loss vs fp32 (nats)", false, "predicted positions", kBootstrapBlock};
  if (name == "output-error")
    fail("--metric output-error is oscar-sweep's (attention output error); oscar-eval ranks by kl or dloss");
  fail("--metric '{}' is unknown; use kl (KL of the next-token distributions) or dloss (loss increase)", name);
}

EvalResult run_eval(const EvalRequest& req) {
  // ---- every check before any work ----
  validate_eval_options(req);
  if (req.recipes.empty()) fail("--recipes names no recipe; give at least one preset or recipe file, e.g. --recipes fp16,kivi");
  if (!req.out.empty()) {
    check_output_folder(req.out);
    check_not_input(req.out, {"eval.csv", "eval.md", "eval.json", "recall.csv", "recall.png", "tasks.md", "tasks.csv", "answers.jsonl"},
                    {req.model, req.tokenizer, req.text, req.calib_text, req.calib_dump, req.tasks});
  }
  const std::vector<TaskSample> task_samples = req.tasks.empty() ? std::vector<TaskSample>{} : read_tasks_jsonl(req.tasks);
  if (!req.tasks.empty() && task_samples.empty()) fail("{}: the task file holds no task; write one with oscar-tasks", req.tasks);
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
  const int tokens = req.tokens == kAllTokens ? ctx : req.tokens > 0 ? req.tokens : std::min(kDefaultTokens, ctx);
  const int calib_tokens = req.calib_tokens == kAllTokens ? ctx : req.calib_tokens > 0 ? req.calib_tokens : std::min(kDefaultTokens, ctx);
  const Passage p = pick_passage(req.text, lines, req.offset, tokens, ctx, ctx_hint.c_str(), lm,
                                 {"--offset", "--tokens", req.tokens == kAllTokens});
  if (req.calib_tokens > ctx)
    fail("--calib-tokens {} is beyond the model's context of {} tokens{}; use --calib-tokens {} or fewer", req.calib_tokens, ctx, ctx_hint, ctx);
  // The calibration text (and the recall filler's and greedy context's): --calib-text, else --text from --calib-offset,
  // by default the line after the evaluated passage.
  const std::string& cal_text = req.calib_text.empty() ? req.text : req.calib_text;
  const std::vector<std::string> cal_lines_own = req.calib_text.empty() ? std::vector<std::string>{} : read_lines(req.calib_text);
  const std::vector<std::string>& cal_lines = req.calib_text.empty() ? lines : cal_lines_own;
  long cal_offset = req.calib_offset;
  if (cal_offset == kCalibAfterEval) {
    if (!req.calib_text.empty()) cal_offset = 0;
    else {
      cal_offset = lm.passage_last_line(p, lines) + 1;
      if (cal_offset >= static_cast<long>(lines.size()))
        fail("{}: the evaluated passage reaches the text's end, so no text follows it for the calibration passage, the recall test "
             "and the greedy prompt's context; give --calib-text FILE (other text), --calib-offset LINE, or an earlier --offset",
             req.text);
    }
  }
  const std::string cal_offset_option = req.calib_offset == kCalibAfterEval && req.calib_text.empty()
                                            ? fmt::format("--calib-offset after (line {})", cal_offset)
                                            : fmt::format("--calib-offset {}", cal_offset);

  // The lengths the end-to-end checks need so that every recipe quantizes what they test: the recalled passage
  // starts past the largest sink, and the greedy prompt follows enough other text that at least half of every
  // recipe's cache is in low bits when generation starts.
  int max_sink = 0;
  long need_context = 0;
  for (const Job& j : jobs) {
    if (!j.r.key.quantized() && !j.r.value.quantized()) continue;
    max_sink = std::max({max_sink, j.r.windows.key.sink, j.r.windows.value.sink});
    const long t = tokens_for_quantized_share(j.r, kMinQuantizedShare, ctx);
    need_context = std::max<long>(need_context, t > 0 ? t : ctx);  // 0: not within the context; as much as it holds
  }
  std::vector<int> prompt;
  int gen_context = 0;
  if (req.generate > 0) {
    prompt = lm.encode(req.prompt);
    if (prompt.empty()) fail("--prompt encodes to no tokens; give some text to continue");
    const long room = static_cast<long>(ctx) - static_cast<long>(prompt.size()) - req.generate - 1;
    if (room < 0)
      fail("--prompt has {} tokens; with --generate {} that exceeds {}'s context of {} tokens: shorten the prompt or generate fewer "
           "tokens",
           prompt.size(), req.generate, req.model, ctx);
    if (req.generate_context >= 0) {
      gen_context = req.generate_context;
      if (gen_context > room)
        fail("--generate-context {} with the prompt's {} tokens and --generate {} exceeds {}'s context of {} tokens; use "
             "--generate-context {} or fewer",
             gen_context, prompt.size(), req.generate, req.model, ctx, room);
    } else {
      gen_context = static_cast<int>(std::clamp<long>(need_context - static_cast<long>(prompt.size()), 0, room));
    }
  }
  Passage filler;
  int newline = 0;
  const int lead = req.recall_distances.empty() ? 0 : max_sink;
  if (!req.recall_distances.empty() || gen_context > 0) {
    long need = gen_context;
    if (!req.recall_distances.empty()) {
      const int span = req.recall_span;
      if (span > static_cast<int>(p.tokens.size()) - 1)
        fail("--recall-span {} is longer than the evaluated passage ({} tokens after BOS); lower --recall-span or raise --tokens", span,
             p.tokens.size() - 1);
      const int far = *std::max_element(req.recall_distances.begin(), req.recall_distances.end());
      const long length = 2L * span + far + 1 + (lead > 0 ? lead + 1 : 0);
      if (length > ctx)
        fail("--recall {} with --recall-span {} makes a sequence of {} tokens{}, beyond the model's context of {}{}; lower --recall or "
             "--recall-span",
             far, span, length, lead > 0 ? fmt::format(" (with {} tokens of other text first, past every recipe's sink)", lead) : "", ctx,
             ctx_hint);
      need = std::max<long>(need, static_cast<long>(lead) + far);
    }
    const long body_start = lm.passage_body_start();
    if (need + body_start > ctx)
      fail("the recall test and the greedy prompt need {} tokens of other text, beyond the model's context of {}{}; lower --recall or "
           "--generate-context",
           need, ctx, ctx_hint);
    filler = pick_passage(cal_text, cal_lines, cal_offset, static_cast<int>(need + body_start), ctx, ctx_hint.c_str(), lm,
                          {"--calib-offset", "--recall", true});
    if (static_cast<long>(filler.tokens.size()) - body_start < need)
      fail("{}: the text from {} holds {} tokens, the recall test and greedy prompt need {} of other text; give --calib-text FILE, "
           "an earlier --calib-offset, or lower --recall / --generate-context",
           cal_text, cal_offset_option, static_cast<long>(filler.tokens.size()) - body_start, need);
    newline = lm.newline_token();
  }

  // The calibration passage: the same model, other text by content (token ids, line ranges).
  Passage cal_passage;
  PassageOrigin cal_origin;
  std::unique_ptr<DumpLayerSource> cal_dump;
  if (need_calib) {
    // With --tasks the evaluated data are the task prompts (synthetic text), not the --offset passage: the calibration
    // is checked against the model's identity only.
    PassageOrigin eval_origin;
    if (req.tasks.empty()) {
      eval_origin = origin_of(p, lines, lm);
      eval_origin.where = describe(req.text, eval_origin, fmt::format("--offset {}", req.offset));
    } else {
      eval_origin.checkpoint_sha256 = lm.sha256;
      eval_origin.model_name = lm.name;
      eval_origin.where = fmt::format("the tasks of {}", req.tasks);
    }
    const DumpInfo I = model_info(lm);
    if (!req.calib_dump.empty()) {  // a dump of the same model on other data, by content
      cal_dump = std::make_unique<DumpLayerSource>(req.calib_dump);
      check_calibration_source(*cal_dump, I, eval_origin);
    } else {
      cal_passage = pick_passage(cal_text, cal_lines, cal_offset, calib_tokens, ctx, ctx_hint.c_str(), lm,
                                 {"--calib-offset", "--calib-tokens", req.calib_tokens == kAllTokens});
      cal_origin = origin_of(cal_passage, cal_lines, lm);
      cal_origin.where = describe(cal_text, cal_origin, cal_offset_option);
      check_calibration_source(I, cal_origin, I, eval_origin);
    }
  } else if (!req.calib_dump.empty()) {
    fail("--calib-dump {} is given but no recipe is calibrated (oscar-cov, oscar-cov-head); drop it", req.calib_dump);
  }
  if (req.gpu) require_cuda_device();

  // ---- work ----
  const Model& m = lm.model();
  std::unique_ptr<CovarianceRotations> calib;
  if (cal_dump) {
    calib = std::make_unique<CovarianceRotations>(fit_covariance_rotations(*cal_dump, req.progress, need_per_head));
  } else if (need_calib) {
    // The model reads the calibration passage once; its q, k, v stay in memory (no file).
    const ModelLayerSource src(m, cal_origin, cal_origin.where, {"q", "k", "v"}, false);
    calib = std::make_unique<CovarianceRotations>(fit_covariance_rotations(src, false, need_per_head));
  }
  // The cache a job decodes through, sized for a sequence of `n` tokens.
  auto make_cache = [&](const Job& j, size_t n) -> std::unique_ptr<KvCache> {
    if (j.gpu) return std::make_unique<GpuKvCache>(mc, j.r, calib.get(), static_cast<int>(n));
    return std::make_unique<QuantizedKvCache>(mc, j.r, calib.get());
  };

  if (!req.tasks.empty()) {  // long-context tasks: full precision first (the reference of the 80% mark), then each recipe
    std::vector<TaskCache> caches;
    caches.push_back({"full precision (fp32)", false, {}, [&](size_t) { return std::make_unique<KvCache>(mc); }});
    for (const Job& j : jobs)
      caches.push_back({j.r.name, j.r.key.quantized() || j.r.value.quantized(), [r = j.r](long t) { return quantized_share(r, t); },
                        [&make_cache, &j](size_t n) { return make_cache(j, n); }});
    Progress bar("tasks", static_cast<long>(task_samples.size() * caches.size()), req.progress);
    EvalResult res;
    res.model_name = lm.name;
    res.tasks = run_tasks(lm, req.tasks, task_samples, caches, bar);
    return res;
  }

  EvalResult res;
  res.model_name = lm.name;
  res.tokens = static_cast<int>(p.tokens.size());
  res.passage_ids = p.tokens;
  res.passage = fmt::format("{} lines {}.., {} tokens", fs::path(req.text).filename().string(), p.first_line, p.tokens.size());
  res.metric = eval_metric(req.metric);
  for (int l = 0; l < mc.n_layers; ++l)
    if (mc.window(l) > 0) ++res.local_layers, res.local_window = mc.window(l);
  res.layers = mc.n_layers;
  {
    const ModelCacheSize bf16 = model_cache_size(Recipe{}, req.budget.context, mc);  // a recipe of 16-bit K and V
    res.global_share_bf16 = bf16.global_share_bf16;
    res.bf16_bytes_budget = bf16.bf16_bytes;
  }
  res.recall_lead = lead;
  res.generate_context = gen_context;
  const long work = static_cast<long>(jobs.size()) * (1 + static_cast<long>(req.recall_distances.size())) + (req.generate > 0 ? 1 : 0);
  Progress bar("eval", work, req.progress);
  auto warn = [&](std::string w) {
    if (std::find(res.warnings.begin(), res.warnings.end(), w) != res.warnings.end()) return;
    bar.pause_line(fmt::format("warning: {}", w));
    res.warnings.push_back(std::move(w));
  };
  // Logits that are not finite are a broken model or a broken recipe, never a result.
  auto require_finite = [&](const MatrixRM& logits, long rows, const std::string& who) {
    if (const long t = first_nonfinite_row(logits, rows); t >= 0)
      fail("{}: {} at position {} are not finite (NaN or infinity); {}", req.model, who, t,
           who == "the full-precision logits" ? "the model file is damaged or its weights overflow: check its sha256 or fetch it again"
                                              : "the recipe's cache overflowed: use bf16 or fp32 scales (scale_dtype) or fewer bits");
  };

  struct LowRows {
    std::string windows, needed;
    std::vector<std::string> rows;  // "recipe share%"
  };
  std::vector<LowRows> low;  // rows mostly in full precision, by windows

  // Full-precision reference, decoded the same way.
  KvCache ref_cache(mc);
  const MatrixRM ref = decode_teacher_forced(m, ref_cache, p.tokens);
  const long n_pred = static_cast<long>(p.tokens.size()) - 1;
  require_finite(ref, n_pred, "the full-precision logits");
  const std::vector<double> ref_losses = next_token_losses(ref, p.tokens);
  const double ref_loss = mean_next_token_loss(ref, p.tokens);
  for (const Job& j : jobs) {
    const auto cache = make_cache(j, p.tokens.size());
    const MatrixRM q = decode_teacher_forced(m, *cache, p.tokens);
    require_finite(q, n_pred, fmt::format("recipe {}'s logits", j.r.name));
    EvalRow row;
    row.recipe = j.r.name;
    row.bits = j.bits;
    row.gpu = j.gpu;
    row.quantizes = j.r.key.quantized() || j.r.value.quantized();
    row.loss = mean_next_token_loss(q, p.tokens);
    row.ppl = std::exp(row.loss);
    row.dloss = row.loss - ref_loss;
    const std::vector<double> losses = next_token_losses(q, p.tokens);
    for (long t = 0; t < n_pred; ++t) row.dloss_pos.push_back(losses[t] - ref_losses[t]);
    LogitAgreement a = compare_logits(ref, q, n_pred);
    row.kl = a.kl;
    row.top1 = a.top1;
    row.kl_pos = std::move(a.kl_rows);
    row.top1_pos = std::move(a.top1_rows);
    row.argmax_ids = std::move(a.argmax_other);
    if (res.ref_argmax_ids.empty()) res.ref_argmax_ids = std::move(a.argmax_ref);
    row.dloss_ci = bootstrap_mean_interval(row.dloss_pos, kBootstrapBlock);
    row.kl_ci = bootstrap_mean_interval(row.kl_pos, kBootstrapBlock);
    row.top1_ci = bootstrap_mean_interval(row.top1_pos, kBootstrapBlock);
    // The whole model's cache: local (sliding-window) layers hold their window in the window dtype.
    row.eff_bits = model_cache_size(j.r, static_cast<long>(p.tokens.size()), mc).bits_per_element;
    row.eff_bits_128k = model_cache_size(j.r, 131072, mc).bits_per_element;
    const ModelCacheSize at_budget = model_cache_size(j.r, req.budget.context, mc);
    row.eff_bits_budget = at_budget.bits_per_element;
    row.kv_bytes_budget = at_budget.bytes;
    row.quantized = row.quantizes ? decoding_quantized_share(j.r, static_cast<long>(p.tokens.size())) : 0.0;
    if (row.quantizes && row.quantized < kMinQuantizedShare) {  // one warning for all such rows, grouped by windows
      const std::string w = windows_text(j.r);
      auto it = std::find_if(low.begin(), low.end(), [&](const LowRows& x) { return x.windows == w; });
      if (it == low.end()) {
        long need = 2;
        while (need <= ctx && decoding_quantized_share(j.r, need) < kMinQuantizedShare) need += std::max(16L, need / 8);
        it = low.insert(low.end(), {w, need <= ctx ? fmt::format("{} tokens or more", need)
                                                   : fmt::format("more than the model's context of {} tokens", ctx), {}});
      }
      it->rows.push_back(fmt::format("{} {:.0f}%", row.recipe, 100 * row.quantized));
    }
    res.rows.push_back(std::move(row));
    bar.advance();
  }

  if (!low.empty()) {
    std::string list;
    for (const LowRows& x : low)
      list += fmt::format("{}{} (windows {}; a low-bit result needs {})", list.empty() ? "" : "; ", fmt::join(x.rows, ", "), x.windows, x.needed);
    warn(fmt::format("over {} tokens these rows read mostly their full-precision windows (share in low bits given): they measure full "
                     "precision rather than their quantizer and are not ranked: {}",
                     p.tokens.size(), list));
  }

  // Recall: start + other text (past every sink) + passage A + filler (distance tokens) + passage A again.
  if (!req.recall_distances.empty()) {
    const std::span<const int> a(p.tokens.data() + (lm.bos() >= 0 ? 1 : 0), req.recall_span);
    const std::span<const int> filler_body = std::span<const int>(filler.tokens).subspan(lm.passage_body_start());
    for (int dist : req.recall_distances) {
      const RecallSequence s = recall_sequence(a, newline, filler_body, lead, dist, lm.bos() >= 0 ? lm.bos() : newline);
      for (const Job& j : jobs) {
        const auto cache = make_cache(j, s.tokens.size());
        const MatrixRM q = decode_teacher_forced(m, *cache, s.tokens);
        require_finite(q, static_cast<long>(s.tokens.size()), fmt::format("recipe {}'s logits (recall)", j.r.name));
        RecallRow row{j.r.name, dist, span_loss(q, s.tokens, s.repeat, s.span), span_loss(q, s.tokens, s.first, s.span), 0.0, j.gpu};
        if (j.r.key.quantized() || j.r.value.quantized()) {  // the first copy's tokens in the body when the repeat starts
          const KvSegments seg = cache_segments(j.r, s.repeat);
          for (const CacheSegments* c : {&seg.key, &seg.value})
            row.quantized += static_cast<double>(std::max(0, std::min(s.first + s.span, c->body_end) - std::max(s.first, c->sink_end))) /
                             (2.0 * s.span);
          if (row.quantized < kMinQuantizedShare)
            warn(fmt::format("recall at distance {}: {} keeps {:.0f}% of the first copy in full precision ({}); its recall cell tests full "
                             "precision; use a larger --recall distance",
                             dist, j.r.name, 100 * (1 - row.quantized), windows_text(j.r)));
        }
        res.recall.push_back(row);
        bar.advance();
      }
    }
  }

  // Greedy generation from a fixed prompt, after other text (generate_context tokens).
  if (req.generate > 0) {
    std::vector<int> context;
    if (gen_context > 0) {
      context.push_back(lm.bos() >= 0 ? lm.bos() : newline);
      const std::span<const int> body = std::span<const int>(filler.tokens).subspan(lm.passage_body_start());
      context.insert(context.end(), body.begin(), body.begin() + gen_context);
      context.push_back(newline);
      context.insert(context.end(), prompt.begin() + (prompt.front() == lm.bos() ? 1 : 0), prompt.end());
    } else {
      context = prompt;
    }
    KvCache fp(mc);
    const std::vector<int> base = decode_greedy(m, fp, context, req.generate);
    auto text_of = [&](const std::vector<int>& ids) {
      std::string s;
      int prev = context.back();
      for (int t : ids) s += lm.decode_piece(prev, t), prev = t;
      return s;
    };
    res.greedy_context_ids = context;
    res.greedy.push_back({"full precision (fp32)", text_of(base), static_cast<int>(base.size()), static_cast<int>(base.size()), 0.0, false, base});
    for (const Job& j : jobs) {
      const auto cache = make_cache(j, std::min<size_t>(context.size() + req.generate, ctx));
      const std::vector<int> ids = decode_greedy(m, *cache, context, req.generate);
      const bool quantizes = j.r.key.quantized() || j.r.value.quantized();
      const double share = quantizes ? quantized_share(j.r, static_cast<long>(context.size())) : 0.0;
      if (quantizes && share < kMinQuantizedShare)
        warn(fmt::format("greedy: {} holds {:.0f}% of the {}-token context in full precision ({}); its continuation tests full "
                         "precision; {}",
                         j.r.name, 100 * (1 - share), context.size(), windows_text(j.r),
                         tokens_for_quantized_share(j.r, kMinQuantizedShare, ctx) == 0
                             ? fmt::format("the model's context of {} tokens is too short for these windows", ctx)
                             : std::string("raise --generate-context")));
      res.greedy.push_back({j.r.name, text_of(ids), shared_prefix(ids, base), static_cast<int>(ids.size()), share, j.gpu, ids});
    }
    bar.advance();
  }

  // The verdict: the recipe to pick under the budget, by the metric, over the paired predicted positions.
  std::vector<VerdictCandidate> cands;
  for (const EvalRow& r : res.rows)
    if (r.quantizes) cands.push_back({r.recipe, r.eff_bits_budget, r.quantized, req.metric == "dloss" ? r.dloss_pos : r.kl_pos});
  res.verdict = pick_recipe(cands, req.budget, res.metric);
  if (res.verdict.found) {
    const auto units = [&](const EvalRow& r) -> const std::vector<double>& { return req.metric == "dloss" ? r.dloss_pos : r.kl_pos; };
    const EvalRow* best = nullptr;
    for (const EvalRow& r : res.rows)
      if (r.recipe == res.verdict.best) best = &r;
    for (EvalRow& r : res.rows) {
      r.ranked = r.quantizes && r.quantized >= kMinQuantizedShare && r.eff_bits_budget <= req.budget.bits + 1e-9;
      if (!r.ranked || &r == best) continue;
      r.vs_best = bootstrap_paired_difference(units(r), units(*best), kBootstrapBlock);
      r.tied_with_best = r.vs_best.contains(0.0);
    }
    for (EvalRow& r : res.rows)
      if (&r == best) r.tied_with_best = true, r.vs_best = {0.0, 0.0};
  }
  bar.done();
  return res;
}

}  // namespace oscar
