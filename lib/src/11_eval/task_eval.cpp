// task_eval.cpp: prefill each task prompt through each cache, answer greedily, score, and gather the cells with Wilson
// intervals.
#include "oscar/11_eval/task_eval.h"

#include <algorithm>
#include <span>

#include "oscar/01_core/error.h"
#include "oscar/11_eval/decoding.h"

namespace oscar {

namespace {

template <typename T>
void add_once(std::vector<T>& v, const T& x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

}  // namespace

const TaskCell& TaskResults::cell(const std::string& recipe, const std::string& task, int length) const {
  for (const TaskCell& c : cells)
    if (c.recipe == recipe && c.task == task && c.length == length) return c;
  fail("internal: no task cell {} / {} / {}", recipe, task, length);
}

TaskResults run_tasks(const LoadedModel& lm, const std::string& file, const std::vector<TaskSample>& samples,
                      const std::vector<TaskCache>& caches, Progress& bar) {
  TaskResults r;
  r.file = file;
  const int ctx = lm.config.seq_len;
  std::vector<std::vector<int>> prompts;
  std::vector<size_t> splits;  // where the question starts: the context's tokens come first
  for (const TaskSample& s : samples) {  // every prompt checked before any decoding
    prompts.push_back(lm.encode(s.prompt));
    if (!s.prompt_ids.empty() && s.prompt_ids != prompts.back())
      fail("{}: line {}: the prompt's ids differ from {}'s encoding of its text: the file was written for another tokenizer; "
           "write the tasks with oscar-tasks --model {}",
           file, &s - samples.data() + 1, lm.path, lm.path);
    splits.push_back(static_cast<size_t>(question_start(s, prompts.back(), [&lm](std::string_view t) { return lm.encode(t); })));
    const long need = static_cast<long>(prompts.back().size()) + answer_tokens(s.task);
    if (need > ctx)
      fail("{}: a {} prompt of {} tokens (line {}) with its {} answer tokens exceeds {}'s context of {} tokens; write the tasks "
           "with oscar-tasks for this model (lengths up to its context)",
           file, s.task, prompts.back().size(), &s - samples.data() + 1, answer_tokens(s.task), lm.path, ctx);
    add_once(r.tasks, s.task);
    add_once(r.lengths, s.target_tokens);
  }
  std::sort(r.lengths.begin(), r.lengths.end());
  const Model& m = lm.model();
  for (const TaskCache& c : caches) {
    r.recipes.push_back(c.name);
    for (size_t i = 0; i < samples.size(); ++i) {
      const TaskSample& s = samples[i];
      const int n_new = answer_tokens(s.task);
      const auto cache = c.make(prompts[i].size() + n_new);
      const std::span<const int> all(prompts[i]);
      cache->read_chunks_in_full_precision(true);  // the context: a prefill, stored in low bits as it is written
      m.forward(all.first(splits[i]), *cache, {}, true);
      cache->read_chunks_in_full_precision(false);  // the question and the answer: from the cache of their own time
      const std::vector<int> ids = decode_greedy(m, *cache, all.subspan(splits[i]), n_new);
      std::string text;
      int prev = prompts[i].back();
      for (int t : ids) text += lm.decode_piece(prev, t), prev = t;
      TaskOutcome o{c.name, s.task, s.target_tokens, static_cast<int>(prompts[i].size()), s.index, s.depth, score_answer(s, text),
                    c.quantizes ? c.quantized_share(static_cast<long>(prompts[i].size())) : 0.0, text};
      r.outcomes.push_back(std::move(o));
      bar.advance();
    }
  }
  // Cells: per (recipe, task, length) and pooled over tasks ("all").
  std::vector<std::string> task_keys = r.tasks;
  task_keys.push_back("all");
  for (const std::string& recipe : r.recipes)
    for (const std::string& task : task_keys)
      for (int len : r.lengths) {
        TaskCell cell{recipe, task, len};
        for (const TaskOutcome& o : r.outcomes)
          if (o.recipe == recipe && o.length == len && (task == "all" || o.task == task))
            cell.score += o.score, cell.quantized += o.quantized, ++cell.n;
        if (cell.n > 0) cell.quantized /= cell.n;
        cell.ci = wilson_interval(cell.score, cell.n);
        r.cells.push_back(cell);
      }
  for (TaskCell& cell : r.cells) {  // the first cache is the reference
    const TaskCell& ref = r.cell(r.recipes.front(), cell.task, cell.length);
    cell.reference_weak = ref.n > 0 && ref.accuracy() < kTaskReferenceFloor;
  }
  return r;
}

}  // namespace oscar
