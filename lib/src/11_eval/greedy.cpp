// greedy.cpp: oscar-eval's greedy generation (eval_steps.h): full precision and every job continue the prompt after
// the planned other text; each continuation's shared prefix with full precision's.
#include <fmt/format.h>

#include "oscar/07_quantize/cache_policy.h"
#include "oscar/08_metrics/next_token.h"
#include "oscar/11_eval/decoding.h"
#include "oscar/11_eval/eval_steps.h"

namespace oscar {

namespace {

// What generation starts from: [BOS or newline, other text, newline,] the prompt.
std::vector<int> greedy_start(const EvalContext& c) {
  const LoadedModel& lm = c.lm;
  const std::vector<int>& prompt = c.plan.prompt;
  if (c.plan.generate_context == 0) return prompt;
  std::vector<int> context{lm.bos() >= 0 ? lm.bos() : c.plan.newline};
  const std::span<const int> body = std::span<const int>(c.plan.filler.tokens).subspan(lm.passage_body_start());
  context.insert(context.end(), body.begin(), body.begin() + c.plan.generate_context);
  context.push_back(c.plan.newline);
  context.insert(context.end(), prompt.begin() + (prompt.front() == lm.bos() ? 1 : 0), prompt.end());
  return context;
}

}  // namespace

void greedy_rows(const EvalContext& c, EvalResult& res, EvalLog& log) {
  if (c.req.generate <= 0) return;
  const std::vector<int> context = greedy_start(c);
  const int n = c.req.generate, ctx = c.lm.config.seq_len;
  const auto text_of = [&](const std::vector<int>& ids) {
    std::string s;
    int prev = context.back();
    for (int t : ids) s += c.lm.decode_piece(prev, t), prev = t;
    return s;
  };
  KvCache fp(c.lm.config);
  const std::vector<int> base = decode_greedy(c.lm.model(), fp, context, n);
  res.greedy_context_ids = context;
  res.greedy.push_back({"full precision (fp32)", text_of(base), static_cast<int>(base.size()), static_cast<int>(base.size()), 0.0, false, base});
  for (const Job& j : c.plan.jobs) {
    const auto cache = c.cache(j, std::min<size_t>(context.size() + n, ctx));
    const std::vector<int> ids = decode_greedy(c.lm.model(), *cache, context, n);
    const double share = j.quantizes() ? quantized_share(j.recipe, static_cast<long>(context.size())) : 0.0;
    if (j.quantizes() && share < kMinQuantizedShare)
      log.warn(fmt::format("greedy: {} holds {:.0f}% of the {}-token context in full precision ({}); its continuation tests full "
                           "precision; {}",
                           j.recipe.name, 100 * (1 - share), context.size(), windows_text(j.recipe),
                           tokens_for_quantized_share(j.recipe, kMinQuantizedShare, ctx) == 0
                               ? fmt::format("the model's context of {} tokens is too short for these windows", ctx)
                               : std::string("raise --generate-context")));
    res.greedy.push_back({j.recipe.name, text_of(ids), shared_prefix(ids, base), static_cast<int>(ids.size()), share, j.gpu, ids});
  }
  log.advance();
}

}  // namespace oscar
