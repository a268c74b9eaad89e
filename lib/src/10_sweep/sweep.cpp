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

#include "oscar/06_quantize/cache_sim.h"
#include "oscar/03_dump/dump.h"
#include "oscar/03_dump/layer_source.h"
#include "oscar/01_core/error.h"
#include "oscar/01_core/file_io.h"
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

SweepConfig load_sweep_config(const std::string& path) {
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
      c.recipes.push_back(load_preset(r.as<std::string>()));
    } else {
      RecipeFile base;
      if (r.IsMap() && r["preset"]) base = load_preset(r["preset"].as<std::string>());
      c.recipes.push_back(parse_recipe(r, path, base));
    }
    // The widths asked of this recipe: its own `bits:` in the entry, else the config's, else the preset's.
    if (!c.bits.empty() && !(r.IsMap() && r["bits"])) c.recipes.back().bits = c.bits;
  }
  std::set<std::string> names;
  for (const auto& r : c.recipes)
    if (!names.insert(r.recipe.name).second) fail("{}: two recipes are named '{}'; give one a distinct name:", path, r.recipe.name);
  return c;
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
      const EffectiveBits e128 = effective_bits(j.recipe, 131072, I.head_dim, I.n_kv_heads);
      s.bits_128k = e128.total();
      s.key_bits_128k = e128.key;
      s.value_bits_128k = e128.value;
      std::vector<const SweepRow*> mine;
      for (size_t i = first_row; i < res.rows.size(); ++i)
        if (res.rows[i].recipe == j.recipe.name) mine.push_back(&res.rows[i]);
      s.undefined = aggregate(s, mine);
      res.summary.push_back(s);
    }
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

std::string summary_markdown(const SweepConfig& cfg, const SweepResult& r) {
  std::string md;
  for (const auto& d : cfg.dumps) {
    int queries = cfg.queries;  // as evaluated: at most the dump's tokens
    for (const SweepSummary& s : r.summary)
      if (s.dump == d.name) queries = s.queries;
    md += fmt::format("\n**{}** (`{}`, {} queries; mean over layers and KV heads, worst in brackets)\n\n", d.name,
                      fs::path(d.path).filename().string(), queries);
    md += "| recipe | bits | eff. bits (dump / 32K / 128K) | K rel. MSE | V rel. MSE | logit rel. MSE | attn KL | out rel. err | top-8 overlap |\n";
    md += "|---|---|---|---|---|---|---|---|---|\n";
    for (const SweepSummary& s : r.summary) {
      if (s.dump != d.name) continue;
      const auto m = [](double mean, double worst, const char* spec) {
        return fmt::format("{} ({})", metric_text(mean, spec, false), metric_text(worst, spec, false));
      };
      md += fmt::format("| {} | {} | {:.2f} / {:.2f} / {:.2f} | {} | {} | {} | {} | {} | {} |\n", s.recipe,
                        widths_text(s.key_bits, s.value_bits), s.bits_at_dump, s.bits_32k, s.bits_128k,
                        m(s.mean.k_rel_mse, s.worst.k_rel_mse, "{:.4f}"), m(s.mean.v_rel_mse, s.worst.v_rel_mse, "{:.4f}"),
                        m(s.mean.logit_rel_mse, s.worst.logit_rel_mse, "{:.4f}"), m(s.mean.kl, s.worst.kl, "{:.4f}"),
                        m(s.mean.out_rel_err, s.worst.out_rel_err, "{:.4f}"), m(s.mean.top8_overlap, s.worst.top8_overlap, "{:.3f}"));
    }
  }
  return md;
}

void check_sweep_output(const SweepConfig& cfg) {
  check_output_folder(cfg.output);
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
        "dump,recipe,preset,bits,tokens,eff_bits_dump,eff_bits_32k,eff_bits_128k,key_bits_128k,value_bits_128k,"
        "k_rel_mse,v_rel_mse,logit_rel_mse,kl,out_rel_err,top8_overlap,"
        "worst_k_rel_mse,worst_v_rel_mse,worst_logit_rel_mse,worst_kl,worst_out_rel_err,worst_top8_overlap\n";
    for (const SweepSummary& s : r.summary) {
      std::string metrics;
      for (const Fidelity* x : {&s.mean, &s.worst})
        for (double v : {x->k_rel_mse, x->v_rel_mse, x->logit_rel_mse, x->kl, x->out_rel_err, x->top8_overlap})
          metrics += "," + metric_text(v, "{:.6g}", true);
      f += fmt::format("{},{},{},{},{},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f}{}\n", s.dump, s.recipe, s.preset,
                       widths_text(s.key_bits, s.value_bits), s.tokens, s.bits_at_dump, s.bits_32k, s.bits_128k, s.key_bits_128k,
                       s.value_bits_128k, metrics);
    }
    summary.write(f);
  }
  md.write("<!-- oscar-sweep " + cfg.file + " -->\n" + summary_markdown(cfg, r));
  run_python(plots_script("pareto.py"), {summary.temp_path().string(), png.temp_path().string(), cfg.title},
             png.final_path().string());
  set.commit();
}

}  // namespace oscar
