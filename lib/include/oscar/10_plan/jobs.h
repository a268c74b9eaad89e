// jobs.h: the one job planner of oscar-eval and oscar-sweep. A job is one recipe at one pair of widths: every recipe at
// every width asked, a recipe's fixed key or value width kept (recipe_widths), resolved for the model's head_dim and
// labelled with the widths truly used (widths_label: NAME@2, NAME@K4V2, or NAME for a recipe fixed at fp16). The rows
// that read mostly their full-precision windows are grouped by window shape for one warning (LowShareRows); which
// rows a verdict ranks is verdict.h's rankable().
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "oscar/05_recipe/recipe_yaml.h"

namespace oscar {

struct Job {
  Recipe recipe;        // resolved at `widths` and named by widths_label()
  std::string preset;   // the recipe's own name
  int bits = 0;         // the width asked of the recipe (its value width when it fixes its key width)
  RecipeWidths widths;  // the widths used
  bool gpu = false;     // attends through the CUDA kernels (oscar-eval --gpu)
  bool quantizes() const { return recipe.key.quantized() || recipe.value.quantized(); }
};

// Every recipe at every width of `bits` (empty: each recipe's own `bits:` list), in the order given. Throws Error
// naming the recipe and both widths when one cannot run on `head_dim` (followed by `advice` when given), when a recipe
// is asked for no width, and when two jobs would carry the same label.
std::vector<Job> plan_jobs(const std::vector<RecipeFile>& recipes, const std::vector<int>& bits, int head_dim,
                           const std::string& advice = {});

// The rows that keep most of what attention reads in their full-precision windows (share under kMinQuantizedShare),
// grouped by their windows (windows_text) in the order they arrive.
class LowShareRows {
 public:
  struct Group {
    std::string windows;
    std::vector<std::string> rows;  // the caller's text for each row (its label, with its share where wanted)
    std::string needed;             // the caller's text for the length its first recipe needs to reach kMinQuantizedShare
  };
  // Adds `row` of recipe `r` to its group; `needed` is asked once per group, for its first recipe.
  void add(const Recipe& r, std::string row, const std::function<std::string()>& needed);
  const std::vector<Group>& groups() const { return groups_; }
  bool empty() const { return groups_.empty(); }

 private:
  std::vector<Group> groups_;
};

}  // namespace oscar
