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
  try {
    if (n["title"]) c.title = n["title"].as<std::string>();
    c.output = rel_to(path, n["output"].as<std::string>());
    if (n["queries"]) c.queries = n["queries"].as<int>();
    if (c.queries <= 0) fail("{}: queries must be positive", line_of(n["queries"], path));
    if (n["bits"])
      for (const auto& b : n["bits"]) {
        const int x = b.as<int>();
        if (!((x >= 1 && x <= 8) || x == 16)) fail("{}: bits {} out of range; use 1..8", line_of(b, path), x);
        c.bits.push_back(x);
      }
  } catch (const YAML::Exception& e) {
    fail("{}:{}: bad value ({})", path, e.mark.line + 1, e.msg);
  }
  if (!n["dumps"].IsSequence() || n["dumps"].size() == 0) fail("{}: 'dumps:' must list at least one dump", line_of(n["dumps"], path));
  for (const auto& d : n["dumps"]) {
    check_keys(d, path, "a dump entry", {"name", "path", "calibration"});
    if (!d["path"]) fail("{}: a dump entry needs 'path:'", line_of(d, path));
    SweepDump sd;
    sd.path = rel_to(path, d["path"].as<std::string>());
    sd.name = d["name"] ? d["name"].as<std::string>() : fs::path(sd.path).stem().string();
    if (d["calibration"]) sd.calibration = rel_to(path, d["calibration"].as<std::string>());
    c.dumps.push_back(sd);
  }
  if (!n["recipes"].IsSequence() || n["recipes"].size() == 0) fail("{}: 'recipes:' must list at least one recipe", line_of(n["recipes"], path));
  for (const auto& r : n["recipes"]) {
    if (r.IsScalar()) {
      c.recipes.push_back(load_preset(r.as<std::string>()));
    } else {
      RecipeFile base;
      if (r["preset"]) base = load_preset(r["preset"].as<std::string>());
      c.recipes.push_back(parse_recipe(r, path, base));
    }
  }
  std::set<std::string> names;
  for (const auto& r : c.recipes)
    if (!names.insert(r.recipe.name).second) fail("{}: two recipes are named '{}'; give one a distinct name:", path, r.recipe.name);
  return c;
}

namespace {

struct Job {
  Recipe recipe;
  std::string preset;
  int bits;
};

void aggregate(SweepSummary& s, const std::vector<const SweepRow*>& rows) {
  Fidelity& m = s.mean;
  Fidelity& w = s.worst;
  w.top8_overlap = 1.0;
  for (const SweepRow* r : rows) {
    m.k_rel_mse += r->f.k_rel_mse, m.v_rel_mse += r->f.v_rel_mse, m.logit_rel_mse += r->f.logit_rel_mse;
    m.kl += r->f.kl, m.out_rel_err += r->f.out_rel_err, m.top8_overlap += r->f.top8_overlap;
    w.k_rel_mse = std::max(w.k_rel_mse, r->f.k_rel_mse), w.v_rel_mse = std::max(w.v_rel_mse, r->f.v_rel_mse);
    w.logit_rel_mse = std::max(w.logit_rel_mse, r->f.logit_rel_mse), w.kl = std::max(w.kl, r->f.kl);
    w.out_rel_err = std::max(w.out_rel_err, r->f.out_rel_err), w.top8_overlap = std::min(w.top8_overlap, r->f.top8_overlap);
  }
  const double n = static_cast<double>(rows.size());
  m.k_rel_mse /= n, m.v_rel_mse /= n, m.logit_rel_mse /= n, m.kl /= n, m.out_rel_err /= n, m.top8_overlap /= n;
}

}  // namespace

SweepResult run_sweep(const SweepConfig& cfg, bool progress) {
  SweepResult res;
  // Open and validate every input before any computation.
  std::vector<std::unique_ptr<DumpReader>> readers;
  for (const auto& d : cfg.dumps) readers.push_back(std::make_unique<DumpReader>(d.path));
  for (size_t di = 0; di < cfg.dumps.size(); ++di) {
    const SweepDump& sd = cfg.dumps[di];
    const DumpReader& reader = *readers[di];
    const DumpInfo& I = reader.info();
    std::vector<Job> jobs;
    bool need_calib = false;
    for (const auto& rf : cfg.recipes) {
      std::vector<int> widths = rf.bits;
      if (!cfg.bits.empty() && !(widths.size() == 1 && widths[0] == 16)) {
        std::vector<int> keep;
        for (int b : cfg.bits)
          if (std::find(widths.begin(), widths.end(), b) != widths.end()) keep.push_back(b);
        widths = keep;
      }
      for (int b : widths) {
        Recipe r = resolve_recipe(rf.recipe, b, I.head_dim);
        need_calib = need_calib || r.calibrated();
        jobs.push_back({r, rf.recipe.name, b});
      }
    }
    std::unique_ptr<CovarianceRotations> calib;
    if (need_calib) {
      if (sd.calibration.empty())
        fail("{}: dump '{}' needs 'calibration:' (a dump of the same model on other text) for its calibrated recipes "
             "(oscar-cov)", cfg.file, sd.name);
      if (fs::absolute(sd.calibration).lexically_normal() == fs::absolute(sd.path).lexically_normal())
        fail("{}: dump '{}' is its own calibration; calibrate on another passage (e.g. Genesis)", cfg.file, sd.name);
      const DumpReader cal(sd.calibration);
      if (cal.info().model_name != I.model_name || cal.info().checkpoint_sha256 != I.checkpoint_sha256 ||
          cal.info().head_dim != I.head_dim || cal.info().n_layers != I.n_layers || cal.info().n_heads != I.n_heads ||
          cal.info().n_kv_heads != I.n_kv_heads)
        fail("calibration dump {} comes from model {} ({} layers, head_dim {}, sha256 {}) but {} from {} ({} layers, head_dim "
             "{}, sha256 {}); calibrate on a dump of the same model",
             sd.calibration, cal.info().model_name, cal.info().n_layers, cal.info().head_dim, cal.info().checkpoint_sha256.substr(0, 12),
             sd.path, I.model_name, I.n_layers, I.head_dim, I.checkpoint_sha256.substr(0, 12));
      calib = std::make_unique<CovarianceRotations>(fit_covariance_rotations(cal, progress));
      check_calibration_matches(*calib, I, sd.path);
    }
    std::vector<std::vector<SweepRow>> per_layer(I.n_layers);
    std::mutex io;
    Progress bar(fmt::format("sweep {} ({} recipes)", sd.name, jobs.size()), I.n_layers, progress);
    std::exception_ptr err;
#pragma omp parallel for schedule(dynamic, 1)
    for (int l = 0; l < I.n_layers; ++l) {
      try {
        LayerDump ld;
        {
          std::lock_guard<std::mutex> lock(io);  // HDF5 is not thread-safe
          if (err) continue;
          ld = reader.read_layer(l, {"q", "k", "v"});
        }
        for (const Job& j : jobs) {
          const LayerRotations rot = layer_rotations(j.recipe, I.head_dim, l, calib.get());
          const SimulatedLayer sim = simulate_layer(j.recipe, ld.k, ld.v, rot);
          const auto f = layer_fidelity(ld.q, ld.k, ld.v, sim.k_hat, sim.v_hat, cfg.queries);
          for (int h = 0; h < I.n_kv_heads; ++h) per_layer[l].push_back({sd.name, j.recipe.name, j.bits, l, h, f[h]});
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
    for (const Job& j : jobs) {
      SweepSummary s;
      s.dump = sd.name;
      s.recipe = j.recipe.name;
      s.preset = j.preset;
      s.bits = j.bits;
      s.tokens = I.token_count;
      s.bits_at_dump = effective_bits(j.recipe, I.token_count, I.head_dim, I.n_kv_heads).total();
      s.bits_32k = effective_bits(j.recipe, 32768, I.head_dim, I.n_kv_heads).total();
      const EffectiveBits e128 = effective_bits(j.recipe, 131072, I.head_dim, I.n_kv_heads);
      s.bits_128k = e128.total();
      s.key_bits_128k = e128.key;
      s.value_bits_128k = e128.value;
      std::vector<const SweepRow*> mine;
      for (size_t i = first_row; i < res.rows.size(); ++i)
        if (res.rows[i].recipe == j.recipe.name) mine.push_back(&res.rows[i]);
      aggregate(s, mine);
      res.summary.push_back(s);
    }
  }
  return res;
}

std::string summary_markdown(const SweepConfig& cfg, const SweepResult& r) {
  std::string md;
  for (const auto& d : cfg.dumps) {
    md += fmt::format("\n**{}** (`{}`, {} queries; mean over layers and KV heads, worst in brackets)\n\n", d.name,
                      fs::path(d.path).filename().string(), cfg.queries);
    md += "| recipe | bits | eff. bits (dump / 32K / 128K) | K rel. MSE | V rel. MSE | logit rel. MSE | attn KL | out rel. err | top-8 overlap |\n";
    md += "|---|---|---|---|---|---|---|---|---|\n";
    for (const SweepSummary& s : r.summary) {
      if (s.dump != d.name) continue;
      md += fmt::format("| {} | {} | {:.2f} / {:.2f} / {:.2f} | {:.4f} ({:.4f}) | {:.4f} ({:.4f}) | {:.4f} ({:.4f}) | {:.4f} ({:.4f}) | {:.4f} ({:.4f}) | {:.3f} ({:.3f}) |\n",
                        s.recipe, s.bits, s.bits_at_dump, s.bits_32k, s.bits_128k, s.mean.k_rel_mse, s.worst.k_rel_mse,
                        s.mean.v_rel_mse, s.worst.v_rel_mse, s.mean.logit_rel_mse, s.worst.logit_rel_mse, s.mean.kl,
                        s.worst.kl, s.mean.out_rel_err, s.worst.out_rel_err, s.mean.top8_overlap, s.worst.top8_overlap);
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
      f += fmt::format("{},{},{},{},{},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g}\n", x.dump, x.recipe, x.bits, x.layer, x.kv_head,
                       x.f.k_rel_mse, x.f.v_rel_mse, x.f.logit_rel_mse, x.f.kl, x.f.out_rel_err, x.f.top8_overlap);
    layers.write(f);
  }
  {
    std::string f =
        "dump,recipe,preset,bits,tokens,eff_bits_dump,eff_bits_32k,eff_bits_128k,key_bits_128k,value_bits_128k,"
        "k_rel_mse,v_rel_mse,logit_rel_mse,kl,out_rel_err,top8_overlap,"
        "worst_k_rel_mse,worst_v_rel_mse,worst_logit_rel_mse,worst_kl,worst_out_rel_err,worst_top8_overlap\n";
    for (const SweepSummary& s : r.summary)
      f += fmt::format("{},{},{},{},{},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g}\n",
                       s.dump, s.recipe, s.preset, s.bits, s.tokens, s.bits_at_dump, s.bits_32k, s.bits_128k, s.key_bits_128k,
                       s.value_bits_128k, s.mean.k_rel_mse, s.mean.v_rel_mse, s.mean.logit_rel_mse, s.mean.kl, s.mean.out_rel_err,
                       s.mean.top8_overlap, s.worst.k_rel_mse, s.worst.v_rel_mse, s.worst.logit_rel_mse, s.worst.kl,
                       s.worst.out_rel_err, s.worst.top8_overlap);
    summary.write(f);
  }
  md.write("<!-- oscar-sweep " + cfg.file + " -->\n" + summary_markdown(cfg, r));
  run_python(plots_script("pareto.py"), {summary.temp_path().string(), png.temp_path().string(), cfg.title},
             png.final_path().string());
  set.commit();
}

}  // namespace oscar
