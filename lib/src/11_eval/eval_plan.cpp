// eval_plan.cpp: plan_eval and its checks (eval_plan.h): every option, file, passage, recipe and the calibration are
// checked before any decoding.
#include "oscar/11_eval/eval_plan.h"

#include <algorithm>
#include <filesystem>

#include "oscar/01_core/error.h"
#include "oscar/01_core/output_files.h"
#include "oscar/02_model/tokenizers/passage.h"
#include "oscar/06_rotate/rotation.h"
#include "oscar/07_quantize/cache_policy.h"
#include "oscar/09_cache/gpu_kv_cache.h"

namespace fs = std::filesystem;

namespace oscar {

namespace {

constexpr int kDefaultTokens = 1024;

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n\v\f") == std::string::npos; }

// A passage of `lines` with the options that chose it named in every error: the text's emptiness and the
// offset first, then the length against the model's context, then against the text.
Passage pick_passage(const std::string& path, const std::vector<std::string>& lines, long offset, int tokens, const LoadedModel& lm,
                     const PassageOptions& o) {
  const long n = static_cast<long>(lines.size());
  const int context = lm.config.seq_len;
  if (std::all_of(lines.begin(), lines.end(), blank))
    fail("{}: the text is empty (no line holds any text); give --text a text file, one passage a line", path);
  const long first = offset < 0 ? n + offset : offset;
  if (first < 0 || first >= n)
    fail("{}: {} {} is outside the text, which has {} lines (use 0..{} or -{}..-1)", path, o.offset, offset, n, n - 1, n);
  if (std::all_of(lines.begin() + first, lines.end(), blank))
    fail("{}: {} {} leaves only blank lines (lines {}..{}); choose an earlier {}", path, o.offset, offset, first, n - 1, o.offset);
  if (tokens > context)
    fail("{} {} is beyond the model's context of {} tokens ({} has seq_len {}); use {} {} or fewer", o.tokens, tokens, context, lm.path,
         context, o.tokens, context);
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

// What a passage is by content (layer_source.h's passage_origin), named for messages.
PassageOrigin origin_of(const Passage& p, const std::vector<std::string>& lines, const LoadedModel& lm, const std::string& text,
                        const std::string& option) {
  PassageOrigin o;
  o.checkpoint_sha256 = lm.sha256;
  o.model_name = lm.name;
  o.token_ids = p.tokens;
  o.text_sha256 = text_lines_sha256(lines);
  o.first_line = p.first_line;
  o.last_line = lm.passage_last_line(p, lines);
  o.where = fmt::format("passage ({} lines {}..{}, {}, {} tokens)", fs::path(text).filename().string(), o.first_line, o.last_line,
                        option, o.token_ids.size());
  return o;
}

int passage_length(int asked, int context) {
  return asked == kAllTokens ? context : asked > 0 ? asked : std::min(kDefaultTokens, context);
}

// Every recipe at every width (jobs.h), with --clamp-groups applied first and --gpu's support checked for each job, so
// that a recipe that cannot apply stops the run before any text is read.
std::vector<Job> eval_jobs(const EvalRequest& req, const ModelConfig& mc) {
  const int hd = mc.head_dim();
  std::vector<RecipeFile> recipes = req.recipes;
  for (RecipeFile& rf : recipes) {
    const bool fp = rf.key_bits_fixed && rf.value_bits_fixed && rf.recipe.key.bits == 16 && rf.recipe.value.bits == 16;
    if (req.gpu && !fp)  // the model's shape first: resolving a recipe for an unsupported head_dim may fail otherwise
      if (const std::string why = gpu_model_unsupported_reason(mc); !why.empty())
        fail("--gpu: recipe '{}' is not supported by the CUDA kernels ({}; {}); run it without --gpu",
             widths_label(rf, {req.bits.front(), req.bits.front()}), why, gpu_supported_text());
    if (req.clamp_groups)
      for (TensorQuant* q : {&rf.recipe.key, &rf.recipe.value})
        if (q->axis == QuantAxis::PerToken && q->group > hd) q->group = kGroupHead;
  }
  std::vector<Job> jobs = plan_jobs(recipes, req.bits, hd);
  for (Job& j : jobs) {
    j.gpu = req.gpu && j.quantizes();  // fp16 stays on the CPU
    if (j.gpu)
      if (const std::string why = gpu_unsupported_reason(j.recipe, mc); !why.empty())
        fail("--gpu: recipe '{}' is not supported by the CUDA kernels ({}; {}); run it without --gpu", j.recipe.name, why,
             gpu_supported_text());
  }
  return jobs;
}

// The calibration text (also the recall filler's and the greedy context's): --calib-text, else --text from
// --calib-offset, by default the line after the evaluated passage.
struct OtherText {
  std::string path;
  std::vector<std::string> lines;
  long offset = 0;
  std::string option;  // how messages name the offset
};

OtherText other_text(const EvalRequest& req, const std::vector<std::string>& lines, const Passage& p, const LoadedModel& lm) {
  OtherText t{req.calib_text.empty() ? req.text : req.calib_text, req.calib_text.empty() ? lines : read_lines(req.calib_text),
              req.calib_offset, ""};
  if (t.offset == kCalibAfterEval) {
    if (!req.calib_text.empty()) {
      t.offset = 0;
    } else {
      t.offset = lm.passage_last_line(p, lines) + 1;
      if (t.offset >= static_cast<long>(lines.size()))
        fail("{}: the evaluated passage reaches the text's end, so no text follows it for the calibration passage, the recall test "
             "and the greedy prompt's context; give --calib-text FILE (other text), --calib-offset LINE, or an earlier --offset",
             req.text);
    }
  }
  t.option = req.calib_offset == kCalibAfterEval && req.calib_text.empty() ? fmt::format("--calib-offset after (line {})", t.offset)
                                                                            : fmt::format("--calib-offset {}", t.offset);
  return t;
}

// The tokens of other text before the greedy prompt: --generate-context, else enough that every recipe holds at least
// kMinQuantizedShare of its cache in low bits when generation starts (as much as the context allows).
int greedy_context(const EvalRequest& req, const std::vector<Job>& jobs, const std::vector<int>& prompt, const LoadedModel& lm) {
  const int ctx = lm.config.seq_len;
  const long room = static_cast<long>(ctx) - static_cast<long>(prompt.size()) - req.generate - 1;
  if (room < 0)
    fail("--prompt has {} tokens; with --generate {} that exceeds {}'s context of {} tokens: shorten the prompt or generate fewer "
         "tokens",
         prompt.size(), req.generate, req.model, ctx);
  if (req.generate_context >= 0) {
    if (req.generate_context > room)
      fail("--generate-context {} with the prompt's {} tokens and --generate {} exceeds {}'s context of {} tokens; use "
           "--generate-context {} or fewer",
           req.generate_context, prompt.size(), req.generate, req.model, ctx, room);
    return req.generate_context;
  }
  long need = 0;
  for (const Job& j : jobs) {
    if (!j.quantizes()) continue;
    const long t = tokens_for_quantized_share(j.recipe, kMinQuantizedShare, ctx);
    need = std::max<long>(need, t > 0 ? t : ctx);  // 0: not within the context; as much as it holds
  }
  return static_cast<int>(std::clamp<long>(need - static_cast<long>(prompt.size()), 0, room));
}

// The largest sink of the quantizing jobs: the recalled passage starts past it.
int largest_sink(const std::vector<Job>& jobs) {
  int s = 0;
  for (const Job& j : jobs)
    if (j.quantizes()) s = std::max({s, j.recipe.windows.key.sink, j.recipe.windows.value.sink});
  return s;
}

// The tokens of other text the recall test (its lead and farthest distance) and the greedy context need.
long recall_need(const EvalRequest& req, const EvalPlan& plan, const LoadedModel& lm) {
  const int ctx = lm.config.seq_len, span = req.recall_span, lead = plan.recall_lead;
  if (span > static_cast<int>(plan.passage.tokens.size()) - 1)
    fail("--recall-span {} is longer than the evaluated passage ({} tokens after BOS); lower --recall-span or raise --tokens", span,
         plan.passage.tokens.size() - 1);
  const int far = *std::max_element(req.recall_distances.begin(), req.recall_distances.end());
  const long length = 2L * span + far + 1 + (lead > 0 ? lead + 1 : 0);
  if (length > ctx)
    fail("--recall {} with --recall-span {} makes a sequence of {} tokens{}, beyond the model's context of {} ({} has seq_len {}); "
         "lower --recall or --recall-span",
         far, span, length, lead > 0 ? fmt::format(" (with {} tokens of other text first, past every recipe's sink)", lead) : "", ctx,
         lm.path, ctx);
  return static_cast<long>(lead) + far;
}

// The other text that the recall test and the greedy context read, from the calibration text.
void plan_filler(const EvalRequest& req, const OtherText& t, const LoadedModel& lm, EvalPlan& plan) {
  long need = plan.generate_context;
  if (!req.recall_distances.empty()) need = std::max(need, recall_need(req, plan, lm));
  const int ctx = lm.config.seq_len;
  const long body_start = lm.passage_body_start();
  if (need + body_start > ctx)
    fail("the recall test and the greedy prompt need {} tokens of other text, beyond the model's context of {} ({} has seq_len {}); "
         "lower --recall or --generate-context",
         need, ctx, lm.path, ctx);
  plan.filler = pick_passage(t.path, t.lines, t.offset, static_cast<int>(need + body_start), lm, {"--calib-offset", "--recall", true});
  if (static_cast<long>(plan.filler.tokens.size()) - body_start < need)
    fail("{}: the text from {} holds {} tokens, the recall test and greedy prompt need {} of other text; give --calib-text FILE, "
         "an earlier --calib-offset, or lower --recall / --generate-context",
         t.path, t.option, static_cast<long>(plan.filler.tokens.size()) - body_start, need);
  plan.newline = lm.newline_token();
}

// The calibration: the same model, other data by content (token ids, line ranges). With --tasks the evaluated data are
// the task prompts (synthetic text), so the calibration is checked against the model's identity only.
CalibrationSource plan_calibration(const EvalRequest& req, const EvalPlan& plan, const OtherText& t, const std::vector<std::string>& lines,
                                   const LoadedModel& lm) {
  CalibrationSource c;
  for (const Job& j : plan.jobs) {
    c.needed = c.needed || j.recipe.calibrated();
    c.per_kv_head = c.per_kv_head || j.recipe.calibrated_per_kv_head();
  }
  if (!c.needed) {
    if (!req.calib_dump.empty())
      fail("--calib-dump {} is given but no recipe is calibrated (oscar-cov, oscar-cov-head); drop it", req.calib_dump);
    return c;
  }
  PassageOrigin eval;
  if (req.tasks.empty()) {
    eval = origin_of(plan.passage, lines, lm, req.text, fmt::format("--offset {}", req.offset));
  } else {
    eval.checkpoint_sha256 = lm.sha256;
    eval.model_name = lm.name;
    eval.where = fmt::format("the tasks of {}", req.tasks);
  }
  const DumpInfo I = model_info(lm);
  if (!req.calib_dump.empty()) {  // a dump of the same model on other data, by content
    c.dump = std::make_unique<DumpLayerSource>(req.calib_dump);
    check_calibration_source(*c.dump, I, eval);
    return c;
  }
  const int tokens = passage_length(req.calib_tokens, lm.config.seq_len);
  const Passage p = pick_passage(t.path, t.lines, t.offset, tokens, lm, {"--calib-offset", "--calib-tokens", req.calib_tokens == kAllTokens});
  c.passage = origin_of(p, t.lines, lm, t.path, t.option);
  check_calibration_source(I, c.passage, I, eval);
  return c;
}

// The output folder (when set) and the task file, before the model is read.
std::vector<TaskSample> check_inputs(const EvalRequest& req) {
  if (req.recipes.empty()) fail("--recipes names no recipe; give at least one preset or recipe file, e.g. --recipes fp16,kivi");
  if (!req.out.empty()) {
    check_output_folder(req.out);
    check_not_input(req.out, {"eval.csv", "eval.md", "eval.json", "recall.csv", "recall.png", "tasks.md", "tasks.csv", "answers.jsonl"},
                    {req.model, req.tokenizer, req.text, req.calib_text, req.calib_dump, req.tasks});
  }
  if (req.tasks.empty()) return {};
  std::vector<TaskSample> samples = read_tasks_jsonl(req.tasks);
  if (samples.empty()) fail("{}: the task file holds no task; write one with oscar-tasks", req.tasks);
  return samples;
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

EvalPlan plan_eval(const EvalRequest& req, const LoadedModel& lm) {
  EvalPlan plan;
  plan.tasks = check_inputs(req);
  const int ctx = lm.config.seq_len;
  plan.jobs = eval_jobs(req, lm.config);
  const std::vector<std::string> lines = read_lines(req.text);
  plan.passage = pick_passage(req.text, lines, req.offset, passage_length(req.tokens, ctx), lm, {"--offset", "--tokens", req.tokens == kAllTokens});
  if (req.calib_tokens > ctx)
    fail("--calib-tokens {} is beyond the model's context of {} tokens ({} has seq_len {}); use --calib-tokens {} or fewer",
         req.calib_tokens, ctx, lm.path, ctx, ctx);
  const OtherText t = other_text(req, lines, plan.passage, lm);
  if (req.generate > 0) {
    plan.prompt = lm.encode(req.prompt);
    if (plan.prompt.empty()) fail("--prompt encodes to no tokens; give some text to continue");
    plan.generate_context = greedy_context(req, plan.jobs, plan.prompt, lm);
  }
  plan.recall_lead = req.recall_distances.empty() ? 0 : largest_sink(plan.jobs);
  if (!req.recall_distances.empty() || plan.generate_context > 0) plan_filler(req, t, lm, plan);
  plan.calibration = plan_calibration(req, plan, t, lines, lm);
  if (req.gpu) require_cuda_device();
  return plan;
}

}  // namespace oscar
