// decoding.h: running the model through a cache as a server would: teacher-forced (every token fed one at
// a time, the logits of each position kept), greedy generation, and the recall test's token sequence.
// The cache decides what attention sees (full precision, QuantizedKvCache, GpuKvCache).
#pragma once
#include <span>
#include <vector>

#include "oscar/02_model/forward/model.h"

namespace oscar {

// Logits [toks.size(), vocab] of every position, each predicted from the cache as it stood after its own token: one
// chunk when the cache serves chunks (KvCache::serves_chunks: its view gives each query its own time's cache), else
// the tokens fed one at a time. Positions start at cache.length().
MatrixRM decode_teacher_forced(const Model& m, KvCache& cache, std::span<const int> toks);

// The logits [1, vocab] after `prompt` (read as decode_teacher_forced reads it: every prompt token from the cache of
// its own time), the prompt appended to the cache.
MatrixRM prefill_last(const Model& m, KvCache& cache, std::span<const int> prompt);

// Feeds `prompt` one token at a time, then appends the argmax token (lowest id on ties) `n` times, or
// until the cache reaches the model's context; returns the generated ids (the prompt excluded).
std::vector<int> decode_greedy(const Model& m, KvCache& cache, std::span<const int> prompt, int n);

// The recall test's sequence: start, [filler[0 .. lead), newline,] A, newline, filler[lead .. lead + distance - 2),
// newline, A. `start` is BOS, or for a model that reads no BOS (SmolLM2) the newline token, so that both copies of A
// start a line and the first one's first token is predicted too; `filler` is text that can follow a line break (a
// passage from LoadedModel::passage_body_start() on). The lead (0: none) puts A past a cache's attention sink; the
// distance puts its first copy out of a recent window by the time it is read again. `first` and `repeat` are the
// positions of A's first token in each copy, repeat - first = span + distance. Needs distance >= 2 and
// filler.size() >= lead + distance - 2; throws Error otherwise.
struct RecallSequence {
  std::vector<int> tokens;
  int first = 0, repeat = 0, span = 0;
};
RecallSequence recall_sequence(std::span<const int> a, int newline, std::span<const int> filler, int lead, int distance, int start);

}  // namespace oscar
