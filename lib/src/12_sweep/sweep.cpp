// sweep.cpp: run_sweep (sweep.h): every dump's jobs planned (jobs.h) and checked before any work, then per dump the
// calibration fit, the layer-parallel simulation and fidelity of every job, the aggregation, and the verdict.
#include "oscar/12_sweep/sweep.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include <fmt/ranges.h>

#include "oscar/01_core/error.h"
#include "oscar/01_core/progress.h"
#include "oscar/03_dump/dump.h"
#include "oscar/03_dump/layer_source.h"
#include "oscar/06_rotate/rotation.h"
#include "oscar/07_quantize/cache_policy.h"
#include "oscar/07_quantize/cache_sim.h"
#include "oscar/10_plan/jobs.h"

namespace oscar {

namespace {

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

// One dump of the sweep: its reader and its jobs.
struct DumpPlan {
  std::unique_ptr<DumpReader> reader;
  std::vector<Job> jobs;
};

// Opens and validates every dump, and resolves every recipe at every width for each, before any computation: a width a
// recipe cannot take stops the run here, naming both.
std::vector<DumpPlan> plan_sweep(const SweepConfig& cfg) {
  std::vector<DumpPlan> plans;
  for (const SweepDump& d : cfg.dumps) plans.push_back({std::make_unique<DumpReader>(d.path), {}});
  for (size_t di = 0; di < cfg.dumps.size(); ++di) {
    try {
      plans[di].jobs = plan_jobs(cfg.recipes, {}, plans[di].reader->info().head_dim,
                                 "drop this width from the config's bits: or give the recipe its own bits:");
    } catch (const Error& e) {
      fail("{}: dump '{}': {}", cfg.file, cfg.dumps[di].name, e.what());
    }
  }
  return plans;
}

// The covariance rotations of the dump's calibrated jobs (null when none is calibrated), from its calibration dump.
std::unique_ptr<CovarianceRotations> fit_dump_calibration(const SweepConfig& cfg, const SweepDump& sd, const DumpPlan& p, bool progress) {
  bool need = false, per_head = false;
  for (const Job& j : p.jobs) {
    need = need || j.recipe.calibrated();
    per_head = per_head || j.recipe.calibrated_per_kv_head();
  }
  if (!need) return nullptr;
  if (sd.calibration.empty())
    fail("{}: dump '{}' needs 'calibration:' (a dump of the same model on other text) for its calibrated recipes (oscar-cov)", cfg.file,
         sd.name);
  // Same model and other data, by content (checkpoint sha256, token ids), not by file name.
  const DumpLayerSource cal(sd.calibration);
  check_calibration_source(cal, p.reader->info(), dump_origin(*p.reader));
  return std::make_unique<CovarianceRotations>(fit_covariance_rotations(cal, progress, per_head));
}

// The rows of one layer: every job simulated on the layer's K and V, its fidelity per KV head.
std::vector<SweepRow> layer_rows(const SweepConfig& cfg, const SweepDump& sd, const DumpPlan& p, int l, const CovarianceRotations* calib) {
  const DumpInfo& I = p.reader->info();
  const LayerDump ld = p.reader->read_layer(l, {"q", "k", "v"});  // DumpReader serializes its HDF5 calls itself
  const LayerAttention att = I.attention(l);                     // the dump's scaling, window, soft-cap and sinks
  std::vector<SweepRow> rows;
  for (const Job& j : p.jobs) {
    try {
      const LayerRotations rot = layer_rotations(j.recipe, I.head_dim, l, calib);
      const SimulatedLayer sim = simulate_layer(j.recipe, ld.k, ld.v, rot);
      const auto f = layer_fidelity(ld.q, ld.k, ld.v, sim.k_hat, sim.v_hat, cfg.queries, att);
      for (int h = 0; h < I.n_kv_heads; ++h) rows.push_back({sd.name, j.recipe.name, j.bits, l, h, j.widths.key, j.widths.value, f[h]});
    } catch (const Error& e) {
      fail("{}: layer {}, recipe {}: {}", sd.path, l, j.recipe.name, e.what());
    }
  }
  return rows;
}

// Every layer of the dump, in parallel over layers; the rows in layer order. The first failure stops the rest.
std::vector<SweepRow> dump_rows(const SweepConfig& cfg, const SweepDump& sd, const DumpPlan& p, const CovarianceRotations* calib,
                                bool progress) {
  const int L = p.reader->info().n_layers;
  std::vector<std::vector<SweepRow>> per_layer(L);
  std::mutex io;
  Progress bar(fmt::format("sweep {} ({} recipes)", sd.name, p.jobs.size()), L, progress);
  std::exception_ptr err;
#pragma omp parallel for schedule(dynamic, 1)
  for (int l = 0; l < L; ++l) {
    {
      std::lock_guard<std::mutex> lock(io);
      if (err) continue;
    }
    try {
      per_layer[l] = layer_rows(cfg, sd, p, l, calib);
      std::lock_guard<std::mutex> lock(io);
      bar.advance();
    } catch (...) {
      std::lock_guard<std::mutex> lock(io);
      if (!err) err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
  bar.done();
  std::vector<SweepRow> rows;
  for (auto& v : per_layer) rows.insert(rows.end(), std::make_move_iterator(v.begin()), std::make_move_iterator(v.end()));
  return rows;
}

// One job's summary over its rows of the dump.
SweepSummary summarize(const SweepConfig& cfg, const SweepDump& sd, const DumpInfo& I, const Job& j, const std::vector<SweepRow>& rows) {
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
  const EffectiveBits e128 = effective_bits(j.recipe, 131072, I.head_dim, I.n_kv_heads);
  s.bits_128k = e128.total();
  s.key_bits_128k = e128.key;
  s.value_bits_128k = e128.value;
  s.quantizes = j.quantizes();
  if (s.quantizes) {
    for (int l = 0; l < I.n_layers; ++l)
      s.quantized_share += attended_quantized_share(j.recipe, I.token_count, s.queries, I.attention(l).sliding_window);
    s.quantized_share /= I.n_layers;
  }
  std::vector<const SweepRow*> mine;
  for (const SweepRow& r : rows)
    if (r.recipe == j.recipe.name) mine.push_back(&r);
  s.undefined = aggregate(s, mine);
  s.ranked = rankable(s.quantizes, s.bits_budget, s.quantized_share, cfg.budget);
  return s;
}

// Undefined metric values (0/0) over every row of the sweep, for one warning.
struct UndefinedCount {
  long values = 0, rows = 0, total = 0;
  std::string first;
  void add(const std::vector<SweepRow>& rows_of_dump) {
    for (const SweepRow& x : rows_of_dump) {
      int u = 0;
      for (double Fidelity::*m : kMetrics) u += std::isnan(x.f.*m) ? 1 : 0;
      ++total;
      if (u == 0) continue;
      values += u;
      ++rows;
      if (first.empty()) first = fmt::format("first: dump {} layer {} KV head {} recipe {}", x.dump, x.layer, x.kv_head, x.recipe);
    }
  }
};

void warn(SweepResult& res, std::string w) {
  fmt::print(stderr, "warning: {}\n", w);
  res.warnings.push_back(std::move(w));
}

// The dump's summaries, its low-share warning and its verdict (paired over its (layer, KV head) rows).
void summarize_dump(const SweepConfig& cfg, const SweepDump& sd, const DumpPlan& p, const std::vector<SweepRow>& rows, SweepResult& res) {
  const DumpInfo& I = p.reader->info();
  LowShareRows low;
  std::vector<VerdictCandidate> cands;
  for (const Job& j : p.jobs) {
    const SweepSummary s = summarize(cfg, sd, I, j, rows);
    if (s.quantizes && s.quantized_share < kMinQuantizedShare)  // grouped by windows, one warning per dump below
      low.add(j.recipe, s.recipe, [&] {
        return fmt::format("{}", std::max<long>(tokens_for_quantized_share(j.recipe, kMinQuantizedShare, 1L << 24), I.token_count + 1));
      });
    if (s.quantizes) {
      VerdictCandidate c{s.recipe, s.bits_budget, s.quantized_share, {}};
      for (const SweepRow& r : rows)
        if (r.recipe == s.recipe) c.units.push_back(cfg.metric == "kl" ? r.f.kl : r.f.out_rel_err);
      cands.push_back(std::move(c));
    }
    res.summary.push_back(s);
  }
  if (!low.empty()) {
    std::string list;
    for (const LowShareRows::Group& g : low.groups())
      list += fmt::format("{}{} ({} in full precision: {} tokens or more)", list.empty() ? "" : "; ", fmt::join(g.rows, ", "), g.windows,
                          g.needed);
    warn(res, fmt::format("dump '{}' ({} tokens): these rows keep most of what the queries read in their full-precision windows, measure "
                          "full precision rather than their quantizer, and are not ranked: {}",
                          sd.name, I.token_count, list));
  }
  res.verdicts.emplace_back(sd.name, pick_recipe(cands, cfg.budget, res.metric));
}

}  // namespace

SweepResult run_sweep(const SweepConfig& cfg, bool progress) {
  SweepResult res;
  res.metric = sweep_metric(cfg.metric);
  const std::vector<DumpPlan> plans = plan_sweep(cfg);
  UndefinedCount undefined;
  for (size_t di = 0; di < cfg.dumps.size(); ++di) {
    const SweepDump& sd = cfg.dumps[di];
    const std::unique_ptr<CovarianceRotations> calib = fit_dump_calibration(cfg, sd, plans[di], progress);
    std::vector<SweepRow> rows = dump_rows(cfg, sd, plans[di], calib.get(), progress);
    undefined.add(rows);
    summarize_dump(cfg, sd, plans[di], rows, res);
    res.rows.insert(res.rows.end(), std::make_move_iterator(rows.begin()), std::make_move_iterator(rows.end()));
  }
  if (undefined.values > 0)
    warn(res, fmt::format("{} metric values are undefined (0/0: a zero-norm reference, e.g. an all-zero layer) in {} of {} (layer, KV head) "
                          "rows ({}); they are shown as undefined and left out of means and worst values",
                          undefined.values, undefined.rows, undefined.total, undefined.first));
  return res;
}

}  // namespace oscar
