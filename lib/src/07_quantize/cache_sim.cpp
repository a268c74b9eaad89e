// cache_sim.cpp: recipe application on one layer (see cache_sim.h).
#include "oscar/07_quantize/cache_sim.h"

#include <cmath>

#include "oscar/01_core/error.h"
#include "oscar/omni_format.h"
#include "oscar/07_quantize/quantizer.h"

namespace oscar {

LayerRotations layer_rotations(const Recipe& r, int head_dim, int layer, const CovarianceRotations* calib) {
  const bool per_head = r.covariance_scope == CovarianceScope::KvHead;
  if (calib && per_head && r.calibrated() && !calib->per_kv_head())
    fail("recipe {} has covariance_scope: kv-head but the calibration {} holds only per-layer rotations; fit the calibration "
         "per KV head",
         r.name, calib->calibration_path);
  auto build = [&](const RotationSpec& spec, bool key, std::vector<std::unique_ptr<Rotation>>& out) {
    if (spec.kind != RotationKind::Covariance || !calib) {  // without calib, make_rotation refuses a covariance kind
      out.push_back(make_rotation(spec, head_dim, nullptr));
      return;
    }
    if (layer >= calib->n_layers) fail("calibration {} has {} layers, the dump more", calib->calibration_path, calib->n_layers);
    if (!per_head) {
      out.push_back(make_rotation(spec, head_dim, key ? &calib->key_eigenvectors[layer] : &calib->value_eigenvectors[layer]));
      return;
    }
    for (const CovarianceFit& f : calib->heads[layer])
      out.push_back(make_rotation(spec, head_dim, key ? &f.key_eigenvectors : &f.value_eigenvectors));
  };
  LayerRotations out;
  build(r.key_rotation, true, out.keys);
  build(r.value_rotation, false, out.values);
  return out;
}

void LayerRotations::check_heads(int n_kv_heads) const {
  for (const auto* list : {&keys, &values})
    if (list->size() != 1 && list->size() != static_cast<size_t>(n_kv_heads))
      fail("the recipe's per-KV-head rotations cover {} KV heads but the layer has {}; calibrate on the same model", list->size(),
           n_kv_heads);
}

namespace {

void round_rows(float* x, long n, ScaleDtype t) {
  for (long i = 0; i < n; ++i) x[i] = store_param(x[i], t);
}

// Quantizes rows [s.sink_end, s.body_end) of one head block in place (dequantized values written back),
// rounds the other rows to the window dtype. `row_scale` (per token, may be empty) divides body rows
// before quantization and multiplies them after.
void quantize_head(float* x, int tokens, int d, const TensorQuant& q, const CacheSegments& s, ScaleDtype window,
                   const std::vector<float>& row_scale) {
  if (!q.quantized()) {
    round_rows(x, static_cast<long>(tokens) * d, ScaleDtype::F16);
    return;
  }
  round_rows(x, static_cast<long>(s.sink_end) * d, window);
  round_rows(x + static_cast<long>(s.body_end) * d, static_cast<long>(tokens - s.body_end) * d, window);
  if (s.body() == 0) return;
  float* body = x + static_cast<long>(s.sink_end) * d;
  if (!row_scale.empty())
    for (int t = 0; t < s.body(); ++t) {
      const float n = row_scale[s.sink_end + t];
      if (n > 0)
        for (int c = 0; c < d; ++c) body[static_cast<long>(t) * d + c] /= n;
    }
  const QuantizedBlock qb = quantize_block(body, s.body(), d, q);
  dequantize_block(qb, body);
  if (!row_scale.empty())
    for (int t = 0; t < s.body(); ++t) {
      const float n = row_scale[s.sink_end + t];
      for (int c = 0; c < d; ++c) body[static_cast<long>(t) * d + c] *= n;
    }
}

}  // namespace

SimulatedLayer simulate_layer(const Recipe& r, const HeadTensor& k, const HeadTensor& v, const LayerRotations& rot) {
  return simulate_layer(r, k, v, rot, cache_segments(r, k.tokens));
}

SimulatedLayer simulate_layer(const Recipe& r, const HeadTensor& k, const HeadTensor& v, const LayerRotations& rot,
                              const KvSegments& segments) {
  const int H = k.heads, T = k.tokens, d = k.head_dim;
  SimulatedLayer out;
  out.segments = segments;
  for (const bool is_v : {false, true}) {
    const TensorQuant& q = is_v ? r.value : r.key;
    const int body = out.segments.of(is_v).body();
    validate_spec(q, body > 0 ? body : (q.axis == QuantAxis::PerChannel ? q.group : 1), d);
  }
  rot.check_heads(H);
  out.k_hat = k;
  out.v_hat = v;
  for (int h = 0; h < H; ++h) {
    rot.key(h).apply(out.k_hat.head(h), T);
    rot.value(h).apply(out.v_hat.head(h), T);
  }
  std::vector<float> norms;
  if (r.omni_token_scaling && r.key.quantized()) {  // per-token norm over all KV heads of the layer
    norms.assign(T, 0.f);
    for (int t = 0; t < T; ++t)  // the kernels' summation order (omni_format.h), so both agree bit for bit
      norms[t] = omnifmt::omni_token_norm(
          [&](int i) { return out.k_hat.head(i / d)[static_cast<long>(t) * d + i % d]; }, H * d, r.norm_dtype);
  }
  for (int h = 0; h < H; ++h) {
    try {  // errors (e.g. a scale that overflows its dtype) name the KV head and tensor
      quantize_head(out.k_hat.head(h), T, d, r.key, out.segments.key, r.windows.window_dtype, norms);
    } catch (const Error& e) {
      fail("KV head {} keys: {}", h, e.what());
    }
    try {
      quantize_head(out.v_hat.head(h), T, d, r.value, out.segments.value, r.windows.window_dtype, {});
    } catch (const Error& e) {
      fail("KV head {} values: {}", h, e.what());
    }
    rot.key(h).apply_inverse(out.k_hat.head(h), T);
    rot.value(h).apply_inverse(out.v_hat.head(h), T);
  }
  return out;
}

}  // namespace oscar
