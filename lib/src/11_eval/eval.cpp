// eval.cpp: run_eval (eval.h): the plan, then each step of eval_steps.h in its order; the context the steps share, the
// calibration fit, the run's description and the ranking of the rows.
#include "oscar/11_eval/eval.h"

#include <algorithm>
#include <filesystem>

#include "oscar/01_core/error.h"
#include "oscar/07_quantize/cache_policy.h"
#include "oscar/08_metrics/next_token.h"
#include "oscar/09_cache/gpu_kv_cache.h"
#include "oscar/09_cache/quantized_cache.h"
#include "oscar/11_eval/eval_steps.h"

namespace fs = std::filesystem;

namespace oscar {

VerdictMetric eval_metric(const std::string& name) {
  if (name == "kl") return {"kl", "KL(fp32 ‖ quant) of the next-token distributions", false, "predicted positions", kBootstrapBlock};
  if (name == "dloss") return {"dloss", "Δ loss vs fp32 (nats)", false, "predicted positions", kBootstrapBlock};
  if (name == "output-error")
    fail("--metric output-error is oscar-sweep's (attention output error); oscar-eval ranks by kl or dloss");
  fail("--metric '{}' is unknown; use kl (KL of the next-token distributions) or dloss (loss increase)", name);
}

std::unique_ptr<KvCache> EvalContext::cache(const Job& j, size_t tokens) const {
  if (j.gpu) return std::make_unique<GpuKvCache>(lm.config, j.recipe, calib, static_cast<int>(tokens));
  return std::make_unique<QuantizedKvCache>(lm.config, j.recipe, calib);
}

void EvalContext::require_finite(const MatrixRM& logits, long rows, const std::string& who) const {
  if (const long t = first_nonfinite_row(logits, rows); t >= 0)
    fail("{}: {} at position {} are not finite (NaN or infinity); {}", req.model, who, t,
         who == "the full-precision logits" ? "the model file is damaged or its weights overflow: check its sha256 or fetch it again"
                                            : "the recipe's cache overflowed: use bf16 or fp32 scales (scale_dtype) or fewer bits");
}

void EvalLog::warn(std::string w) {
  if (std::find(res_.warnings.begin(), res_.warnings.end(), w) != res_.warnings.end()) return;
  bar_.pause_line(fmt::format("warning: {}", w));
  res_.warnings.push_back(std::move(w));
}

std::unique_ptr<CovarianceRotations> fit_calibration(const EvalPlan& plan, const LoadedModel& lm, bool progress) {
  const CalibrationSource& c = plan.calibration;
  if (!c.needed) return nullptr;
  if (c.dump) return std::make_unique<CovarianceRotations>(fit_covariance_rotations(*c.dump, progress, c.per_kv_head));
  // The model reads the calibration passage once; its q, k, v stay in memory (no file).
  const ModelLayerSource src(lm.model(), c.passage, c.passage.where, {"q", "k", "v"}, false);
  return std::make_unique<CovarianceRotations>(fit_covariance_rotations(src, false, c.per_kv_head));
}

EvalResult describe_run(const EvalContext& c) {
  const ModelConfig& mc = c.lm.config;
  const Passage& p = c.plan.passage;
  EvalResult res;
  res.model_name = c.lm.name;
  res.tokens = static_cast<int>(p.tokens.size());
  res.passage_ids = p.tokens;
  res.passage = fmt::format("{} lines {}.., {} tokens", fs::path(c.req.text).filename().string(), p.first_line, p.tokens.size());
  res.metric = eval_metric(c.req.metric);
  for (int l = 0; l < mc.n_layers; ++l)
    if (mc.window(l) > 0) ++res.local_layers, res.local_window = mc.window(l);
  res.layers = mc.n_layers;
  const ModelCacheSize bf16 = model_cache_size(Recipe{}, c.req.budget.context, mc);  // a recipe of 16-bit K and V
  res.global_share_bf16 = bf16.global_share_bf16;
  res.bf16_bytes_budget = bf16.bf16_bytes;
  res.recall_lead = c.plan.recall_lead;
  res.generate_context = c.plan.generate_context;
  return res;
}

void rank_rows(const EvalRequest& req, EvalResult& res) {
  const bool dloss = req.metric == "dloss";
  const auto units = [&](const EvalRow& r) -> const std::vector<double>& { return dloss ? r.dloss_pos : r.kl_pos; };
  std::vector<VerdictCandidate> cands;
  for (const EvalRow& r : res.rows)
    if (r.quantizes) cands.push_back({r.recipe, r.eff_bits_budget, r.quantized, units(r)});
  res.verdict = pick_recipe(cands, req.budget, res.metric);
  if (!res.verdict.found) return;
  const auto best = std::find_if(res.rows.begin(), res.rows.end(), [&](const EvalRow& r) { return r.recipe == res.verdict.best; });
  for (EvalRow& r : res.rows) {
    r.ranked = rankable(r.quantizes, r.eff_bits_budget, r.quantized, req.budget);
    if (&r == &*best) {
      r.tied_with_best = true, r.vs_best = {0.0, 0.0};
    } else if (r.ranked) {
      r.vs_best = bootstrap_paired_difference(units(r), units(*best), kBootstrapBlock);
      r.tied_with_best = r.vs_best.contains(0.0);
    }
  }
}

EvalResult run_eval(const EvalRequest& req) {
  validate_eval_options(req);
  const LoadedModel lm = LoadedModel::load(req.model, req.tokenizer);
  const EvalPlan plan = plan_eval(req, lm);
  const std::unique_ptr<CovarianceRotations> calib = fit_calibration(plan, lm, req.progress);
  const EvalContext c{req, lm, plan, calib.get()};
  if (!plan.tasks.empty()) {
    Progress bar("tasks", static_cast<long>(plan.tasks.size() * (plan.jobs.size() + 1)), req.progress);
    EvalResult res;
    res.model_name = lm.name;
    res.tasks = task_rows(c, bar);
    return res;
  }
  EvalResult res = describe_run(c);
  const long work = static_cast<long>(plan.jobs.size()) * (1 + static_cast<long>(req.recall_distances.size())) + (req.generate > 0 ? 1 : 0);
  Progress bar("eval", work, req.progress);
  EvalLog log(res, bar);
  teacher_forced_rows(c, res, log);
  recall_rows(c, res, log);
  greedy_rows(c, res, log);
  rank_rows(req, res);
  bar.done();
  return res;
}

}  // namespace oscar
