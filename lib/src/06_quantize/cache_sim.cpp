// cache_sim.cpp: recipe application on one layer (see cache_sim.h).
#include "oscar/06_quantize/cache_sim.h"

#include <cmath>

#include "oscar/01_core/error.h"
#include "oscar/omni_format.h"
#include "oscar/06_quantize/quantizer.h"

namespace oscar {

LayerRotations layer_rotations(const Recipe& r, int head_dim, int layer, const CovarianceRotations* calib) {
  LayerRotations out;
  auto eig = [&](bool key) -> const Eigen::MatrixXd* {
    if (!calib) return nullptr;
    if (layer >= calib->n_layers) fail("calibration {} has {} layers, the dump more", calib->calibration_path, calib->n_layers);
    return key ? &calib->key_eigenvectors[layer] : &calib->value_eigenvectors[layer];
  };
  out.key = make_rotation(r.key_rotation, head_dim, r.key_rotation.kind == RotationKind::Covariance ? eig(true) : nullptr);
  out.value = make_rotation(r.value_rotation, head_dim, r.value_rotation.kind == RotationKind::Covariance ? eig(false) : nullptr);
  return out;
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
                              const CacheSegments& segments) {
  const int H = k.heads, T = k.tokens, d = k.head_dim;
  SimulatedLayer out;
  out.segments = segments;
  validate_spec(r.key, out.segments.body() > 0 ? out.segments.body() : (r.key.axis == QuantAxis::PerChannel ? r.key.group : 1), d);
  validate_spec(r.value, out.segments.body() > 0 ? out.segments.body() : (r.value.axis == QuantAxis::PerChannel ? r.value.group : 1), d);
  out.k_hat = k;
  out.v_hat = v;
  for (int h = 0; h < H; ++h) {
    rot.key->apply(out.k_hat.head(h), T);
    rot.value->apply(out.v_hat.head(h), T);
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
      quantize_head(out.k_hat.head(h), T, d, r.key, out.segments, r.windows.window_dtype, norms);
    } catch (const Error& e) {
      fail("KV head {} keys: {}", h, e.what());
    }
    try {
      quantize_head(out.v_hat.head(h), T, d, r.value, out.segments, r.windows.window_dtype, {});
    } catch (const Error& e) {
      fail("KV head {} values: {}", h, e.what());
    }
    rot.key->apply_inverse(out.k_hat.head(h), T);
    rot.value->apply_inverse(out.v_hat.head(h), T);
  }
  return out;
}

}  // namespace oscar
