// quantized_cache.cpp: incremental quantization of the body, fresh rounding of the windows.
#include "oscar/08_cache/quantized_cache.h"

#include <algorithm>

#include "oscar/01_core/error.h"

namespace oscar {

QuantizedKvCache::QuantizedKvCache(const ModelConfig& c, const Recipe& recipe, const CovarianceRotations* calib)
    : KvCache(c), recipe_(recipe), n_kv_(c.n_kv_heads), head_dim_(c.head_dim()), k_hat_(c.n_layers), v_hat_(c.n_layers),
      body_done_(c.n_layers, {0, 0}), rounded_(c.n_layers, 0) {
  if (recipe.calibrated() && !calib) fail("recipe {} needs calibration rotations (a calibration passage)", recipe.name);
  for (int l = 0; l < c.n_layers; ++l) {
    rot_.push_back(layer_rotations(recipe, head_dim_, l, calib));
    rot_.back().check_heads(n_kv_);
  }
}

namespace {
// Rows [a, b) of a [T, n_kv*d] matrix as a head-major HeadTensor, and back.
HeadTensor rows_to_heads(const MatrixRM& m, int a, int b, int heads, int d) {
  HeadTensor h{heads, b - a, d, std::vector<float>(static_cast<size_t>(heads) * (b - a) * d)};
  for (int hh = 0; hh < heads; ++hh)
    for (int t = a; t < b; ++t)
      for (int c = 0; c < d; ++c) h.head(hh)[static_cast<long>(t - a) * d + c] = m(t, hh * d + c);
  return h;
}
// Rows [from, to) of h (its row 0 is matrix row a) into m.
void heads_to_rows(const HeadTensor& h, MatrixRM& m, int a, int from, int to) {
  for (int hh = 0; hh < h.heads; ++hh)
    for (int t = from; t < to; ++t)
      for (int c = 0; c < h.head_dim; ++c) m(t, hh * h.head_dim + c) = h.head(hh)[static_cast<long>(t - a) * h.head_dim + c];
}
}  // namespace

void QuantizedKvCache::attention_view(int layer, const MatrixRM*& k, const MatrixRM*& v) {
  const int T = rows_[layer];
  const MatrixRM& K = k_[layer];
  const MatrixRM& V = v_[layer];
  MatrixRM& Kh = k_hat_[layer];
  MatrixRM& Vh = v_hat_[layer];
  if (Kh.rows() < T) {  // grow, keeping the quantized rows
    MatrixRM K2(std::max<Eigen::Index>(T, 2 * Kh.rows()), K.cols()), V2(K2.rows(), V.cols());
    K2.topRows(Kh.rows()) = Kh;
    V2.topRows(Vh.rows()) = Vh;
    Kh.swap(K2);
    Vh.swap(V2);
  }
  const KvSegments seg = cache_segments(recipe_, T);
  // New rows enter as window rows (rounded to the window dtype; a row's rounding never changes) ...
  if (int& r = rounded_[layer]; T > r) {
    const KvSegments all_window{CacheSegments{0, 0, T - r}, CacheSegments{0, 0, T - r}};
    const SimulatedLayer s = simulate_layer(recipe_, rows_to_heads(K, r, T, n_kv_, head_dim_), rows_to_heads(V, r, T, n_kv_, head_dim_),
                                            rot_[layer], all_window);
    heads_to_rows(s.k_hat, Kh, r, r, T);
    heads_to_rows(s.v_hat, Vh, r, r, T);
    r = T;
  }
  // ... and newly filled body rows of each tensor are quantized once, as one all-body block, overwriting them.
  int& dk = body_done_[layer].first;
  int& dv = body_done_[layer].second;
  dk = std::max(dk, seg.key.sink_end);  // the sink grows with the first tokens; the body starts after it
  dv = std::max(dv, seg.value.sink_end);
  if (seg.key.body_end < dk || seg.value.body_end < dv)
    fail("internal: the body of layer {} shrank from {}/{} to {}/{} rows", layer, dk, dv, seg.key.body_end, seg.value.body_end);
  const int ek = std::max(dk, seg.key.body_end), ev = std::max(dv, seg.value.body_end);
  // Rows [a, b) as one block whose keys' body is [a, b) when `keys`, values' when `values` (else empty).
  auto quantize_rows = [&](int a, int b, bool keys, bool values) {
    const CacheSegments body{0, b - a, b - a}, none{0, 0, b - a};
    const SimulatedLayer s = simulate_layer(recipe_, rows_to_heads(K, a, b, n_kv_, head_dim_), rows_to_heads(V, a, b, n_kv_, head_dim_),
                                            rot_[layer], KvSegments{keys ? body : none, values ? body : none});
    if (keys) heads_to_rows(s.k_hat, Kh, a, a, b);
    if (values) heads_to_rows(s.v_hat, Vh, a, a, b);
  };
  if (dk == dv && ek == ev) {
    if (ek > dk) quantize_rows(dk, ek, true, true);
  } else {  // keys and values with windows of their own (KIVI: key blocks, value tokens)
    if (ek > dk) quantize_rows(dk, ek, true, false);
    if (ev > dv) quantize_rows(dv, ev, false, true);
  }
  dk = ek;
  dv = ev;
  k_view_[layer] = Kh.topRows(T);
  v_view_[layer] = Vh.topRows(T);
  k = &k_view_[layer];
  v = &v_view_[layer];
}

}  // namespace oscar
