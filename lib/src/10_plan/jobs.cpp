// jobs.cpp: plan_jobs and LowShareRows (jobs.h).
#include "oscar/10_plan/jobs.h"

#include <algorithm>
#include <set>

#include "oscar/01_core/error.h"
#include "oscar/07_quantize/cache_policy.h"

namespace oscar {

std::vector<Job> plan_jobs(const std::vector<RecipeFile>& recipes, const std::vector<int>& bits, int head_dim,
                           const std::string& advice) {
  std::vector<Job> jobs;
  std::set<std::string> labels;
  for (const RecipeFile& rf : recipes) {
    const std::vector<RecipeWidths> ws = recipe_widths(rf, bits.empty() ? rf.bits : bits);
    if (ws.empty()) fail("recipe '{}' is asked for no width; give it bits: (1..8, or 16 for fp16)", rf.recipe.name);
    for (const RecipeWidths& w : ws) {
      Job j{{}, rf.recipe.name, rf.key_bits_fixed ? w.value : w.key, w};
      try {
        j.recipe = resolve_recipe(rf, w, head_dim);
      } catch (const Error& e) {
        if (advice.empty()) throw;
        fail("{}; {}", e.what(), advice);
      }
      if (!labels.insert(j.recipe.name).second)
        fail("two runs would both be labelled '{}'; give the recipes distinct names", j.recipe.name);
      jobs.push_back(std::move(j));
    }
  }
  return jobs;
}

void LowShareRows::add(const Recipe& r, std::string row, const std::function<std::string()>& needed) {
  const std::string w = windows_text(r);
  auto it = std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) { return g.windows == w; });
  if (it == groups_.end()) it = groups_.insert(groups_.end(), {w, {}, needed()});
  it->rows.push_back(std::move(row));
}

}  // namespace oscar
