// tni_report.cpp: oscar-analyze's renderings (tni_report.h).
#include "oscar/13_report/tni_report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "oscar/01_core/error.h"
#include "oscar/01_core/interrupts.h"
#include "oscar/01_core/output_files.h"
#include "oscar/01_core/printable.h"
#include "oscar/13_report/plotting.h"
#include "oscar/13_report/table_text.h"

namespace oscar {

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
                 row.layer, row.kv_head, name, d.min, d.p05, d.median, d.p95, d.max, number_cell(d.max_over_median, 7, 3),
                 number_cell(d.min_over_median, 7, 3), number_cell(d.cv, 6, 3), number_cell(d.tni, 7, 2), number_cell(row.stats.channels.spread, 6, 2),
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
      sink = fmt::format(" | {} | {} {}", sink_cells(s, 6, 5, 2), number_cell(s.key_ratio_min, 7, 3), number_cell(s.value_ratio_min, 7, 3));
    }
    fmt::print(out, "{:>5} | {} {} | {} {}{}\n", l, number_cell(x.k_tni, 8, 2), number_cell(x.k_chan, 8, 2), number_cell(x.v_tni, 8, 2), number_cell(x.v_chan, 8, 2), sink);
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
                     d.p75, d.p95, d.p99, d.max, d.mean, csv_number(d.cv), csv_number(d.max_over_median), csv_number(d.min_over_median),
                     csv_number(d.tni), csv_number(row.stats.channels.spread), row.stats.channels.argmax_channel,
                     row.stats.channels.median_absmax,
                     o.size(), o.empty() ? std::string() : std::to_string(o[0].position),
                     o.empty() ? std::string() : csv_number(o[0].ratio));
  }
  return f;
}

std::string tni_json(const TniReport& r, int max_outliers) {
  using nlohmann::json;
  json j = json_header("oscar-analyze");
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
  return json_text(j, 1);  // non-UTF-8 text from a dump: U+FFFD
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

std::string sink_cells(const LayerSinks& l, int width, int head_width, int index_width) {
  const int cells = width + 1 + head_width + 2 + index_width;  // "attn max h<i>"
  if (l.out_of_window()) return fmt::format("{:>{}}", "out of window", cells);
  return number_cell(l.attention_mean, width, 3) + " " + number_cell(l.attention_max_head, head_width, 3) +
         fmt::format(" h{:<{}}", l.attention_max_head_index, index_width);
}

std::string sinks_csv(const std::vector<LayerSinks>& s) {
  std::string f =
      "layer,queries,scaling,attention_mean,attention_max_head,attention_max_head_index,key_ratio_mean,key_ratio_min,"
      "value_ratio_mean,value_ratio_min,window,queries_seeing_0\n";
  for (const LayerSinks& l : s)
    f += fmt::format("{},{},{:.9g},{},{},{},{},{},{},{},{},{}\n", l.layer, l.queries, l.scaling, csv_number(l.attention_mean),
                     csv_number(l.attention_max_head), l.attention_max_head_index, csv_number(l.key_ratio_mean), csv_number(l.key_ratio_min),
                     csv_number(l.value_ratio_mean), csv_number(l.value_ratio_min), l.window, l.queries_seeing_0);
  return f;
}

nlohmann::json sinks_json(const std::vector<LayerSinks>& s) {
  using nlohmann::json;
  const auto val = [](double x) { return std::isnan(x) ? json(nullptr) : json(x); };
  json a = json::array();
  for (const LayerSinks& l : s)
    a.push_back({{"layer", l.layer}, {"queries", l.queries}, {"scaling", l.scaling}, {"attention_mean", val(l.attention_mean)},
                 {"attention_max_head", val(l.attention_max_head)}, {"attention_max_head_index", l.attention_max_head_index},
                 {"key_ratio_mean", val(l.key_ratio_mean)}, {"key_ratio_min", val(l.key_ratio_min)},
                 {"value_ratio_mean", val(l.value_ratio_mean)}, {"value_ratio_min", val(l.value_ratio_min)},
                 {"window", l.window}, {"queries_seeing_0", l.queries_seeing_0}});
  return a;
}

}  // namespace oscar
