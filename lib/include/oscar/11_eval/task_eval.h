// task_eval.h: long-context task accuracy per recipe (oscar-eval --tasks). Every sample of a task file (long_tasks.h)
// is served as a document followed by a question: the context (the task's intro, haystack and needles, up to the
// question's line) is prefilled, its own attention in full precision and its keys and values stored in the recipe's
// cache as they are written (a server's prefill); the question and the answer prefix are then read token by token
// from that cache, and the answer generated greedily (answer_tokens() tokens), so that every token of the answer and
// of the question before it reads the needle from the low-bit cache. oscar_kv.hf serves the same way on the GPU
// (experiments/hf_eval.py --tasks). The answer is scored with RULER's string_match_all. Cells are (recipe, task,
// length): the mean score with Wilson's 95% interval, and a mark where full precision itself scores under 80% (such
// a cell cannot separate recipes).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "oscar/01_core/progress.h"
#include "oscar/01_core/stats.h"
#include "oscar/02_model/loaded_model.h"
#include "oscar/11_eval/long_tasks.h"

namespace oscar {

inline constexpr double kTaskReferenceFloor = 0.8;  // full precision under this: the cell cannot separate recipes

// One way of caching: full precision, or a recipe's cache; `make` gives an empty cache for a sequence of n tokens.
struct TaskCache {
  std::string name;
  bool quantizes = false;
  // The share of the prompt's cache in low bits when generation starts (global layers; 0 for full precision).
  std::function<double(long prompt_tokens)> quantized_share;
  std::function<std::unique_ptr<KvCache>(size_t tokens)> make;
};

struct TaskOutcome {
  std::string recipe, task;
  int length = 0, prompt_tokens = 0, index = 0;
  double depth = 0, score = 0, quantized = 0;
  std::string answer;  // the generated text
};

struct TaskCell {
  std::string recipe, task;  // task "all": every task of that length pooled
  int length = 0, n = 0;
  double score = 0;          // summed
  Interval ci{NAN, NAN};     // Wilson's 95% interval of score / n
  double quantized = 0;      // mean share of the prompt's cache in low bits
  bool reference_weak = false;  // full precision scores under kTaskReferenceFloor in this cell
  double accuracy() const { return n > 0 ? score / n : NAN; }
};

struct TaskResults {
  std::string file;
  std::vector<std::string> recipes, tasks;  // in order of appearance (recipes: the caches' order)
  std::vector<int> lengths;
  std::vector<TaskOutcome> outcomes;
  std::vector<TaskCell> cells;
  const TaskCell& cell(const std::string& recipe, const std::string& task, int length) const;
};

// Runs every sample through every cache (the first cache is the reference the 80% mark reads); `bar` advances once
// per sample and cache. Throws Error naming the file when a prompt is longer than the model's context, or its ids (when the
// file has them) are not the model's encoding of its text.
TaskResults run_tasks(const LoadedModel& lm, const std::string& file, const std::vector<TaskSample>& samples,
                      const std::vector<TaskCache>& caches, Progress& bar);

}  // namespace oscar
