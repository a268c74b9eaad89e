// decoding.cpp: teacher-forced and greedy decoding through a cache, and the recall test's sequence.
#include "oscar/11_eval/decoding.h"

#include "oscar/01_core/error.h"

namespace oscar {

MatrixRM decode_teacher_forced(const Model& m, KvCache& cache, std::span<const int> toks) {
  if (cache.serves_chunks()) return m.forward(toks, cache);  // each query reads the cache as of its own token
  MatrixRM out(toks.size(), m.config().vocab_size);
  for (size_t t = 0; t < toks.size(); ++t) out.row(t) = m.forward(toks.subspan(t, 1), cache).row(0);
  return out;
}

MatrixRM prefill_last(const Model& m, KvCache& cache, std::span<const int> prompt) {
  if (prompt.empty()) fail("internal: a prefill needs a prompt of at least one token");
  if (cache.serves_chunks()) return m.forward(prompt, cache, {}, true);
  MatrixRM last;
  for (size_t t = 0; t < prompt.size(); ++t) last = m.forward(prompt.subspan(t, 1), cache);
  return last;
}

std::vector<int> decode_greedy(const Model& m, KvCache& cache, std::span<const int> prompt, int n) {
  std::vector<int> out;
  if (prompt.empty()) fail("internal: greedy decoding needs a prompt of at least one token");
  MatrixRM logits = prefill_last(m, cache, prompt);
  for (int i = 0; i < n && cache.length() < m.config().seq_len; ++i) {
    Eigen::Index best;
    logits.row(logits.rows() - 1).maxCoeff(&best);
    out.push_back(static_cast<int>(best));
    logits = m.forward(std::span<const int>(out.data() + out.size() - 1, 1), cache);
  }
  return out;
}

RecallSequence recall_sequence(std::span<const int> a, int newline, std::span<const int> filler, int lead, int distance, int start) {
  if (distance < 2) fail("recall distance {} is too short: it must be at least 2 (the two line breaks around the filler)", distance);
  if (lead < 0) fail("internal: a recall lead of {} tokens", lead);
  if (static_cast<long>(filler.size()) < lead + distance - 2)
    fail("internal: the recall filler has {} tokens, lead {} and distance {} need {}", filler.size(), lead, distance, lead + distance - 2);
  RecallSequence r;
  r.span = static_cast<int>(a.size());
  r.tokens.push_back(start);
  if (lead > 0) {  // other text first, so that the passage lies past any attention sink of the cache
    r.tokens.insert(r.tokens.end(), filler.begin(), filler.begin() + lead);
    r.tokens.push_back(newline);
  }
  r.first = static_cast<int>(r.tokens.size());
  r.tokens.insert(r.tokens.end(), a.begin(), a.end());
  r.tokens.push_back(newline);
  r.tokens.insert(r.tokens.end(), filler.begin() + lead, filler.begin() + lead + (distance - 2));
  r.tokens.push_back(newline);
  r.repeat = static_cast<int>(r.tokens.size());
  r.tokens.insert(r.tokens.end(), a.begin(), a.end());
  return r;
}

}  // namespace oscar
