// real_dump.h: query/key/value activations of a model read from a KV dump (format v2, e.g. the SmolLM2 file of
// experiments/device/make_smollm2_real_dump.sh), head-major as real_activations.h gives them, for the GPU
// driver's real-activation decode cases. Every layer of the file is returned, its first `tokens` tokens, with
// the layer's logit scaling and its model layer number (root attribute `source_layers` when present, else the
// dump's index). Throws oscar::Error when the file is unreadable, shorter than `tokens`, or its attention is
// not what the decode kernels compute (a sliding window, a soft-cap or learned sinks).
#pragma once
#include <hdf5.h>

#include <string>
#include <vector>

#include "oscar/01_core/error.h"
#include "oscar/03_dump/dump.h"
#include "real_activations.h"

// The model layer numbers of the dump's layers: root attribute `source_layers` (int, one per layer), else 0..n-1.
inline std::vector<int> real_dump_source_layers(const std::string& path, int n_layers) {
  std::vector<int> out;
  for (int l = 0; l < n_layers; ++l) out.push_back(l);
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) oscar::fail("{}: cannot open as HDF5; make the dump with experiments/device/make_smollm2_real_dump.sh", path);
  std::string problem;
  if (H5Aexists(f, "source_layers") > 0) {
    const hid_t a = H5Aopen(f, "source_layers", H5P_DEFAULT);
    const hid_t s = H5Aget_space(a);
    const hssize_t n = H5Sget_simple_extent_npoints(s);
    std::vector<int> v(size_t(n > 0 ? n : 0));
    if (n != n_layers) problem = "attribute source_layers has " + std::to_string(n) + " entries for " + std::to_string(n_layers) + " layers";
    else if (H5Aread(a, H5T_NATIVE_INT, v.data()) < 0) problem = "attribute source_layers cannot be read as integers";
    else out = v;
    H5Sclose(s);
    H5Aclose(a);
  }
  H5Fclose(f);
  if (!problem.empty()) oscar::fail("{}: {}; re-create the dump with experiments/device/make_smollm2_real_dump.sh", path, problem);
  return out;
}

// Every layer of the dump at `path`, its first `tokens` tokens.
inline std::vector<RealLayer> real_dump_layers(const std::string& path, int tokens) {
  const oscar::DumpReader r(path);
  const oscar::DumpInfo& I = r.info();
  if (I.token_count < tokens)
    oscar::fail("{}: {} tokens, the case needs {}; make a longer dump (make_smollm2_real_dump.sh OUT LAYERS TOKENS)", path,
                I.token_count, tokens);
  const std::vector<int> src = real_dump_source_layers(path, I.n_layers);
  const int D = I.head_dim;
  std::vector<RealLayer> out(size_t(I.n_layers));
  for (int l = 0; l < I.n_layers; ++l) {
    const oscar::LayerAttention a = I.attention(l);
    if (a.sliding_window != 0 || a.softcap != 0 || !a.sinks.empty())
      oscar::fail("{}: layer {}: sliding_window={} softcap={} sinks={}: the decode kernels compute plain causal attention; "
                  "use a dump of a model without these",
                  path, l, a.sliding_window, a.softcap, a.sinks.size());
    const oscar::LayerDump d = r.read_layer(l, {"q", "k", "v"});
    RealLayer& R = out[size_t(l)];
    R.n_heads = I.n_heads; R.n_kv_heads = I.n_kv_heads; R.tokens = tokens; R.head_dim = D;
    R.layer = src[size_t(l)];
    R.scaling = a.scaling;
    auto cut = [&](const oscar::HeadTensor& x, int heads, std::vector<float>& dst) {
      dst.resize(size_t(heads) * tokens * D);
      for (int h = 0; h < heads; ++h)
        for (int t = 0; t < tokens; ++t)
          for (int i = 0; i < D; ++i) dst[(size_t(h) * tokens + t) * D + i] = x.head(h)[size_t(t) * D + i];
    };
    cut(d.q, I.n_heads, R.q);
    cut(d.k, I.n_kv_heads, R.k);
    cut(d.v, I.n_kv_heads, R.v);
  }
  return out;
}
