// analyze.cpp: streaming TNI analysis of a dump, and its reading (what the numbers say).
#include "oscar/04_stats/analyze.h"

#include <algorithm>
#include <cmath>

#include "oscar/01_core/error.h"
#include "oscar/01_core/stats.h"
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

namespace {

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

}  // namespace oscar
