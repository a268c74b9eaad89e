// recipe_yaml.h: recipes from YAML. A recipe file (experiments/presets/NAME.yaml) or an inline map
// names its fields; unknown keys and bad values are errors naming the file and line. `group: head_dim`
// is kept as group = 0 and resolved per model by resolve_recipe().
#pragma once
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "oscar/06_quantize/recipe.h"

namespace oscar {

struct RecipeFile {
  Recipe recipe;
  std::vector<int> bits;  // widths the recipe is meant for (the preset's `bits:` list)
};

// Applies the fields present in `node` on top of `base` (so a sweep entry can override a preset).
RecipeFile parse_recipe(const YAML::Node& node, const std::string& file, RecipeFile base = {});
RecipeFile load_recipe_file(const std::string& path);
// Preset NAME: experiments/presets/NAME.yaml as embedded at build time, or NAME.yaml in the folder that the
// environment variable OSCAR_PRESETS_DIR names (which then replaces the built-in set); lists the presets
// on failure.
RecipeFile load_preset(const std::string& name);
std::vector<std::string> preset_names();
std::string presets_dir();  // OSCAR_PRESETS_DIR, or "" for the built-in presets

// The recipe at `bits` (both tensors, unless a tensor is fp16) with group = head_dim resolved; throws
// Error when the recipe cannot apply to this head_dim (Hadamard on a non-power of two, groups).
Recipe resolve_recipe(const Recipe& r, int bits, int head_dim);

// Strict-YAML helpers shared by the config readers: "file:line" of a node, and a check that a map has
// only the allowed keys (an unknown key is an error naming its line and the allowed ones).
std::string yaml_where(const YAML::Node& n, const std::string& file);
void yaml_check_keys(const YAML::Node& n, const std::string& file, const std::string& what,
                     const std::vector<std::string>& allowed);


}  // namespace oscar
