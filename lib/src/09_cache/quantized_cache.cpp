// quantized_cache.cpp: incremental quantization of the body, rounding of every row to the window dtype, and the
// per-query body ranges of a chunk's view.
#include "oscar/09_cache/quantized_cache.h"

#include <algorithm>

#include "oscar/01_core/error.h"

namespace oscar {

QuantizedKvCache::QuantizedKvCache(const ModelConfig& c, const Recipe& recipe, const CovarianceRotations* calib)
    : KvCache(c), recipe_(recipe), n_kv_(c.n_kv_heads), head_dim_(c.head_dim()), kw_(c.n_layers), vw_(c.n_layers),
      kb_(c.n_layers), vb_(c.n_layers), body_done_(c.n_layers, {0, 0}), rounded_(c.n_layers, 0) {
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
// h (its row 0 is matrix row a) into rows [a, a + h.tokens) of m.
void heads_to_rows(const HeadTensor& h, MatrixRM& m, int a) {
  for (int hh = 0; hh < h.heads; ++hh)
    for (int t = 0; t < h.tokens; ++t)
      for (int c = 0; c < h.head_dim; ++c) m(a + t, hh * h.head_dim + c) = h.head(hh)[static_cast<long>(t) * h.head_dim + c];
}
void grow(MatrixRM& m, Eigen::Index rows, Eigen::Index cols) {
  if (m.rows() >= rows) return;
  MatrixRM m2(std::max(rows, 2 * m.rows()), cols);
  m2.topRows(m.rows()) = m;
  m.swap(m2);
}
}  // namespace

void QuantizedKvCache::append(int layer, const MatrixRM& k, const MatrixRM& v) {
  const int before = first_[layer];
  KvCache::append(layer, k, v);
  if (const int dropped = first_[layer] - before; dropped > 0) {  // a local layer's rows left its window
    const int keep = rows_[layer] - static_cast<int>(k.rows());
    for (MatrixRM* m : {&kw_[layer], &vw_[layer]})
      if (m->rows() > 0) m->topRows(keep) = m->middleRows(dropped, keep).eval();
  }
}

void QuantizedKvCache::attention_view(int layer, int n, AttentionView& view) {
  const int F = first_[layer], T = F + rows_[layer];  // positions [F, T) held after this chunk
  const MatrixRM& K = k_[layer];
  const MatrixRM& V = v_[layer];
  for (MatrixRM* m : {&kw_[layer], &vw_[layer]}) grow(*m, K.rows(), K.cols());
  // New rows are rounded to the window dtype (a row's rounding never changes) ...
  if (int& r = rounded_[layer]; T > r) {
    const int a = std::max(r, F) - F, b = T - F;
    const KvSegments all_window{CacheSegments{0, 0, b - a}, CacheSegments{0, 0, b - a}};
    const SimulatedLayer s = simulate_layer(recipe_, rows_to_heads(K, a, b, n_kv_, head_dim_),
                                            rows_to_heads(V, a, b, n_kv_, head_dim_), rot_[layer], all_window);
    heads_to_rows(s.k_hat, kw_[layer], a);
    heads_to_rows(s.v_hat, vw_[layer], a);
    r = T;
  }
  view.k = &kw_[layer];
  view.v = &vw_[layer];
  view.first = F;
  view.window = windows_[layer];
  if (windows_[layer] > 0) return;  // a local layer: its window, in the window dtype

  // ... and newly filled body rows of each tensor are quantized once, as one all-body block (global layers hold
  // every position: rows are positions).
  for (MatrixRM* m : {&kb_[layer], &vb_[layer]}) grow(*m, K.rows(), K.cols());
  const KvSegments seg = cache_segments(recipe_, T);
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
    const SimulatedLayer s = simulate_layer(recipe_, rows_to_heads(K, a, b, n_kv_, head_dim_),
                                            rows_to_heads(V, a, b, n_kv_, head_dim_), rot_[layer],
                                            KvSegments{keys ? body : none, values ? body : none});
    if (keys) heads_to_rows(s.k_hat, kb_[layer], a);
    if (values) heads_to_rows(s.v_hat, vb_[layer], a);
  };
  if (dk == dv && ek == ev) {
    if (ek > dk) quantize_rows(dk, ek, true, true);
  } else {  // keys and values with windows of their own (KIVI: key blocks, value tokens)
    if (ek > dk) quantize_rows(dk, ek, true, false);
    if (ev > dv) quantize_rows(dv, ev, false, true);
  }
  dk = ek;
  dv = ev;
  if (ek == 0 && ev == 0) return;  // nothing in the body yet
  if (chunks_full_precision_ && n > 1) return;  // a prefill: its queries read the prompt before it is stored in low bits
  view.k_body = &kb_[layer];
  view.v_body = &vb_[layer];
  view.key_body.resize(static_cast<size_t>(n));
  view.value_body.resize(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t) {  // the query at position T - n + t read the cache of T - n + t + 1 tokens
    const KvSegments at = cache_segments(recipe_, T - n + t + 1);
    view.key_body[static_cast<size_t>(t)] = {at.key.sink_end, at.key.body_end};
    view.value_body[static_cast<size_t>(t)] = {at.value.sink_end, at.value.body_end};
  }
}

void QuantizedKvCache::state(int layer, MatrixRM& k, MatrixRM& v) const {
  const int F = first_[layer], R = rows_[layer];
  if (rounded_[layer] < F + R) fail("internal: layer {} has rows no forward pass attended over", layer);
  k = kw_[layer].topRows(R);
  v = vw_[layer].topRows(R);
  if (windows_[layer] > 0) return;
  const KvSegments seg = cache_segments(recipe_, F + R);
  if (seg.key.body() > 0) k.middleRows(seg.key.sink_end, seg.key.body()) = kb_[layer].middleRows(seg.key.sink_end, seg.key.body());
  if (seg.value.body() > 0)
    v.middleRows(seg.value.sink_end, seg.value.body()) = vb_[layer].middleRows(seg.value.sink_end, seg.value.body());
}

}  // namespace oscar
