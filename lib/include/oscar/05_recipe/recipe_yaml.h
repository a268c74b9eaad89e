// recipe_yaml.h: recipes from YAML. A recipe file (experiments/presets/NAME.yaml) or an inline map
// names its fields; unknown keys and bad values are errors naming the file and line. `group: head`
// (synonym `head_dim`: one group spans the whole head) is kept as kGroupHead and resolved per model by resolve_recipe().
#pragma once
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "oscar/05_recipe/recipe.h"

namespace oscar {

struct RecipeFile {
  Recipe recipe;
  std::vector<int> bits;  // widths the recipe is meant for (the preset's `bits:` list)
  // The recipe sets `key: {bits: N}` / `value: {bits: N}` itself: that tensor keeps its width whatever
  // width a sweep asks (the width applies to the other tensor; a recipe that fixes both runs once).
  bool key_bits_fixed = false, value_bits_fixed = false;
};

// One run of a recipe: the widths of its keys and values (16: kept in fp16).
struct RecipeWidths {
  int key = 16, value = 16;
  bool operator==(const RecipeWidths& o) const { return key == o.key && value == o.value; }
};

// The widths a recipe runs at when asked for `bits` (each width applied to the tensors the recipe does
// not fix), without duplicates, in the order asked. A recipe that fixes both tensors runs once.
std::vector<RecipeWidths> recipe_widths(const RecipeFile& rf, const std::vector<int>& bits);
// "NAME" for a recipe fixed at fp16 on both tensors, "NAME@B" when keys and values share width B,
// "NAME@K4V2" otherwise: the label of a sweep row, which says the widths truly used.
std::string widths_label(const RecipeFile& rf, RecipeWidths w);
// The recipe at widths `w` with group = head_dim resolved and named by widths_label(); throws Error
// naming the recipe and both widths when it cannot run at them (e.g. Lloyd-Max above 4 bits, Hadamard on
// head_dim 96), followed by the presets that do run there (presets_for_head_dim).
Recipe resolve_recipe(const RecipeFile& rf, RecipeWidths w, int head_dim);

// Applies the fields present in `node` on top of `base` (so a sweep entry can override a preset).
RecipeFile parse_recipe(const YAML::Node& node, const std::string& file, RecipeFile base = {});
// A recipe file, or a sweep's recipe entry: `preset: NAME` starts from that preset and the other fields override it.
RecipeFile load_recipe_file(const std::string& path);
RecipeFile parse_recipe_entry(const YAML::Node& node, const std::string& file);
// Preset NAME: experiments/presets/NAME.yaml as embedded at build time, or NAME.yaml in the folder that the
// environment variable OSCAR_PRESETS_DIR names (which then replaces the built-in set); lists the presets
// on failure.
RecipeFile load_preset(const std::string& name);
std::vector<std::string> preset_names();
std::string presets_dir();  // OSCAR_PRESETS_DIR, or "" for the built-in presets
// The presets (preset_names(), in order) that can run on `head_dim` at widths `w` (a preset's fixed widths
// kept), found by resolving each one there: what an error offers when a recipe cannot run on a head_dim.
std::vector<std::string> presets_for_head_dim(int head_dim, RecipeWidths w);

// A `bits:` value: an integer or a list of distinct integers in 1..8 or 16; anything else (`bits: two`,
// `[]`, 2.5, a repeated width) is an error naming the file and line.
std::vector<int> parse_bits_list(const YAML::Node& node, const std::string& file, const std::string& key);

// The recipe at `bits` on both tensors (named NAME@bits below 16) with group = head_dim resolved; throws
// Error when the recipe cannot apply to this head_dim (Hadamard on a non-power of two, groups), listing the
// presets that can.
Recipe resolve_recipe(const Recipe& r, int bits, int head_dim);

// Strict-YAML helpers shared by the config readers: "file:line" of a node, and a check that a map has
// only the allowed keys (an unknown key is an error naming its line and the allowed ones).
std::string yaml_where(const YAML::Node& n, const std::string& file);
void yaml_check_keys(const YAML::Node& n, const std::string& file, const std::string& what,
                     const std::vector<std::string>& allowed);


}  // namespace oscar
