// eval_tasks.cpp: oscar-eval --tasks (eval_steps.h): every task sample through full precision (the reference of the
// 80% mark), then through every job's cache (task_eval.h).
#include "oscar/07_quantize/cache_policy.h"
#include "oscar/11_eval/eval_steps.h"

namespace oscar {

TaskResults task_rows(const EvalContext& c, Progress& bar) {
  std::vector<TaskCache> caches;
  const ModelConfig& mc = c.lm.config;
  caches.push_back({"full precision (fp32)", false, {}, [&mc](size_t) { return std::make_unique<KvCache>(mc); }});
  for (const Job& j : c.plan.jobs)
    caches.push_back({j.recipe.name, j.quantizes(), [r = j.recipe](long t) { return quantized_share(r, t); },
                      [&c, &j](size_t n) { return c.cache(j, n); }});
  return run_tasks(c.lm, c.req.tasks, c.plan.tasks, caches, bar);
}

}  // namespace oscar
