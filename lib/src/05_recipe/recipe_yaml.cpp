// recipe_yaml.cpp: strict YAML parsing of recipes (unknown keys and bad values name file and line).
#include "oscar/05_recipe/recipe_yaml.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "oscar/01_core/error.h"
#include "oscar/fwht_math.h"
#include "oscar/05_recipe/embedded_presets.h"

namespace fs = std::filesystem;

namespace oscar {

namespace {


template <class T>
T get(const YAML::Node& n, const std::string& file, const std::string& key) {
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    fail("{}: bad value '{}' for '{}'", yaml_where(n, file), YAML::Dump(n), key);
  }
}

ScaleDtype parse_dtype(const YAML::Node& n, const std::string& file, const std::string& key) {
  const auto s = get<std::string>(n, file, key);
  if (s == "fp16" || s == "float16") return ScaleDtype::F16;
  if (s == "bf16" || s == "bfloat16") return ScaleDtype::BF16;
  if (s == "fp32" || s == "float32") return ScaleDtype::F32;
  fail("{}: '{}' = '{}' is not a storage dtype; use fp16, bf16 or fp32", yaml_where(n, file), key, s);
}

ZeroPoint parse_zero_point(const YAML::Node& n, const std::string& file) {
  const auto z = get<std::string>(n, file, "zero_point");
  if (z == "float") return ZeroPoint::Float;
  if (z == "integer") return ZeroPoint::Integer;
  fail("{}: zero_point '{}' unknown; use float (the group minimum) or integer (a whole number of steps, as OScaR and QuaRot)",
       yaml_where(n, file), z);
}

float parse_clip_ratio(const YAML::Node& n, const std::string& file, const std::string& key) {
  const float c = get<float>(n, file, key);
  if (!(c > 0.f && c <= 1.f)) fail("{}: clip {} {} must be in (0, 1]", yaml_where(n, file), key, c);
  return c;
}

// `clip: {mode: ratio|quantile, key: R, value: R, bits: [...]}`: the clip of both tensors (a tensor's own `clip: R` sets its
// ratio); `bits`: the widths a quantile mode applies to (the ratio clip at the others).
void parse_clip(const YAML::Node& n, const std::string& file, Recipe& r) {
  yaml_check_keys(n, file, "clip", {"mode", "key", "value", "bits"});
  if (n["bits"]) r.quantile_bits = parse_bits_list(n["bits"], file, "clip.bits");
  if (n["mode"]) {
    const auto m = get<std::string>(n["mode"], file, "mode");
    ClipMode mode;
    if (m == "ratio") mode = ClipMode::Ratio;
    else if (m == "quantile") mode = ClipMode::Quantile;
    else
      fail("{}: clip mode '{}' unknown; use ratio (min and max scaled by the ratio) or quantile (each token row clamped to "
           "its ratio-quantile of |x|, as OSCAR)",
           yaml_where(n["mode"], file), m);
    r.key.clip_mode = r.value.clip_mode = mode;
  }
  if (n["key"]) r.key.clip_ratio = parse_clip_ratio(n["key"], file, "key");
  if (n["value"]) r.value.clip_ratio = parse_clip_ratio(n["value"], file, "value");
}

void parse_windows(const YAML::Node& w, const std::string& file, const std::string& what, TensorWindows& t) {
  if (w["sink"]) t.sink = get<int>(w["sink"], file, "sink");
  if (w["recent"]) t.recent = get<int>(w["recent"], file, "recent");
  if (w["residual"]) t.residual = get<int>(w["residual"], file, "residual");
  if (t.sink < 0 || t.recent < 0 || t.residual < 0) fail("{}: {} sizes must be >= 0", yaml_where(w, file), what);
}

}  // namespace

std::vector<int> parse_bits_list(const YAML::Node& b, const std::string& file, const std::string& key) {
  std::vector<int> out;
  if (b.IsSequence()) {
    if (b.size() == 0) fail("{}: '{}: []' asks for no width; list at least one (1..8, or 16 for fp16)", yaml_where(b, file), key);
    for (const auto& x : b) {
      if (!x.IsScalar()) fail("{}: '{}' entries must be integers (1..8, or 16 for fp16)", yaml_where(x, file), key);
      out.push_back(get<int>(x, file, key));
    }
  } else if (b.IsScalar()) {
    out.push_back(get<int>(b, file, key));
  } else {
    fail("{}: '{}' must be an integer or a list of integers (1..8, or 16 for fp16)", yaml_where(b, file), key);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (!((out[i] >= 1 && out[i] <= 8) || out[i] == 16))
      fail("{}: bits {} out of range; use 1..8 (or 16 for fp16)", yaml_where(b.IsSequence() ? b[i] : b, file), out[i]);
    if (std::find(out.begin(), out.begin() + i, out[i]) != out.begin() + i)
      fail("{}: bits {} is listed twice in '{}'; list each width once", yaml_where(b.IsSequence() ? b[i] : b, file), out[i], key);
  }
  return out;
}

namespace {

void parse_tensor(const YAML::Node& n, const std::string& file, const std::string& what, TensorQuant& q) {
  yaml_check_keys(n, file, what,
             {"bits", "axis", "group", "symmetric", "clip", "clip_search", "scale_dtype", "rounding", "codebook", "zero_point",
              "range_with_zero"});
  if (n["bits"]) {
    q.bits = get<int>(n["bits"], file, "bits");
    if (!((q.bits >= 1 && q.bits <= 8) || q.bits == 16))
      fail("{}: {} bits {} out of range; use 1..8 (or 16 to keep it in fp16)", yaml_where(n["bits"], file), what, q.bits);
  }
  if (n["axis"]) {
    const auto a = get<std::string>(n["axis"], file, "axis");
    if (a == "token") q.axis = QuantAxis::PerToken;
    else if (a == "channel") q.axis = QuantAxis::PerChannel;
    else fail("{}: axis '{}' unknown; use token or channel", yaml_where(n["axis"], file), a);
  }
  if (n["group"]) {
    // `head` (synonym `head_dim`): one group spans the whole head, resolved per model by resolve_recipe().
    if (n["group"].IsScalar() && (n["group"].Scalar() == "head" || n["group"].Scalar() == "head_dim")) q.group = kGroupHead;
    else {
      int g = 0;
      if (n["group"].IsScalar() && !YAML::convert<int>::decode(n["group"], g))
        fail("{}: group '{}' is neither a number nor head; use a positive group size or head (one group per head, any head_dim)",
             yaml_where(n["group"], file), n["group"].Scalar());
      q.group = get<int>(n["group"], file, "group");
      if (q.group <= 0) fail("{}: group {} must be positive (or head: the whole head)", yaml_where(n["group"], file), q.group);
    }
  }
  if (n["symmetric"]) q.symmetric = get<bool>(n["symmetric"], file, "symmetric");
  if (n["clip"]) q.clip_ratio = parse_clip_ratio(n["clip"], file, what);
  if (n["clip_search"]) q.clip_search = get<bool>(n["clip_search"], file, "clip_search");
  if (n["scale_dtype"]) q.scale_dtype = parse_dtype(n["scale_dtype"], file, "scale_dtype");
  if (n["rounding"]) {
    const auto r = get<std::string>(n["rounding"], file, "rounding");
    if (r == "half-even") q.rounding = Rounding::HalfEven;
    else if (r == "half-away") q.rounding = Rounding::HalfAway;
    else fail("{}: rounding '{}' unknown; use half-even or half-away", yaml_where(n["rounding"], file), r);
  }
  if (n["zero_point"]) q.zero_point = parse_zero_point(n["zero_point"], file);
  if (n["range_with_zero"]) q.range_with_zero = get<bool>(n["range_with_zero"], file, "range_with_zero");
  if (n["codebook"]) {
    const auto c = get<std::string>(n["codebook"], file, "codebook");
    if (c == "uniform") q.codebook = Codebook::Uniform;
    else if (c == "lloyd-max") q.codebook = Codebook::LloydMax;
    else fail("{}: codebook '{}' unknown; use uniform or lloyd-max", yaml_where(n["codebook"], file), c);
  }
}

void parse_rotation(const YAML::Node& n, const std::string& file, const std::string& what, RotationSpec& r) {
  yaml_check_keys(n, file, what, {"kind", "seed", "order"});
  if (n["kind"]) {
    const auto k = get<std::string>(n["kind"], file, "kind");
    if (k == "none") r.kind = RotationKind::None;
    else if (k == "hadamard") r.kind = RotationKind::Hadamard;
    else if (k == "randomized-hadamard") r.kind = RotationKind::RandomizedHadamard;
    else if (k == "random") r.kind = RotationKind::RandomOrthogonal;
    else if (k == "covariance") r.kind = RotationKind::Covariance;
    else fail("{}: rotation kind '{}' unknown; use none, hadamard, randomized-hadamard, random or covariance", yaml_where(n["kind"], file), k);
  }
  if (n["seed"]) r.seed = get<uint64_t>(n["seed"], file, "seed");
  if (n["order"]) {
    r.order = get<std::string>(n["order"], file, "order");
    static const std::set<std::string> orders{"UHP", "U", "UP", "UPH", "HUP"};
    if (!orders.count(r.order)) fail("{}: covariance order '{}' unknown; use UHP, U, UP, UPH or HUP", yaml_where(n["order"], file), r.order);
  }
}

}  // namespace

std::string yaml_where(const YAML::Node& n, const std::string& file) {
  const auto m = n.Mark();
  return m.line >= 0 ? fmt::format("{}:{}", file, m.line + 1) : file;
}

void yaml_check_keys(const YAML::Node& n, const std::string& file, const std::string& what,
                     const std::vector<std::string>& allowed) {
  if (!n.IsMap()) fail("{}: {} must be a map of key: value", yaml_where(n, file), what);
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (!it->first.IsScalar()) fail("{}: a key of {} must be a name, not a list or a map", yaml_where(it->first, file), what);
    const std::string k = it->first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      fail("{}: unknown key '{}' in {}; expected one of: {}", yaml_where(it->first, file), k, what, list);
    }
  }
}

RecipeFile parse_recipe(const YAML::Node& node, const std::string& file, RecipeFile base) {
  yaml_check_keys(node, file, "a recipe",
             {"name", "source", "bits", "key_rotation", "value_rotation", "covariance_scope", "omni_token_scaling", "norm_dtype",
              "clip", "zero_point", "key", "value", "windows", "preset"});
  RecipeFile out = std::move(base);
  Recipe& r = out.recipe;
  if (node["name"]) r.name = get<std::string>(node["name"], file, "name");
  if (node["source"]) r.source = get<std::string>(node["source"], file, "source");
  if (node["bits"]) out.bits = parse_bits_list(node["bits"], file, "bits");
  if (node["key_rotation"]) parse_rotation(node["key_rotation"], file, "key_rotation", r.key_rotation);
  if (node["value_rotation"]) parse_rotation(node["value_rotation"], file, "value_rotation", r.value_rotation);
  if (node["covariance_scope"]) {
    const auto sc = get<std::string>(node["covariance_scope"], file, "covariance_scope");
    if (sc == "layer") r.covariance_scope = CovarianceScope::Layer;
    else if (sc == "kv-head") r.covariance_scope = CovarianceScope::KvHead;
    else
      fail("{}: covariance_scope '{}' unknown; use layer (one rotation per layer, shared by its KV heads) or kv-head (one per "
           "KV head)",
           yaml_where(node["covariance_scope"], file), sc);
  }
  if (node["omni_token_scaling"]) r.omni_token_scaling = get<bool>(node["omni_token_scaling"], file, "omni_token_scaling");
  if (node["norm_dtype"]) r.norm_dtype = parse_dtype(node["norm_dtype"], file, "norm_dtype");
  if (node["clip"]) parse_clip(node["clip"], file, r);
  if (node["zero_point"]) r.key.zero_point = r.value.zero_point = parse_zero_point(node["zero_point"], file);
  if (node["key"]) {
    parse_tensor(node["key"], file, "key", r.key);
    if (node["key"]["bits"]) out.key_bits_fixed = true;
  }
  if (node["value"]) {
    parse_tensor(node["value"], file, "value", r.value);
    if (node["value"]["bits"]) out.value_bits_fixed = true;
  }
  if (node["windows"]) {
    const YAML::Node w = node["windows"];
    yaml_check_keys(w, file, "windows", {"sink", "recent", "residual", "dtype", "key", "value"});
    parse_windows(w, file, "window", r.windows.key);  // sink, recent, residual: both tensors
    parse_windows(w, file, "window", r.windows.value);
    for (const char* t : {"key", "value"})
      if (w[t]) {
        yaml_check_keys(w[t], file, fmt::format("windows.{}", t), {"sink", "recent", "residual"});
        parse_windows(w[t], file, fmt::format("windows.{}", t), std::string(t) == "key" ? r.windows.key : r.windows.value);
      }
    if (w["dtype"]) r.windows.window_dtype = parse_dtype(w["dtype"], file, "dtype");
  }
  if (r.name.empty()) fail("{}: a recipe needs a name", yaml_where(node, file));
  if (r.covariance_scope == CovarianceScope::KvHead && !r.calibrated())
    fail("{}: recipe {} has covariance_scope: kv-head but no covariance rotation (key_rotation and value_rotation are not kind: "
         "covariance); drop covariance_scope or use a covariance rotation",
         yaml_where(node["covariance_scope"] ? node["covariance_scope"] : node, file), r.name);
  if (out.bits.empty()) {  // a recipe that names no widths: the width it fixes, else the usual low-bit range
    if (out.key_bits_fixed) out.bits = {r.key.bits};
    else if (out.value_bits_fixed) out.bits = {r.value.bits};
    else out.bits = {2, 3, 4};
  }
  return out;
}

RecipeFile load_recipe_file(const std::string& path) {
  YAML::Node n;
  try {
    n = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    fail("{}: cannot read the recipe file (missing or unreadable)", path);
  } catch (const YAML::ParserException& e) {
    fail("{}:{}: YAML syntax error: {}", path, e.mark.line + 1, e.msg);
  }
  try {
    return parse_recipe_entry(n, path);
  } catch (const YAML::Exception& e) {  // a value of a kind no check above expected: still the file and the line
    fail("{}:{}: a value of the wrong kind ({}); see README's recipe keys", path, e.mark.line + 1, e.msg);
  }
}

RecipeFile parse_recipe_entry(const YAML::Node& node, const std::string& file) {
  RecipeFile base;
  if (node.IsMap() && node["preset"]) {
    const YAML::Node p = node["preset"];
    if (!p.IsScalar()) fail("{}: 'preset:' takes a preset name (e.g. preset: kivi), not a list or a map", yaml_where(p, file));
    try {
      base = load_preset(p.Scalar());
    } catch (const Error& e) {
      fail("{}: {}", yaml_where(p, file), e.what());
    }
  }
  return parse_recipe(node, file, base);
}

std::string presets_dir() {
  const char* env = std::getenv("OSCAR_PRESETS_DIR");
  return env && *env ? env : "";
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  const std::string dir = presets_dir();
  if (dir.empty()) {
    for (int i = 0; i < embedded::kPresetCount; ++i) names.push_back(embedded::kPresets[i].name);
  } else {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) fail("{}: OSCAR_PRESETS_DIR names no folder; unset it to use the built-in presets", dir);
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// `from`: where the presets listed come from.
[[noreturn]] static void unknown_preset(const std::string& name, const std::string& from) {
  std::string list;
  for (const auto& n : preset_names()) list += (list.empty() ? "" : ", ") + n;
  fail("unknown preset '{}'; presets are: {} ({}); give one of these, or a recipe file NAME.yaml", name,
       list.empty() ? "none" : list, from);
}

RecipeFile load_preset(const std::string& name) {
  const std::string dir = presets_dir();
  if (!dir.empty()) {  // OSCAR_PRESETS_DIR: the folder's files replace the built-in presets
    if (!fs::is_directory(dir)) fail("{}: OSCAR_PRESETS_DIR names no folder; unset it to use the built-in presets", dir);
    const fs::path p = fs::path(dir) / (name + ".yaml");
    if (!fs::exists(p)) unknown_preset(name, fmt::format("in {}, from OSCAR_PRESETS_DIR", dir));
    return load_recipe_file(p.string());
  }
  for (int i = 0; i < embedded::kPresetCount; ++i) {
    const embedded::Preset& e = embedded::kPresets[i];
    if (name != e.name) continue;
    const std::string file = fmt::format("built-in preset {}.yaml", name);
    YAML::Node n;
    try {
      n = YAML::Load(std::string(e.text, e.size));
    } catch (const YAML::ParserException& x) {
      fail("{}:{}: YAML syntax error: {}", file, x.mark.line + 1, x.msg);
    }
    return parse_recipe(n, file);
  }
  unknown_preset(name, "built in; OSCAR_PRESETS_DIR=FOLDER reads them from a folder instead");
}

namespace {

// Sets the widths, resolves group = head_dim and checks that the recipe can run on this head_dim.
Recipe resolve_at(const Recipe& in, int key_bits, int value_bits, int head_dim) {
  Recipe r = in;
  r.key.bits = key_bits;
  r.value.bits = value_bits;
  for (TensorQuant* q : {&r.key, &r.value}) {
    if (q->clip_mode == ClipMode::Quantile && !r.quantile_bits.empty() &&
        std::find(r.quantile_bits.begin(), r.quantile_bits.end(), q->bits) == r.quantile_bits.end())
      q->clip_mode = ClipMode::Ratio;  // the quantile clip only at the widths `clip.bits` lists
    q->group = resolved_group(*q, head_dim);
    if (q->quantized() && q->codebook == Codebook::Uniform && q->axis == QuantAxis::PerToken && head_dim % q->group != 0)
      fail("recipe {}: group size {} does not divide head_dim {}; use a divisor of {} (or group: head)", r.name, q->group,
           head_dim, head_dim);
    if (q->quantized()) validate_spec(*q, q->axis == QuantAxis::PerChannel ? q->group : 1, head_dim);
  }
  for (const RotationSpec* s : {&r.key_rotation, &r.value_rotation}) {
    const bool needs_pow2 = s->kind == RotationKind::Hadamard || s->kind == RotationKind::RandomizedHadamard ||
                            (s->kind == RotationKind::Covariance && s->order != "U");
    if (needs_pow2 && !is_power_of_two(head_dim))
      fail("recipe {}: head_dim {} is not a power of two, which its Hadamard rotation needs; use rotation none, random, or "
           "covariance with order U",
           r.name, head_dim);
  }
  return r;
}

}  // namespace

std::vector<std::string> presets_for_head_dim(int head_dim, RecipeWidths w) {
  std::vector<std::string> out;
  for (const std::string& name : preset_names()) {
    try {
      const RecipeFile p = load_preset(name);
      resolve_at(p.recipe, p.key_bits_fixed ? p.recipe.key.bits : w.key, p.value_bits_fixed ? p.recipe.value.bits : w.value,
                 head_dim);
      out.push_back(name);
    } catch (const Error&) {
      // this preset cannot run there (or an OSCAR_PRESETS_DIR file is broken): not listed
    }
  }
  return out;
}

namespace {
// "; presets that run on head_dim D at K-bit keys and V-bit values: a, b" (or that none do).
std::string applicable_hint(int head_dim, RecipeWidths w) {
  const std::vector<std::string> ok = presets_for_head_dim(head_dim, w);
  const std::string at = w.key == w.value ? fmt::format("{} bits", w.key) : fmt::format("{}-bit keys and {}-bit values", w.key, w.value);
  if (ok.empty()) return fmt::format("; no preset runs on head_dim {} at {}", head_dim, at);
  return fmt::format("; presets that run on head_dim {} at {}: {}", head_dim, at, fmt::join(ok, ", "));
}
}  // namespace

Recipe resolve_recipe(const Recipe& in, int bits, int head_dim) {
  Recipe r;
  try {
    r = resolve_at(in, bits, bits, head_dim);
  } catch (const Error& e) {
    fail("{}{}", e.what(), applicable_hint(head_dim, {bits, bits}));
  }
  if (r.name.find('@') == std::string::npos && bits < 16) r.name = fmt::format("{}@{}", r.name, bits);
  return r;
}

std::vector<RecipeWidths> recipe_widths(const RecipeFile& rf, const std::vector<int>& bits) {
  std::vector<RecipeWidths> out;
  if (rf.key_bits_fixed && rf.value_bits_fixed) return {{rf.recipe.key.bits, rf.recipe.value.bits}};
  for (int b : bits) {
    const RecipeWidths w{rf.key_bits_fixed ? rf.recipe.key.bits : b, rf.value_bits_fixed ? rf.recipe.value.bits : b};
    if (std::find(out.begin(), out.end(), w) == out.end()) out.push_back(w);
  }
  return out;
}

std::string widths_label(const RecipeFile& rf, RecipeWidths w) {
  if (w.key == 16 && w.value == 16 && rf.key_bits_fixed && rf.value_bits_fixed) return rf.recipe.name;
  if (w.key == w.value) return fmt::format("{}@{}", rf.recipe.name, w.key);
  return fmt::format("{}@K{}V{}", rf.recipe.name, w.key, w.value);
}

Recipe resolve_recipe(const RecipeFile& rf, RecipeWidths w, int head_dim) {
  const std::string label = widths_label(rf, w);
  try {
    Recipe r = resolve_at(rf.recipe, w.key, w.value, head_dim);
    r.name = label;
    return r;
  } catch (const Error& e) {
    fail("recipe '{}' cannot run with {}-bit keys and {}-bit values on head_dim {}: {}{}", label, w.key, w.value, head_dim,
         e.what(), applicable_hint(head_dim, w));
  }
}

}  // namespace oscar
