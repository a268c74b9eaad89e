// sweep.cpp: config parsing, the layer-parallel sweep, aggregation and outputs.
#include "oscar/10_sweep/sweep.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "oscar/06_quantize/cache_policy.h"
#include "oscar/06_quantize/cache_sim.h"
#include "oscar/03_dump/dump.h"
#include "oscar/03_dump/layer_source.h"
#include "oscar/01_core/error.h"
#include "oscar/01_core/output_files.h"
#include "oscar/01_core/file_io.h"
#include "oscar/01_core/version.h"
#include "oscar/11_report/plotting.h"
#include "oscar/01_core/progress.h"
#include "oscar/05_rotate/rotation.h"

namespace fs = std::filesystem;

namespace oscar {

namespace {

std::string line_of(const YAML::Node& n, const std::string& file) { return yaml_where(n, file); }
void check_keys(const YAML::Node& n, const std::string& file, const std::string& what, const std::vector<std::string>& allowed) {
  yaml_check_keys(n, file, what, allowed);
}

std::string rel_to(const std::string& file, const std::string& p) {
  if (p.empty() || fs::path(p).is_absolute()) return p;
  return (fs::path(file).parent_path() / p).lexically_normal().string();
}

}  // namespace

namespace {
SweepConfig parse_sweep_config(const std::string& path);
}  // namespace

SweepConfig load_sweep_config(const std::string& path) {
  try {
    return parse_sweep_config(path);
  } catch (const YAML::Exception& e) {  // a value of a kind no check expected: still the file and the line
    fail("{}:{}: a value of the wrong kind ({}); see README's sweep config keys", path, e.mark.line + 1, e.msg);
  }
}

namespace {
SweepConfig parse_sweep_config(const std::string& path) {
  YAML::Node n;
  try {
    n = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    fail("{}: cannot read the sweep config (missing or unreadable)", path);
  } catch (const YAML::ParserException& e) {
    fail("{}:{}: YAML syntax error: {}", path, e.mark.line + 1, e.msg);
  }
  SweepConfig c;
  c.file = path;
  check_keys(n, path, "the sweep config", {"title", "output", "queries", "bits", "dumps", "recipes"});
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
  if (c.queries <= 0) fail("{}: queries must be positive", line_of(n["queries"], path));
  if (n["bits"]) c.bits = parse_bits_list(n["bits"], path, "bits");
  if (!n["dumps"].IsSequence() || n["dumps"].size() == 0) fail("{}: 'dumps:' must list at least one dump", line_of(n["dumps"], path));
  // Row labels must tell dumps apart: a `name:` given twice is an error; file stems that collide fall
  // back to the path as written in the config; the same file listed twice is an error.
  std::vector<std::string> written, where_of;
  std::vector<bool> named;
  for (const auto& d : n["dumps"]) {
    check_keys(d, path, "a dump entry", {"name", "path", "calibration"});
    if (!d["path"]) fail("{}: a dump entry needs 'path:'", line_of(d, path));
    SweepDump sd;
    auto str = [&](const char* key) {
      try {
        return d[key].as<std::string>();
      } catch (const YAML::Exception& e) {
        fail("{}:{}: bad value for a dump's '{}:' ({}); it takes a string", path, e.mark.line + 1, key, e.msg);
      }
    };
    written.push_back(str("path"));
    sd.path = rel_to(path, written.back());
    sd.name = d["name"] ? str("name") : fs::path(sd.path).stem().string();
    if (d["calibration"]) sd.calibration = rel_to(path, str("calibration"));
    if (sd.name.empty()) fail("{}: a dump's name is empty; give it a name:", line_of(d, path));
    named.push_back(static_cast<bool>(d["name"]));
    where_of.push_back(line_of(d, path));
    c.dumps.push_back(sd);
  }
  for (size_t i = 0; i < c.dumps.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      if (fs::absolute(c.dumps[i].path).lexically_normal() == fs::absolute(c.dumps[j].path).lexically_normal())
        fail("{}: dump {} is listed twice (also at {}); list each dump once", where_of[i], c.dumps[i].path, where_of[j]);
      if (named[i] && named[j] && c.dumps[i].name == c.dumps[j].name)
        fail("{}: two dumps are named '{}' (also at {}); give each a distinct name: so that their rows can be told apart",
             where_of[i], c.dumps[i].name, where_of[j]);
    }
  for (size_t i = 0; i < c.dumps.size(); ++i) {
    if (named[i]) continue;
    bool clash = false;
    for (size_t j = 0; j < c.dumps.size(); ++j)
      clash = clash || (j != i && (named[j] ? c.dumps[j].name : fs::path(c.dumps[j].path).stem().string()) == c.dumps[i].name);
    if (clash) c.dumps[i].name = fs::path(written[i]).lexically_normal().string();
  }
  for (size_t i = 0; i < c.dumps.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (c.dumps[i].name == c.dumps[j].name)
        fail("{}: dump label '{}' is also the label of the dump at {}; give one a distinct name:", where_of[i], c.dumps[i].name,
             where_of[j]);
  if (!n["recipes"].IsSequence() || n["recipes"].size() == 0) fail("{}: 'recipes:' must list at least one recipe", line_of(n["recipes"], path));
  for (const auto& r : n["recipes"]) {
    if (r.IsScalar()) {
      try {
        c.recipes.push_back(load_preset(r.Scalar()));
      } catch (const Error& e) {
        fail("{}: {}", line_of(r, path), e.what());
      }
    } else {
      c.recipes.push_back(parse_recipe_entry(r, path));
    }
    // The widths asked of this recipe: its own `bits:` in the entry, else the config's, else the preset's.
    if (!c.bits.empty() && !(r.IsMap() && r["bits"])) c.recipes.back().bits = c.bits;
  }
  std::set<std::string> names;
  for (const auto& r : c.recipes)
    if (!names.insert(r.recipe.name).second) fail("{}: two recipes are named '{}'; give one a distinct name:", path, r.recipe.name);
  return c;
}
}  // namespace

VerdictMetric sweep_metric(const std::string& name) {
  if (name == "kl") return {"kl", "attention KL(full ‖ quantized)", false, "(layer, KV head) rows", 1};
  if (name == "output-error") return {"output-error", "attention-output relative error", false, "(layer, KV head) rows", 1};
  if (name == "dloss") fail("--metric dloss is oscar-eval's (loss of a model decoding from the cache); oscar-sweep ranks by kl or output-error");
  fail("--metric '{}' is unknown; use kl (attention distributions) or output-error (attention output)", name);
}

std::string widths_text(int key_bits, int value_bits) {
  return key_bits == value_bits ? std::to_string(key_bits) : fmt::format("K{}V{}", key_bits, value_bits);
}

std::string metric_text(double v, const char* spec, bool csv) {
  if (std::isnan(v)) return csv ? std::string() : std::string("undefined");
  return fmt::format(fmt::runtime(spec), v);
}

namespace {

struct Job {
  Recipe recipe;
  std::string preset;
  int bits;  // the width asked
  RecipeWidths widths;
};

// The metrics of a Fidelity, by name, for aggregation.
constexpr double Fidelity::*kMetrics[] = {&Fidelity::k_rel_mse,     &Fidelity::v_rel_mse,   &Fidelity::logit_rel_mse,
                                          &Fidelity::kl,            &Fidelity::out_rel_err, &Fidelity::top8_overlap};

// Mean and worst of each metric over the rows where it is defined (not NaN); NaN when defined in none.
// Returns the number of undefined values left out.
int aggregate(SweepSummary& s, const std::vector<const SweepRow*>& rows) {
  int undefined = 0;
  for (double Fidelity::*m : kMetrics) {
    const bool higher_better = m == &Fidelity::top8_overlap;
    double sum = 0, worst = NAN;
    long n = 0;
    for (const SweepRow* r : rows) {
      const double x = r->f.*m;
      if (std::isnan(x)) {
        ++undefined;
        continue;
      }
      sum += x;
      ++n;
      if (std::isnan(worst) || (higher_better ? x < worst : x > worst)) worst = x;
    }
    s.mean.*m = n > 0 ? sum / static_cast<double>(n) : NAN;
    s.worst.*m = worst;
  }
  return undefined;
}

}  // namespace

SweepResult run_sweep(const SweepConfig& cfg, bool progress) {
  SweepResult res;
  res.metric = sweep_metric(cfg.metric);
  // Open and validate every input, and resolve every recipe at every width for every dump, before any
  // computation: a width a recipe cannot take stops the run here, naming both.
  std::vector<std::unique_ptr<DumpReader>> readers;
  for (const auto& d : cfg.dumps) readers.push_back(std::make_unique<DumpReader>(d.path));
  std::vector<std::vector<Job>> plans(cfg.dumps.size());
  size_t planned = 0;
  for (size_t di = 0; di < cfg.dumps.size(); ++di) {
    const DumpInfo& I = readers[di]->info();
    for (const auto& rf : cfg.recipes) {
      const std::vector<RecipeWidths> ws = recipe_widths(rf, rf.bits);
      if (ws.empty())
        fail("{}: recipe '{}' is asked for no width; give it bits: (1..8, or 16 for fp16)", cfg.file, rf.recipe.name);
      for (const RecipeWidths& w : ws) {
        const int asked = rf.key_bits_fixed ? w.value : w.key;
        try {
          plans[di].push_back({resolve_recipe(rf, w, I.head_dim), rf.recipe.name, asked, w});
        } catch (const Error& e) {
          fail("{}: dump '{}': {}; drop this width from the config's bits: or give the recipe its own bits:", cfg.file,
               cfg.dumps[di].name, e.what());
        }
      }
    }
    std::set<std::string> labels;
    for (const Job& j : plans[di])
      if (!labels.insert(j.recipe.name).second)
        fail("{}: two runs would both be labelled '{}' on dump '{}'; give the recipes distinct names", cfg.file, j.recipe.name,
             cfg.dumps[di].name);
    planned += plans[di].size();
  }
  if (planned == 0) fail("{}: the sweep plans no run (no recipe at any width); check recipes: and bits:", cfg.file);
  long undefined_values = 0, rows_with_undefined = 0, rows_total = 0;
  std::string first_undefined;
  for (size_t di = 0; di < cfg.dumps.size(); ++di) {
    const SweepDump& sd = cfg.dumps[di];
    const DumpReader& reader = *readers[di];
    const DumpInfo& I = reader.info();
    const std::vector<Job>& jobs = plans[di];
    bool need_calib = false, need_per_head = false;
    for (const Job& j : jobs) {
      need_calib = need_calib || j.recipe.calibrated();
      need_per_head = need_per_head || j.recipe.calibrated_per_kv_head();
    }
    std::unique_ptr<CovarianceRotations> calib;
    if (need_calib) {
      if (sd.calibration.empty())
        fail("{}: dump '{}' needs 'calibration:' (a dump of the same model on other text) for its calibrated recipes "
             "(oscar-cov)", cfg.file, sd.name);
      // Same model and other data, by content (checkpoint sha256, token ids), not by file name.
      const DumpLayerSource cal(sd.calibration);
      check_calibration_source(cal, I, dump_origin(reader));
      calib = std::make_unique<CovarianceRotations>(fit_covariance_rotations(cal, progress, need_per_head));
    }
    std::vector<std::vector<SweepRow>> per_layer(I.n_layers);
    std::mutex io;
    Progress bar(fmt::format("sweep {} ({} recipes)", sd.name, jobs.size()), I.n_layers, progress);
    std::exception_ptr err;
#pragma omp parallel for schedule(dynamic, 1)
    for (int l = 0; l < I.n_layers; ++l) {
      {
        std::lock_guard<std::mutex> lock(io);
        if (err) continue;
      }
      try {
        // DumpReader serializes its HDF5 calls itself; decoding and checks run on this thread.
        const LayerDump ld = reader.read_layer(l, {"q", "k", "v"});
        const LayerAttention att = I.attention(l);  // the dump's scaling, window, soft-cap and sinks
        for (const Job& j : jobs) {
          try {
            const LayerRotations rot = layer_rotations(j.recipe, I.head_dim, l, calib.get());
            const SimulatedLayer sim = simulate_layer(j.recipe, ld.k, ld.v, rot);
            const auto f = layer_fidelity(ld.q, ld.k, ld.v, sim.k_hat, sim.v_hat, cfg.queries, att);
            for (int h = 0; h < I.n_kv_heads; ++h)
              per_layer[l].push_back({sd.name, j.recipe.name, j.bits, l, h, j.widths.key, j.widths.value, f[h]});
          } catch (const Error& e) {
            fail("{}: layer {}, recipe {}: {}", sd.path, l, j.recipe.name, e.what());
          }
        }
        std::lock_guard<std::mutex> lock(io);
        bar.advance();
      } catch (...) {
        std::lock_guard<std::mutex> lock(io);
        if (!err) err = std::current_exception();
      }
    }
    if (err) std::rethrow_exception(err);
    bar.done();
    const size_t first_row = res.rows.size();
    for (auto& v : per_layer) res.rows.insert(res.rows.end(), v.begin(), v.end());
    for (size_t i = first_row; i < res.rows.size(); ++i) {
      const SweepRow& x = res.rows[i];
      int u = 0;
      for (double Fidelity::*m : kMetrics) u += std::isnan(x.f.*m) ? 1 : 0;
      ++rows_total;
      if (u == 0) continue;
      undefined_values += u;
      ++rows_with_undefined;
      if (first_undefined.empty())
        first_undefined = fmt::format("first: dump {} layer {} KV head {} recipe {}", x.dump, x.layer, x.kv_head, x.recipe);
    }
    struct LowShare {
      std::string windows;
      std::vector<std::string> recipes;
      long needed;
    };
    std::vector<LowShare> low;
    for (const Job& j : jobs) {
      SweepSummary s;
      s.dump = sd.name;
      s.recipe = j.recipe.name;
      s.preset = j.preset;
      s.bits = j.bits;
      s.key_bits = j.widths.key;
      s.value_bits = j.widths.value;
      s.tokens = I.token_count;
      s.queries = static_cast<int>(std::min<long>(cfg.queries, I.token_count));
      s.bits_at_dump = effective_bits(j.recipe, I.token_count, I.head_dim, I.n_kv_heads).total();
      s.bits_32k = effective_bits(j.recipe, 32768, I.head_dim, I.n_kv_heads).total();
      s.bits_budget = effective_bits(j.recipe, cfg.budget.context, I.head_dim, I.n_kv_heads).total();
      s.quantizes = j.recipe.key.quantized() || j.recipe.value.quantized();
      if (s.quantizes) {
        for (int l = 0; l < I.n_layers; ++l)
          s.quantized_share += attended_quantized_share(j.recipe, I.token_count, s.queries, I.attention(l).sliding_window);
        s.quantized_share /= I.n_layers;
      }
      const EffectiveBits e128 = effective_bits(j.recipe, 131072, I.head_dim, I.n_kv_heads);
      s.bits_128k = e128.total();
      s.key_bits_128k = e128.key;
      s.value_bits_128k = e128.value;
      std::vector<const SweepRow*> mine;
      for (size_t i = first_row; i < res.rows.size(); ++i)
        if (res.rows[i].recipe == j.recipe.name) mine.push_back(&res.rows[i]);
      s.undefined = aggregate(s, mine);
      if (s.quantizes && s.quantized_share < kMinQuantizedShare) {  // grouped by windows, one warning per dump below
        const std::string w = windows_text(j.recipe);
        auto it = std::find_if(low.begin(), low.end(), [&](const LowShare& x) { return x.windows == w; });
        if (it == low.end())
          it = low.insert(low.end(), {w, {}, std::max<long>(tokens_for_quantized_share(j.recipe, kMinQuantizedShare, 1L << 24),
                                                            I.token_count + 1)});
        it->recipes.push_back(s.recipe);
      }
      res.summary.push_back(s);
    }
    if (!low.empty()) {
      std::string list;
      for (const LowShare& x : low)
        list += fmt::format("{}{} ({} in full precision: {} tokens or more)", list.empty() ? "" : "; ", fmt::join(x.recipes, ", "),
                            x.windows, x.needed);
      res.warnings.push_back(fmt::format("dump '{}' ({} tokens): these rows keep most of what the queries read in their full-precision "
                                         "windows, measure full precision rather than their quantizer, and are not ranked: {}",
                                         sd.name, I.token_count, list));
      fmt::print(stderr, "warning: {}\n", res.warnings.back());
    }
    // The verdict of this dump: paired over its (layer, KV head) rows.
    std::vector<VerdictCandidate> cands;
    std::vector<SweepSummary*> mine_s;
    for (SweepSummary& s : res.summary)
      if (s.dump == sd.name && s.quantizes) {
        VerdictCandidate c{s.recipe, s.bits_budget, s.quantized_share, {}};
        for (size_t i = first_row; i < res.rows.size(); ++i)
          if (res.rows[i].recipe == s.recipe) c.units.push_back(cfg.metric == "kl" ? res.rows[i].f.kl : res.rows[i].f.out_rel_err);
        cands.push_back(std::move(c));
        s.ranked = s.bits_budget <= cfg.budget.bits + 1e-9 && s.quantized_share >= kMinQuantizedShare;
      }
    res.verdicts.emplace_back(sd.name, pick_recipe(cands, cfg.budget, res.metric));
  }
  if (undefined_values > 0) {
    res.warnings.push_back(fmt::format(
        "{} metric values are undefined (0/0: a zero-norm reference, e.g. an all-zero layer) in {} of {} (layer, KV head) "
        "rows ({}); they are shown as undefined and left out of means and worst values",
        undefined_values, rows_with_undefined, rows_total, first_undefined));
    fmt::print(stderr, "warning: {}\n", res.warnings.back());
  }
  return res;
}

namespace {

const Verdict* verdict_of(const SweepResult& r, const std::string& dump) {
  for (const auto& [d, v] : r.verdicts)
    if (d == dump) return &v;
  return nullptr;
}

std::string share_cell(const SweepSummary& s) {
  if (!s.quantizes) return "-";
  return fmt::format("{}{:.0f}%", s.quantized_share < kMinQuantizedShare ? "⚠ " : "", 100 * s.quantized_share);
}

}  // namespace

std::string summary_markdown(const SweepConfig& cfg, const SweepResult& r) {
  std::string md;
  for (const auto& d : cfg.dumps) {
    int queries = cfg.queries;  // as evaluated: at most the dump's tokens
    for (const SweepSummary& s : r.summary)
      if (s.dump == d.name) queries = s.queries;
    md += fmt::format("\n**{}** (`{}`, {} queries; mean over layers and KV heads, worst in brackets)\n\n", d.name,
                      fs::path(d.path).filename().string(), queries);
    if (const Verdict* v = verdict_of(r, d.name)) md += verdict_text(*v, cfg.budget, r.metric) + "\n\n";
    md += fmt::format(
        "| recipe | bits | in low bits | eff. bits (dump / {} / 128K) | K rel. MSE | V rel. MSE | logit rel. MSE | attn KL | out rel. err | "
        "top-8 overlap |\n",
        context_text(cfg.budget.context));
    md += "|---|---|---|---|---|---|---|---|---|---|\n";
    bool any_low = false;
    for (const SweepSummary& s : r.summary) {
      if (s.dump != d.name) continue;
      any_low = any_low || (s.quantizes && s.quantized_share < kMinQuantizedShare);
      const auto m = [](double mean, double worst, const char* spec) {
        return fmt::format("{} ({})", metric_text(mean, spec, false), metric_text(worst, spec, false));
      };
      md += fmt::format("| {} | {} | {} | {:.2f} / {:.2f} / {:.2f} | {} | {} | {} | {} | {} | {} |\n", s.recipe,
                        widths_text(s.key_bits, s.value_bits), share_cell(s), s.bits_at_dump, s.bits_budget, s.bits_128k,
                        m(s.mean.k_rel_mse, s.worst.k_rel_mse, "{:.4f}"), m(s.mean.v_rel_mse, s.worst.v_rel_mse, "{:.4f}"),
                        m(s.mean.logit_rel_mse, s.worst.logit_rel_mse, "{:.4f}"), m(s.mean.kl, s.worst.kl, "{:.4f}"),
                        m(s.mean.out_rel_err, s.worst.out_rel_err, "{:.4f}"), m(s.mean.top8_overlap, s.worst.top8_overlap, "{:.3f}"));
    }
    md += fmt::format(
        "\n\"in low bits\": of the keys and values the queries read, the share stored in low bits (the rest is in the recipe's "
        "full-precision windows at this length){}. The verdict's interval: 95%, bootstrap over the (layer, KV head) rows, paired.\n",
        any_low ? fmt::format("; ⚠ under {:.0f}%: the row measures mostly full precision and is not ranked", 100 * kMinQuantizedShare)
                : std::string());
  }
  return md;
}

std::string summary_terminal(const SweepConfig& cfg, const SweepResult& r) {
  std::string t;
  for (const auto& d : cfg.dumps) {
    t += fmt::format("\n{} (mean over layers and KV heads; full tables in {}/summary.md)\n", d.name, cfg.output);
    t += fmt::format("  {:<28} {:>5} {:>11} {:>12} {:>8} {:>9} {:>7}\n", "recipe", "bits", "in low bits",
                     fmt::format("bits @{}", context_text(cfg.budget.context)), "attn KL", "out err", "top-8");
    for (const SweepSummary& s : r.summary) {
      if (s.dump != d.name) continue;
      t += fmt::format("  {:<28} {:>5} {:>11} {:>12.2f} {:>8} {:>9} {:>7}\n", s.recipe, widths_text(s.key_bits, s.value_bits),
                       share_cell(s), s.bits_budget, metric_text(s.mean.kl, "{:.4f}", false),
                       metric_text(s.mean.out_rel_err, "{:.4f}", false), metric_text(s.mean.top8_overlap, "{:.3f}", false));
    }
    if (const Verdict* v = verdict_of(r, d.name)) t += "  " + verdict_text(*v, cfg.budget, r.metric) + "\n";
  }
  return t;
}

std::string summary_json(const SweepConfig& cfg, const SweepResult& r) {
  using nlohmann::json;
  auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json j;
  j["tool"] = "oscar-sweep";
  j["version"] = version();
  j["date"] = utc_now();
  j["config"] = cfg.file;
  j["budget"] = {{"bits", cfg.budget.bits}, {"context", cfg.budget.context}};
  j["metric"] = cfg.metric;
  j["queries"] = cfg.queries;
  for (const auto& [dump, v] : r.verdicts)
    j["verdicts"].push_back({{"dump", dump},
                             {"found", v.found},
                             {"pick", v.found ? json(v.best) : json(nullptr)},
                             {"value", v.found ? num(v.best_value) : json(nullptr)},
                             {"runner_up", v.runner_up.empty() ? json(nullptr) : json(v.runner_up)},
                             {"margin_lo", v.runner_up.empty() ? json(nullptr) : num(v.margin_ci.lo)},
                             {"margin_hi", v.runner_up.empty() ? json(nullptr) : num(v.margin_ci.hi)},
                             {"significant", v.significant},
                             {"over_budget", v.over_budget},
                             {"mostly_full_precision", v.mostly_full_precision},
                             {"text", verdict_text(v, cfg.budget, r.metric)}});
  for (const SweepSummary& s : r.summary) {
    json row = {{"dump", s.dump},
                {"recipe", s.recipe},
                {"preset", s.preset},
                {"bits", widths_text(s.key_bits, s.value_bits)},
                {"tokens", s.tokens},
                {"quantized_share", s.quantizes ? num(s.quantized_share) : json(nullptr)},
                {"ranked", s.ranked},
                {"eff_bits", {{"dump", s.bits_at_dump}, {"budget_context", s.bits_budget}, {"32k", s.bits_32k}, {"128k", s.bits_128k}}}};
    for (const auto& [name, f] : {std::pair<const char*, const Fidelity*>{"mean", &s.mean}, {"worst", &s.worst}})
      row[name] = {{"k_rel_mse", num(f->k_rel_mse)}, {"v_rel_mse", num(f->v_rel_mse)}, {"logit_rel_mse", num(f->logit_rel_mse)},
                   {"kl", num(f->kl)},               {"out_rel_err", num(f->out_rel_err)}, {"top8_overlap", num(f->top8_overlap)}};
    j["rows"].push_back(row);
  }
  j["warnings"] = r.warnings;
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

void check_sweep_output(const SweepConfig& cfg) {
  check_output_folder(cfg.output);
  std::vector<fs::path> inputs{cfg.file};
  for (const SweepDump& d : cfg.dumps) inputs.insert(inputs.end(), {d.path, d.calibration});
  check_not_input(cfg.output, {"layers.csv", "summary.csv", "summary.md", "summary.json", "pareto.png"}, inputs);
  check_plotting("pareto.py");
}

void write_sweep_outputs(const SweepConfig& cfg, const SweepResult& r) {
  std::error_code ec;
  fs::create_directories(cfg.output, ec);
  if (ec) fail("{}: could not create the output folder (reason: {}); choose another --output", cfg.output, ec.message());
  OutputSet set;
  AtomicOutput& layers = set.add(fs::path(cfg.output) / "layers.csv");
  AtomicOutput& summary = set.add(fs::path(cfg.output) / "summary.csv");
  AtomicOutput& md = set.add(fs::path(cfg.output) / "summary.md");
  AtomicOutput& js = set.add(fs::path(cfg.output) / "summary.json");
  AtomicOutput& png = set.add(fs::path(cfg.output) / "pareto.png");
  {
    std::string f = "dump,recipe,bits,layer,kv_head,k_rel_mse,v_rel_mse,logit_rel_mse,kl,out_rel_err,top8_overlap\n";
    for (const SweepRow& x : r.rows)
      f += fmt::format("{},{},{},{},{},{},{},{},{},{},{}\n", x.dump, x.recipe, widths_text(x.key_bits, x.value_bits), x.layer,
                       x.kv_head, metric_text(x.f.k_rel_mse, "{:.6g}", true), metric_text(x.f.v_rel_mse, "{:.6g}", true),
                       metric_text(x.f.logit_rel_mse, "{:.6g}", true), metric_text(x.f.kl, "{:.6g}", true),
                       metric_text(x.f.out_rel_err, "{:.6g}", true), metric_text(x.f.top8_overlap, "{:.6g}", true));
    layers.write(f);
  }
  {
    std::string f =
        "dump,recipe,preset,bits,tokens,quantized_share,ranked,eff_bits_dump,eff_bits_32k,eff_bits_128k,eff_bits_budget,key_bits_128k,"
        "value_bits_128k,k_rel_mse,v_rel_mse,logit_rel_mse,kl,out_rel_err,top8_overlap,"
        "worst_k_rel_mse,worst_v_rel_mse,worst_logit_rel_mse,worst_kl,worst_out_rel_err,worst_top8_overlap\n";
    for (const SweepSummary& s : r.summary) {
      std::string metrics;
      for (const Fidelity* x : {&s.mean, &s.worst})
        for (double v : {x->k_rel_mse, x->v_rel_mse, x->logit_rel_mse, x->kl, x->out_rel_err, x->top8_overlap})
          metrics += "," + metric_text(v, "{:.6g}", true);
      f += fmt::format("{},{},{},{},{},{},{},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f}{}\n", s.dump, s.recipe, s.preset,
                       widths_text(s.key_bits, s.value_bits), s.tokens, s.quantizes ? fmt::format("{:.4f}", s.quantized_share) : "",
                       s.ranked ? 1 : 0, s.bits_at_dump, s.bits_32k, s.bits_128k, s.bits_budget, s.key_bits_128k, s.value_bits_128k,
                       metrics);
    }
    summary.write(f);
  }
  md.write("<!-- oscar-sweep " + cfg.file + " -->\n" + summary_markdown(cfg, r));
  js.write(summary_json(cfg, r));
  run_python(plots_script("pareto.py"), {summary.temp_path().string(), png.temp_path().string(), cfg.title},
             png.final_path().string());
  set.commit();
}

}  // namespace oscar
