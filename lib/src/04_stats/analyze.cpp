// analyze.cpp: streaming TNI analysis of a dump and its renderings.
#include "oscar/04_stats/analyze.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "oscar/01_core/error.h"
#include "oscar/01_core/output_files.h"
#include "oscar/01_core/file_io.h"
#include "oscar/01_core/printable.h"
#include "oscar/01_core/stats.h"
#include "oscar/01_core/interrupts.h"
#include "oscar/11_report/plotting.h"
#include "oscar/01_core/progress.h"

namespace oscar {

std::string TniReport::token_label(int position) const {
  if (position >= 0 && position < static_cast<int>(token_text.size())) return token_text[position];
  if (position >= 0 && position < static_cast<int>(token_ids.size())) return fmt::format("#{}", token_ids[position]);
  return "?";
}

TniReport analyze_dump(const DumpReader& dump, const AnalyzeOptions& opt) {
  TniReport r;
  r.dump_path = dump.path();
  r.info = dump.info();
  r.token_ids = dump.token_ids();
  r.token_text = dump.token_text();
  r.outlier_z = opt.outlier_z;
  const DumpInfo& I = r.info;
  // A dump without pre-RoPE tensors (has_pre_rope = 0) has no Kpre rows.
  const std::vector<std::string> tensors =
      I.has_pre_rope ? std::vector<std::string>{"k_pre", "k", "v"} : std::vector<std::string>{"k", "v"};
  Progress bar("analyze", I.n_layers, opt.progress);
  for (int l = 0; l < I.n_layers; ++l) {
    std::vector<std::string> wanted{"q"};
    wanted.insert(wanted.end(), tensors.begin(), tensors.end());
    const LayerDump d = dump.read_layer(l, wanted);
    r.sinks.push_back(layer_sinks(l, d.q, d.k, d.v, I.attention(l)));  // the layer's own scaling, window, soft-cap, sinks
    for (int h = 0; h < I.n_kv_heads; ++h) {
      for (const std::string& t : tensors) {
        const HeadTensor& x = t == "k_pre" ? d.k_pre : t == "k" ? d.k : d.v;
        r.rows.push_back({l, h, t, head_stats(x.head(h), x.tokens, x.head_dim, opt.outlier_z)});
      }
    }
    bar.advance();
  }
  bar.done();
  const int undefined = r.undefined_tni();
  if (undefined > 0)
    fmt::print(stderr,
               "warning: {}: TNI is undefined (0/0: every token's norm is zero) for {} of {} (layer, KV head, tensor) rows; "
               "shown as undefined and left out of the per-layer summary\n",
               r.dump_path, undefined, r.rows.size());
  return r;
}

int TniReport::undefined_tni() const {
  int n = 0;
  for (const TniRow& row : rows) n += std::isnan(row.stats.norms.tni) ? 1 : 0;
  return n;
}

namespace {
// A number for the terminal table: "undefined" for NaN, padded to `width`.
std::string num(double v, int width, int prec) {
  if (std::isnan(v)) return fmt::format("{:>{}}", "undefined", width);
  return fmt::format("{:>{}.{}f}", v, width, prec);
}

// A number for CSV: empty for NaN (undefined).
std::string csv(double v) { return std::isnan(v) ? std::string() : fmt::format("{:.6g}", v); }
}  // namespace

namespace {

// Worst (largest) defined value over the layer's rows of one tensor.
struct LayerWorst {
  double k_tni = NAN, k_chan = NAN, v_tni = NAN, v_chan = NAN;
};
std::vector<LayerWorst> layer_worst(const TniReport& r) {
  std::vector<LayerWorst> w(static_cast<size_t>(r.info.n_layers));
  const auto worse = [](double acc, double x) { return std::isnan(x) ? acc : std::isnan(acc) ? x : std::max(acc, x); };
  for (const TniRow& row : r.rows) {
    LayerWorst& x = w[static_cast<size_t>(row.layer)];
    if (row.tensor == "k") x.k_tni = worse(x.k_tni, row.stats.norms.tni), x.k_chan = worse(x.k_chan, row.stats.channels.spread);
    if (row.tensor == "v") x.v_tni = worse(x.v_tni, row.stats.norms.tni), x.v_chan = worse(x.v_chan, row.stats.channels.spread);
  }
  return w;
}

// "12-29" / "3, 5, 12-14": layer numbers as ranges.
std::string ranges(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    s += (s.empty() ? "" : ", ") + (j > i ? fmt::format("{}-{}", v[i], v[j]) : std::to_string(v[i]));
    i = j + 1;
  }
  return s;
}

}  // namespace

std::vector<std::string> tni_reading(const TniReport& r) {
  std::vector<std::string> out;
  const std::vector<LayerWorst> w = layer_worst(r);
  std::vector<double> kt, vt, kc, vc;
  for (const LayerWorst& x : w) {
    if (!std::isnan(x.k_tni)) kt.push_back(x.k_tni);
    if (!std::isnan(x.v_tni)) vt.push_back(x.v_tni);
    if (!std::isnan(x.k_chan)) kc.push_back(x.k_chan);
    if (!std::isnan(x.v_chan)) vc.push_back(x.v_chan);
  }
  const auto mx = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
  if (!kt.empty()) {
    int severe = 0, imbalanced = 0;
    for (double t : kt) severe += t > kTniSevere ? 1 : 0, imbalanced += t > kTniBalanced && t <= kTniSevere ? 1 : 0;
    const double worst = mx(kt);
    out.push_back(fmt::format(
        "Keys: token norms differ up to {:.1f}x within a head (TNI, median over layers {:.1f}); {} of {} layers severe (over {:g}), "
        "{} imbalanced ({:g}-{:g}), {} balanced. {}",
        worst, median(kt), severe, kt.size(), kTniSevere, imbalanced, kTniBalanced, kTniSevere, kt.size() - severe - imbalanced,
        worst > kTniBalanced
            ? fmt::format("Per-channel key groups (kivi) share one scale over tokens up to {:.1f}x apart, so the quietest lose "
                          "precision: scale each token first (oscar-omni's Omni-Token Scaling) or group keys per token (oscar-cov, "
                          "quarot).",
                          worst)
            : std::string("Per-channel key groups lose little to token norms here.")));
  }
  if (!vt.empty())
    out.push_back(fmt::format("Values: TNI up to {:.1f} (median {:.1f}); every preset quantizes values per token, which token norms "
                              "do not hurt.",
                              mx(vt), median(vt)));
  if (!kc.empty() && !vc.empty())
    out.push_back(fmt::format("Channel outliers: one key channel reaches {:.1f}x the median channel's magnitude (values {:.1f}x): {}",
                              mx(kc), mx(vc),
                              mx(kc) > 3 ? "a rotation (Hadamard, covariance) spreads it before per-token groups."
                                         : "mild; rotations matter less here."));
  std::vector<int> sink_layers;
  double top = -1, kmin = INFINITY, kmax = -INFINITY;
  int top_layer = -1;
  for (const LayerSinks& l : r.sinks) {
    if (!(l.attention_mean >= kSinkAttention)) continue;
    sink_layers.push_back(l.layer);
    if (l.attention_mean > top) top = l.attention_mean, top_layer = l.layer;
    if (std::isfinite(l.key_ratio_min)) kmin = std::min(kmin, l.key_ratio_min), kmax = std::max(kmax, l.key_ratio_mean);
  }
  std::vector<int> outside;  // local layers whose window no longer holds position 0
  long window = 0;
  for (const LayerSinks& l : r.sinks)
    if (l.out_of_window()) outside.push_back(l.layer), window = l.window;
  if (!outside.empty())
    out.push_back(fmt::format("Sliding windows: layers {} ({} of {}) attend to their last {} tokens only, so position 0 is out of "
                              "their window for the queries measured; they hold {} tokens at any length, the other layers the "
                              "whole context.",
                              ranges(outside), outside.size(), r.sinks.size(), window, window));
  if (sink_layers.empty()) {
    out.push_back(fmt::format("Attention sinks: no layer puts {:g} or more of its attention on position 0.", kSinkAttention));
  } else {
    out.push_back(fmt::format(
        "Attention sinks: layers {} ({} of {}) put {:g} or more of their attention on position 0 (most: layer {}, {:.2f}){}. A "
        "quantizer must keep it exact: a BF16 sink window (oscar-cov keeps 64 tokens); kivi and oscar-omni quantize it once 128 "
        "tokens have come.",
        ranges(sink_layers), sink_layers.size(), r.sinks.size(), kSinkAttention, top_layer, top,
        std::isfinite(kmin) ? fmt::format("; its key is {:.2f}-{:.2f}x the median key norm there", kmin, kmax) : std::string()));
  }
  return out;
}

void print_tni_table(const TniReport& r, std::FILE* out, int max_outliers, bool per_head) {
  const DumpInfo& I = r.info;
  fmt::print(out, "Token Norm Imbalance: {} ({}; {} layers, {} query / {} KV heads, head_dim {}, {} tokens, {})\n",
             printable(r.dump_path), printable(I.model_name), I.n_layers, I.n_heads, I.n_kv_heads, I.head_dim, I.token_count,
             I.storage_dtype);
  if (std::isfinite(I.mean_next_token_loss)) fmt::print(out, "passage mean next-token loss: {:.4f} nats\n", I.mean_next_token_loss);
  fmt::print(out,
             "TNI = max/min token L2 norm; chan = max channel absmax / median channel absmax; outliers: |robust z| of "
             "log-norm > {}; undefined: 0/0 (an all-zero head)\n",
             r.outlier_z);
  if (per_head) {
    if (!I.has_pre_rope)
      fmt::print(out, "\nno Kpre rows: this dump has no pre-RoPE keys (has_pre_rope = 0, architecture {})\n", printable(I.architecture));
    fmt::print(out, "\n{:>5} {:>4} {:<5} | {:>8} {:>8} {:>8} {:>8} {:>8} | {:>7} {:>7} {:>6} {:>7} | {:>6} | {:>4}  {}\n", "layer",
               "head", "x", "min", "p05", "median", "p95", "max", "max/med", "min/med", "CV", "TNI", "chan", "outl",
               "strongest outliers (pos 'token' norm/median)");
    for (const TniRow& row : r.rows) {
      const NormDistribution& d = row.stats.norms;
      std::string outl;
      for (int i = 0; i < std::min<int>(max_outliers, static_cast<int>(row.stats.outliers.size())); ++i) {
        const OutlierToken& o = row.stats.outliers[i];
        outl += fmt::format("{}{} '{}' {:.2f}", i ? ", " : "", o.position, printable_short(r.token_label(o.position), 12), o.ratio);
      }
      const std::string name = row.tensor == "k" ? "K" : row.tensor == "k_pre" ? "Kpre" : "V";
      fmt::print(out, "{:>5} {:>4} {:<5} | {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f} | {} {} {} {} | {} | {:>4}  {}\n",
                 row.layer, row.kv_head, name, d.min, d.p05, d.median, d.p95, d.max, num(d.max_over_median, 7, 3),
                 num(d.min_over_median, 7, 3), num(d.cv, 6, 3), num(d.tni, 7, 2), num(row.stats.channels.spread, 6, 2),
                 row.stats.outliers.size(), outl);
    }
  }
  // The per-layer summary: TNI and channel spread of K (post-RoPE) and V, worst head among those where they are defined;
  // the attention sink (position 0) of the layer.
  const int undefined = r.undefined_tni();
  const bool sinks = r.sinks.size() == static_cast<size_t>(I.n_layers);
  fmt::print(out,
             "\nTNI summary (worst KV head per layer{}){}:\n{:>5} | {:>8} {:>8} | {:>8} {:>8}{}\n",
             undefined ? fmt::format("; {} undefined (all-zero) rows left out", undefined) : std::string(),
             sinks ? fmt::format("; sink: the attention on position 0, mean over the last {} queries and every query head, and the most "
                                 "sink-bound head's; pos0 K/V: position 0's norm over the median position's, min over KV heads",
                                 r.sinks.front().queries)
                   : std::string(),
             "layer", "K TNI", "K chan", "V TNI", "V chan", sinks ? fmt::format(" | {:>6} {:>8} | {:>7} {:>7}", "sink", "max head", "pos0 K", "pos0 V") : "");
  const std::vector<LayerWorst> w = layer_worst(r);
  for (int l = 0; l < I.n_layers; ++l) {
    const LayerWorst& x = w[static_cast<size_t>(l)];
    std::string sink;
    if (sinks) {
      const LayerSinks& s = r.sinks[static_cast<size_t>(l)];
      sink = fmt::format(" | {} | {} {}", sink_cells(s, 6, 5, 2), num(s.key_ratio_min, 7, 3), num(s.value_ratio_min, 7, 3));
    }
    fmt::print(out, "{:>5} | {} {} | {} {}{}\n", l, num(x.k_tni, 8, 2), num(x.k_chan, 8, 2), num(x.v_tni, 8, 2), num(x.v_chan, 8, 2), sink);
  }
  const std::vector<std::string> reading = tni_reading(r);
  if (!reading.empty()) {
    fmt::print(out, "\nWhat this says (computed from the numbers above; thresholds in README):\n");
    for (const std::string& line : reading) fmt::print(out, "- {}\n", line);
  }
}

namespace {

std::string tni_csv(const TniReport& r) {
  std::string f =
      "layer,kv_head,tensor,tokens,min,p01,p05,p25,median,p75,p95,p99,max,mean,cv,max_over_median,min_over_median,tni,"
      "channel_spread,channel_argmax,channel_median_absmax,n_outliers,top_outlier_position,top_outlier_ratio\n";
  for (const TniRow& row : r.rows) {
    const NormDistribution& d = row.stats.norms;
    const auto& o = row.stats.outliers;
    f += fmt::format("{},{},{},{},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{},{},{},{},{},{},{:.6g},{},{},{}\n",
                     row.layer, row.kv_head, row.tensor, row.stats.token_norms.size(), d.min, d.p01, d.p05, d.p25, d.median,
                     d.p75, d.p95, d.p99, d.max, d.mean, csv(d.cv), csv(d.max_over_median), csv(d.min_over_median),
                     csv(d.tni), csv(row.stats.channels.spread), row.stats.channels.argmax_channel,
                     row.stats.channels.median_absmax,
                     o.size(), o.empty() ? std::string() : std::to_string(o[0].position),
                     o.empty() ? std::string() : csv(o[0].ratio));
  }
  return f;
}

std::string tni_json(const TniReport& r, int max_outliers) {
  using nlohmann::json;
  json j;
  const DumpInfo& I = r.info;
  j["dump"] = r.dump_path;
  j["model_name"] = I.model_name;
  j["checkpoint_sha256"] = I.checkpoint_sha256;
  j["n_layers"] = I.n_layers;
  j["n_heads"] = I.n_heads;
  j["n_kv_heads"] = I.n_kv_heads;
  j["head_dim"] = I.head_dim;
  j["token_count"] = I.token_count;
  j["has_pre_rope"] = I.has_pre_rope;  // false: no k_pre rows
  j["text_source"] = I.text_source;
  j["tni_definition"] =
      "max over tokens of the L2 norm / min over tokens of the L2 norm, per layer, KV head and tensor; null where undefined "
      "(0/0: an all-zero head) or infinite";
  j["undefined_tni_rows"] = r.undefined_tni();
  j["outlier_z"] = r.outlier_z;
  if (std::isfinite(I.mean_next_token_loss)) j["mean_next_token_loss"] = I.mean_next_token_loss;
  j["sinks"] = sinks_json(r.sinks);
  j["rows"] = json::array();
  for (const TniRow& row : r.rows) {
    const NormDistribution& d = row.stats.norms;
    json o = json::array();
    for (int i = 0; i < std::min<int>(max_outliers, static_cast<int>(row.stats.outliers.size())); ++i) {
      const OutlierToken& t = row.stats.outliers[i];
      o.push_back({{"position", t.position}, {"token", r.token_label(t.position)}, {"norm", t.norm}, {"norm_over_median", t.ratio},
                   {"robust_z", std::isfinite(t.robust_z) ? json(t.robust_z) : json(nullptr)}});
    }
    j["rows"].push_back({{"layer", row.layer}, {"kv_head", row.kv_head}, {"tensor", row.tensor},
                         {"norm", {{"min", d.min}, {"p01", d.p01}, {"p05", d.p05}, {"p25", d.p25}, {"median", d.median},
                                   {"p75", d.p75}, {"p95", d.p95}, {"p99", d.p99}, {"max", d.max}, {"mean", d.mean}, {"cv", d.cv},
                                   {"max_over_median", d.max_over_median}, {"min_over_median", d.min_over_median}}},
                         {"tni", d.tni},
                         {"channel_spread", row.stats.channels.spread},
                         {"channel_argmax", row.stats.channels.argmax_channel},
                         {"n_outliers", row.stats.outliers.size()},
                         {"outliers", o}});
  }
  return j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";  // non-UTF-8 text from a dump: U+FFFD
}

std::string token_norms_csv(const TniReport& r) {
  std::string f = "layer,kv_head,tensor,position,norm\n";
  for (const TniRow& row : r.rows)
    for (size_t t = 0; t < row.stats.token_norms.size(); ++t)
      f += fmt::format("{},{},{},{},{:.6g}\n", row.layer, row.kv_head, row.tensor, t, row.stats.token_norms[t]);
  return f;
}

std::string channel_absmax_csv(const TniReport& r) {
  std::string f = "layer,kv_head,tensor,channel,absmax\n";
  for (const TniRow& row : r.rows)
    for (size_t c = 0; c < row.stats.channels.absmax.size(); ++c)
      f += fmt::format("{},{},{},{},{:.6g}\n", row.layer, row.kv_head, row.tensor, c, row.stats.channels.absmax[c]);
  return f;
}

}  // namespace

void check_tni_outputs(const TniOutputs& o, const std::string& dump) {
  const std::vector<std::filesystem::path> inputs{dump};
  if (!o.csv.empty()) check_output_file(o.csv), check_not_input(o.csv, inputs);
  if (!o.json.empty()) check_output_file(o.json), check_not_input(o.json, inputs);
  if (!o.plots.empty())
    check_output_folder(o.plots),
        check_not_input(o.plots, {"token_norms.csv", "channel_absmax.csv", "token_norms.png", "channel_absmax.png",
                                  "sinks.csv", "sinks.png"}, inputs);
  if (!o.plots.empty()) check_plotting("tni_plots.py"), check_plotting("sinks_plot.py");
}

void write_tni_outputs(const TniReport& r, const TniOutputs& o) {
  namespace fs = std::filesystem;
  OutputSet set;
  if (!o.csv.empty()) set.add(o.csv).write(tni_csv(r));
  if (!o.json.empty()) set.add(o.json).write(tni_json(r, o.max_outliers));
  bool made_dir = false;
  int dir_slot = -1;  // a plot folder made here goes again on SIGINT/SIGTERM when still empty
  try {
    if (!o.plots.empty()) {
      std::error_code ec;
      made_dir = !fs::exists(o.plots, ec);
      if (made_dir) dir_slot = interrupts::remember_folder(o.plots.c_str());
      fs::create_directories(o.plots, ec);
      if (ec) fail("{}: could not create the plot folder (reason: {}); choose another --plots folder", o.plots, ec.message());
      AtomicOutput& norms = set.add(fs::path(o.plots) / "token_norms.csv");
      norms.write(token_norms_csv(r));
      AtomicOutput& chans = set.add(fs::path(o.plots) / "channel_absmax.csv");
      chans.write(channel_absmax_csv(r));
      AtomicOutput& norms_png = set.add(fs::path(o.plots) / "token_norms.png");
      AtomicOutput& chans_png = set.add(fs::path(o.plots) / "channel_absmax.png");
      run_python(plots_script("tni_plots.py"), {norms.temp_path().string(), chans.temp_path().string(),
                                                 norms_png.temp_path().string(), chans_png.temp_path().string(),
                                                 r.info.model_name},
                 (fs::path(o.plots) / "token_norms.png").string());
      AtomicOutput& sinks = set.add(fs::path(o.plots) / "sinks.csv");
      sinks.write(sinks_csv(r.sinks));
      AtomicOutput& sinks_png = set.add(fs::path(o.plots) / "sinks.png");
      run_python(plots_script("sinks_plot.py"), {sinks.temp_path().string(), sinks_png.temp_path().string(), r.info.model_name},
                 (fs::path(o.plots) / "sinks.png").string());
    }
    set.commit();
    interrupts::forget(dir_slot);
  } catch (...) {
    if (made_dir) {
      set = OutputSet();  // removes the temporaries first
      std::error_code ec;
      fs::remove(o.plots, ec);  // only when still empty
    }
    interrupts::forget(dir_slot);
    throw;
  }
}

}  // namespace oscar
