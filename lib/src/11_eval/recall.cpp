// recall.cpp: oscar-eval's recall test (eval_steps.h): a passage, D tokens of other text, the passage again; the loss on
// the repeat, read from each job's cache, with the share of the first copy that was in low bits when read again.
#include <algorithm>

#include <fmt/format.h>

#include "oscar/07_quantize/cache_policy.h"
#include "oscar/08_metrics/next_token.h"
#include "oscar/11_eval/decoding.h"
#include "oscar/11_eval/eval_steps.h"

namespace oscar {

namespace {

// The share of the first copy's K and V tokens that sit in the body of `r`'s cache when the repeat starts.
double first_copy_share(const Recipe& r, const RecallSequence& s) {
  const KvSegments seg = cache_segments(r, s.repeat);
  double share = 0;
  for (const CacheSegments* c : {&seg.key, &seg.value})
    share += static_cast<double>(std::max(0, std::min(s.first + s.span, c->body_end) - std::max(s.first, c->sink_end))) / (2.0 * s.span);
  return share;
}

RecallRow recall_row(const EvalContext& c, const Job& j, const RecallSequence& s, int distance, EvalLog& log) {
  const auto cache = c.cache(j, s.tokens.size());
  const MatrixRM q = decode_teacher_forced(c.lm.model(), *cache, s.tokens);
  c.require_finite(q, static_cast<long>(s.tokens.size()), fmt::format("recipe {}'s logits (recall)", j.recipe.name));
  RecallRow row{j.recipe.name, distance, span_loss(q, s.tokens, s.repeat, s.span), span_loss(q, s.tokens, s.first, s.span), 0.0, j.gpu};
  if (!j.quantizes()) return row;
  row.quantized = first_copy_share(j.recipe, s);
  if (row.quantized < kMinQuantizedShare)
    log.warn(fmt::format("recall at distance {}: {} keeps {:.0f}% of the first copy in full precision ({}); its recall cell tests full "
                         "precision; use a larger --recall distance",
                         distance, j.recipe.name, 100 * (1 - row.quantized), windows_text(j.recipe)));
  return row;
}

}  // namespace

void recall_rows(const EvalContext& c, EvalResult& res, EvalLog& log) {
  if (c.req.recall_distances.empty()) return;
  const LoadedModel& lm = c.lm;
  // start + other text (past every sink) + passage A + filler (distance tokens) + passage A again
  const std::span<const int> a(c.plan.passage.tokens.data() + (lm.bos() >= 0 ? 1 : 0), c.req.recall_span);
  const std::span<const int> filler = std::span<const int>(c.plan.filler.tokens).subspan(lm.passage_body_start());
  for (int dist : c.req.recall_distances) {
    const RecallSequence s = recall_sequence(a, c.plan.newline, filler, c.plan.recall_lead, dist, lm.bos() >= 0 ? lm.bos() : c.plan.newline);
    for (const Job& j : c.plan.jobs) {
      res.recall.push_back(recall_row(c, j, s, dist, log));
      log.advance();
    }
  }
}

}  // namespace oscar
