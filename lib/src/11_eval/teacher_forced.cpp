// teacher_forced.cpp: the teacher-forced rows of oscar-eval (eval_steps.h): full precision, then every job, each token
// of the passage fed one at a time through the job's cache; loss, KL and top-1 against full precision per predicted
// position, with block-bootstrap intervals, and the cache's effective bits.
#include <cmath>

#include <fmt/ranges.h>

#include "oscar/07_quantize/cache_policy.h"
#include "oscar/08_metrics/next_token.h"
#include "oscar/11_eval/decoding.h"
#include "oscar/11_eval/eval_steps.h"

namespace oscar {

namespace {

struct Reference {
  MatrixRM logits;
  std::vector<double> losses;
  double loss = 0;
};

// One job's row against the reference.
EvalRow job_row(const EvalContext& c, const Job& j, const Reference& ref, std::vector<int>& ref_argmax) {
  const std::vector<int>& toks = c.plan.passage.tokens;
  const long n_pred = static_cast<long>(toks.size()) - 1, T = static_cast<long>(toks.size());
  const auto cache = c.cache(j, toks.size());
  const MatrixRM q = decode_teacher_forced(c.lm.model(), *cache, toks);
  c.require_finite(q, n_pred, fmt::format("recipe {}'s logits", j.recipe.name));
  EvalRow row;
  row.recipe = j.recipe.name;
  row.bits = j.bits;
  row.gpu = j.gpu;
  row.quantizes = j.quantizes();
  row.loss = mean_next_token_loss(q, toks);
  row.ppl = std::exp(row.loss);
  row.dloss = row.loss - ref.loss;
  const std::vector<double> losses = next_token_losses(q, toks);
  for (long t = 0; t < n_pred; ++t) row.dloss_pos.push_back(losses[t] - ref.losses[t]);
  LogitAgreement a = compare_logits(ref.logits, q, n_pred);
  row.kl = a.kl;
  row.top1 = a.top1;
  row.kl_pos = std::move(a.kl_rows);
  row.top1_pos = std::move(a.top1_rows);
  row.argmax_ids = std::move(a.argmax_other);
  if (ref_argmax.empty()) ref_argmax = std::move(a.argmax_ref);
  row.dloss_ci = bootstrap_mean_interval(row.dloss_pos, kBootstrapBlock);
  row.kl_ci = bootstrap_mean_interval(row.kl_pos, kBootstrapBlock);
  row.top1_ci = bootstrap_mean_interval(row.top1_pos, kBootstrapBlock);
  // The whole model's cache: local (sliding-window) layers hold their window in the window dtype.
  const ModelConfig& mc = c.lm.config;
  row.eff_bits = model_cache_size(j.recipe, T, mc).bits_per_element;
  row.eff_bits_128k = model_cache_size(j.recipe, 131072, mc).bits_per_element;
  const ModelCacheSize at_budget = model_cache_size(j.recipe, c.req.budget.context, mc);
  row.eff_bits_budget = at_budget.bits_per_element;
  row.kv_bytes_budget = at_budget.bytes;
  row.quantized = row.quantizes ? decoding_quantized_share(j.recipe, T) : 0.0;
  return row;
}

// The fewest tokens from which decoding with `r` reads at least kMinQuantizedShare of its cache in low bits, as text.
std::string tokens_needed(const Recipe& r, int ctx) {
  long need = 2;
  while (need <= ctx && decoding_quantized_share(r, need) < kMinQuantizedShare) need += std::max(16L, need / 8);
  return need <= ctx ? fmt::format("{} tokens or more", need) : fmt::format("more than the model's context of {} tokens", ctx);
}

}  // namespace

void teacher_forced_rows(const EvalContext& c, EvalResult& res, EvalLog& log) {
  const std::vector<int>& toks = c.plan.passage.tokens;
  KvCache ref_cache(c.lm.config);
  Reference ref{decode_teacher_forced(c.lm.model(), ref_cache, toks), {}, 0};
  c.require_finite(ref.logits, static_cast<long>(toks.size()) - 1, "the full-precision logits");
  ref.losses = next_token_losses(ref.logits, toks);
  ref.loss = mean_next_token_loss(ref.logits, toks);
  LowShareRows low;
  for (const Job& j : c.plan.jobs) {
    EvalRow row = job_row(c, j, ref, res.ref_argmax_ids);
    if (row.quantizes && row.quantized < kMinQuantizedShare)  // one warning for all such rows, grouped by windows
      low.add(j.recipe, fmt::format("{} {:.0f}%", row.recipe, 100 * row.quantized),
              [&] { return tokens_needed(j.recipe, c.lm.config.seq_len); });
    res.rows.push_back(std::move(row));
    log.advance();
  }
  if (low.empty()) return;
  std::string list;
  for (const LowShareRows::Group& g : low.groups())
    list += fmt::format("{}{} (windows {}; a low-bit result needs {})", list.empty() ? "" : "; ", fmt::join(g.rows, ", "), g.windows,
                        g.needed);
  log.warn(fmt::format("over {} tokens these rows read mostly their full-precision windows (share in low bits given): they measure full "
                       "precision rather than their quantizer and are not ranked: {}",
                       toks.size(), list));
}

}  // namespace oscar
