// sweep_config.cpp: oscar-sweep's config (sweep.h): strict YAML, unknown keys and bad values name the file and line; dump
// entries labelled so that their rows can be told apart; each recipe's widths.
#include <filesystem>
#include <set>

#include "oscar/01_core/error.h"
#include "oscar/12_sweep/sweep.h"

namespace fs = std::filesystem;

namespace oscar {

namespace {

std::string rel_to(const std::string& file, const std::string& p) {
  if (p.empty() || fs::path(p).is_absolute()) return p;
  return (fs::path(file).parent_path() / p).lexically_normal().string();
}

// One `dumps:` entry as written: its label (`name:`, or the file's stem), whether it was named, and its place.
struct DumpEntry {
  SweepDump dump;
  std::string written, where;  // the path as the config writes it; "file:line"
  bool named = false;
};

DumpEntry parse_dump(const YAML::Node& d, const std::string& path) {
  yaml_check_keys(d, path, "a dump entry", {"name", "path", "calibration"});
  if (!d["path"]) fail("{}: a dump entry needs 'path:'", yaml_where(d, path));
  auto str = [&](const char* key) {
    try {
      return d[key].as<std::string>();
    } catch (const YAML::Exception& e) {
      fail("{}:{}: bad value for a dump's '{}:' ({}); it takes a string", path, e.mark.line + 1, key, e.msg);
    }
  };
  DumpEntry e;
  e.written = str("path");
  e.dump.path = rel_to(path, e.written);
  e.dump.name = d["name"] ? str("name") : fs::path(e.dump.path).stem().string();
  if (d["calibration"]) e.dump.calibration = rel_to(path, str("calibration"));
  if (e.dump.name.empty()) fail("{}: a dump's name is empty; give it a name:", yaml_where(d, path));
  e.named = static_cast<bool>(d["name"]);
  e.where = yaml_where(d, path);
  return e;
}

// Row labels must tell dumps apart: a `name:` given twice is an error; file stems that collide fall back to the path as
// written in the config; the same file listed twice is an error.
void label_dumps(std::vector<DumpEntry>& es) {
  for (size_t i = 0; i < es.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      if (fs::absolute(es[i].dump.path).lexically_normal() == fs::absolute(es[j].dump.path).lexically_normal())
        fail("{}: dump {} is listed twice (also at {}); list each dump once", es[i].where, es[i].dump.path, es[j].where);
      if (es[i].named && es[j].named && es[i].dump.name == es[j].dump.name)
        fail("{}: two dumps are named '{}' (also at {}); give each a distinct name: so that their rows can be told apart", es[i].where,
             es[i].dump.name, es[j].where);
    }
  const auto stem_label = [](const DumpEntry& e) { return e.named ? e.dump.name : fs::path(e.dump.path).stem().string(); };
  std::vector<std::string> labels;
  for (const DumpEntry& e : es) {
    bool clash = false;
    for (const DumpEntry& o : es) clash = clash || (&o != &e && stem_label(o) == e.dump.name);
    labels.push_back(!e.named && clash ? fs::path(e.written).lexically_normal().string() : e.dump.name);
  }
  for (size_t i = 0; i < es.size(); ++i) {
    es[i].dump.name = labels[i];
    for (size_t j = 0; j < i; ++j)
      if (labels[i] == labels[j])
        fail("{}: dump label '{}' is also the label of the dump at {}; give one a distinct name:", es[i].where, labels[i], es[j].where);
  }
}

std::vector<SweepDump> parse_dumps(const YAML::Node& n, const std::string& path) {
  if (!n.IsSequence() || n.size() == 0) fail("{}: 'dumps:' must list at least one dump", yaml_where(n, path));
  std::vector<DumpEntry> es;
  for (const auto& d : n) es.push_back(parse_dump(d, path));
  label_dumps(es);
  std::vector<SweepDump> dumps;
  for (DumpEntry& e : es) dumps.push_back(std::move(e.dump));
  return dumps;
}

// Each recipe with the widths asked of it: its own `bits:` in the entry, else the config's `bits`, else the preset's.
std::vector<RecipeFile> parse_recipes(const YAML::Node& n, const std::string& path, const std::vector<int>& bits) {
  if (!n.IsSequence() || n.size() == 0) fail("{}: 'recipes:' must list at least one recipe", yaml_where(n, path));
  std::vector<RecipeFile> recipes;
  std::set<std::string> names;
  for (const auto& r : n) {
    if (r.IsScalar()) {
      try {
        recipes.push_back(load_preset(r.Scalar()));
      } catch (const Error& e) {
        fail("{}: {}", yaml_where(r, path), e.what());
      }
    } else {
      recipes.push_back(parse_recipe_entry(r, path));
    }
    if (!bits.empty() && !(r.IsMap() && r["bits"])) recipes.back().bits = bits;
    if (!names.insert(recipes.back().recipe.name).second)
      fail("{}: two recipes are named '{}'; give one a distinct name:", path, recipes.back().recipe.name);
  }
  return recipes;
}

YAML::Node read_yaml(const std::string& path) {
  try {
    return YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    fail("{}: cannot read the sweep config (missing or unreadable)", path);
  } catch (const YAML::ParserException& e) {
    fail("{}:{}: YAML syntax error: {}", path, e.mark.line + 1, e.msg);
  }
}

SweepConfig parse_sweep_config(const std::string& path) {
  const YAML::Node n = read_yaml(path);
  SweepConfig c;
  c.file = path;
  yaml_check_keys(n, path, "the sweep config", {"title", "output", "queries", "bits", "dumps", "recipes"});
  for (const char* req : {"output", "dumps", "recipes"})
    if (!n[req]) fail("{}: the sweep config needs '{}:'", path, req);
  // A value of the wrong kind names its key and what the key takes.
  auto scalar = [&](const char* key, const char* takes, auto as) {
    try {
      return as(n[key]);
    } catch (const YAML::Exception& e) {
      fail("{}:{}: bad value for '{}:' ({}); it takes {}", path, e.mark.line + 1, key, e.msg, takes);
    }
  };
  if (n["title"]) c.title = scalar("title", "a string", [](const YAML::Node& x) { return x.as<std::string>(); });
  c.output = rel_to(path, scalar("output", "a folder path", [](const YAML::Node& x) { return x.as<std::string>(); }));
  if (n["queries"]) c.queries = scalar("queries", "a positive integer", [](const YAML::Node& x) { return x.as<int>(); });
  if (c.queries <= 0) fail("{}: queries must be positive", yaml_where(n["queries"], path));
  if (n["bits"]) c.bits = parse_bits_list(n["bits"], path, "bits");
  c.dumps = parse_dumps(n["dumps"], path);
  c.recipes = parse_recipes(n["recipes"], path, c.bits);
  return c;
}

}  // namespace

SweepConfig load_sweep_config(const std::string& path) {
  try {
    return parse_sweep_config(path);
  } catch (const YAML::Exception& e) {  // a value of a kind no check expected: still the file and the line
    fail("{}:{}: a value of the wrong kind ({}); see README's sweep config keys", path, e.mark.line + 1, e.msg);
  }
}

VerdictMetric sweep_metric(const std::string& name) {
  if (name == "kl") return {"kl", "attention KL(full ‖ quantized)", false, "(layer, KV head) rows", 1};
  if (name == "output-error") return {"output-error", "attention-output relative error", false, "(layer, KV head) rows", 1};
  if (name == "dloss") fail("--metric dloss is oscar-eval's (loss of a model decoding from the cache); oscar-sweep ranks by kl or output-error");
  fail("--metric '{}' is unknown; use kl (attention distributions) or output-error (attention output)", name);
}

}  // namespace oscar
