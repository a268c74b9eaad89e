// test_presets_embedded.cpp: the preset recipes compiled into the library are byte for byte the files of
// experiments/presets/, load without the folder, and OSCAR_PRESETS_DIR replaces them; unknown names list
// the presets that exist.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "oscar/05_recipe/embedded_presets.h"
#include "oscar/05_recipe/recipe_yaml.h"

namespace fs = std::filesystem;
using namespace oscar;

namespace {

const fs::path kPresetsDir = fs::path(OSCAR_DATA_DIR) / ".." / "experiments" / "presets";

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct EnvVar {  // sets a variable for one scope
  explicit EnvVar(const std::string& value) { setenv("OSCAR_PRESETS_DIR", value.c_str(), 1); }
  ~EnvVar() { unsetenv("OSCAR_PRESETS_DIR"); }
};

}  // namespace

TEST_CASE("embedded presets are the files of experiments/presets", "[presets]") {
  unsetenv("OSCAR_PRESETS_DIR");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(kPresetsDir))
    if (e.path().extension() == ".yaml") files.push_back(e.path().stem().string());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 8);
  CHECK(preset_names() == files);
  REQUIRE(embedded::kPresetCount == int(files.size()));
  for (int i = 0; i < embedded::kPresetCount; ++i) {
    const embedded::Preset& p = embedded::kPresets[i];
    INFO(p.name);
    const std::string text = slurp(kPresetsDir / (std::string(p.name) + ".yaml"));
    CHECK(std::string(p.text, p.size) == text);
    CHECK(p.text[p.size] == '\0');
    CHECK(load_preset(p.name).recipe.name == load_recipe_file((kPresetsDir / (std::string(p.name) + ".yaml")).string()).recipe.name);
  }
  CHECK(presets_dir().empty());
  CHECK_THROWS_WITH(load_preset("nope"), Catch::Contains("unknown preset 'nope'") && Catch::Contains("oscar-omni") &&
                                             Catch::Contains("built in"));
}

TEST_CASE("OSCAR_PRESETS_DIR replaces the built-in presets", "[presets]") {
  const fs::path dir = fs::path(OSCAR_BUILD_DIR) / "test_presets_override";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "mine.yaml") << "name: mine\nsource: \"override\"\nbits: [3]\nkey: {axis: token, group: 64}\n";
  std::ofstream(dir / "broken.yaml") << "name: broken\nkey: {axis: diagonal}\n";
  {
    EnvVar env(dir.string());
    CHECK(preset_names() == std::vector<std::string>{"broken", "mine"});
    const RecipeFile r = load_preset("mine");
    CHECK(r.recipe.source == "override");
    CHECK(r.bits == std::vector<int>{3});
    CHECK_THROWS_WITH(load_preset("oscar-cov"), Catch::Contains("unknown preset 'oscar-cov'") && Catch::Contains("broken, mine") &&
                                                    Catch::Contains("OSCAR_PRESETS_DIR"));
    CHECK_THROWS_WITH(load_preset("broken"), Catch::Contains("broken.yaml:2") && Catch::Contains("axis 'diagonal'"));
  }
  {
    EnvVar env((dir / "missing").string());
    CHECK_THROWS_WITH(load_preset("mine"), Catch::Contains("OSCAR_PRESETS_DIR names no folder"));
  }
  CHECK(load_preset("oscar-cov").recipe.name == "oscar-cov");
  fs::remove_all(dir);
}
