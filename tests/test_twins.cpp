// test_twins.cpp: the kernels' CPU twins (tests/twins/: cov_twin.h, omni_twin.h, built only from the shared
// rules in kernels/include/oscar/) against lib's reference on the CPU, so that the GPU driver
// (gpu_test_ops), which checks the kernels against the twins, checks them against the reference:
//   * the twin's cache dequantized with lib's float arithmetic equals simulate_layer() of the preset
//     (experiments/presets/oscar-cov.yaml, oscar-omni.yaml via load_preset; rotations left to the caller,
//     as the kernels take K/V already rotated) bit for bit, for lengths around the window, block and
//     residual boundaries, both bit widths and several KV-head counts;
//   * after a prefill and then single-token appends, the twin at each length equals lib's QuantizedKvCache
//     fed token by token (the incremental cache a server keeps), which proves the twins' contract that
//     a cache's live state is a function of the token rows and the length alone;
//   * the twins' sizes are the formats' layout() sizes (checked when a twin is built) and the decode
//     twin is softmax attention (a hand-checked case).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "oscar/02_model/forward/model.h"
#include "oscar/06_rotate/rotation.h"
#include "oscar/07_quantize/cache_sim.h"
#include "oscar/05_recipe/recipe_yaml.h"
#include "oscar/09_cache/quantized_cache.h"
#include "oscar/float_formats.h"
#include "twins/attention_twin.h"
#include "twins/cov_twin.h"
#include "twins/fwht_twin.h"
#include "twins/inputs.h"
#include "twins/omni_twin.h"

using namespace oscar;

namespace {

// The preset at `bits` with its rotations left out (the kernels take rotated K/V).
Recipe kernel_recipe(const std::string& preset, int bits, int D) {
  Recipe r = resolve_recipe(load_preset(preset).recipe, bits, D);
  r.key_rotation.kind = RotationKind::None;
  r.value_rotation.kind = RotationKind::None;
  return r;
}

// Tokens [0, L) of sequence b as a head-major HeadTensor of floats (the bf16 values exactly).
HeadTensor heads(const twins::Bf16Rows& x, int b, int L) {
  HeadTensor h{x.H, L, x.D, std::vector<float>(size_t(x.H) * L * x.D)};
  for (int hh = 0; hh < x.H; ++hh)
    for (int t = 0; t < L; ++t)
      for (int c = 0; c < x.D; ++c) h.head(hh)[size_t(t) * x.D + c] = bf16_bits_to_float(x.at(b, hh, t, c));
  return h;
}
// Rows [a, b) of sequence 0 as a [rows, H*D] matrix (the model's KvCache layout, head-major columns).
MatrixRM rows(const twins::Bf16Rows& x, int a, int b) {
  MatrixRM m(b - a, x.H * x.D);
  for (int t = a; t < b; ++t)
    for (int h = 0; h < x.H; ++h)
      for (int c = 0; c < x.D; ++c) m(t - a, h * x.D + c) = bf16_bits_to_float(x.at(0, h, t, c));
  return m;
}

// Elements (K and V, every head, token and channel of a sequence holding L tokens) where the twin's
// dequantized value (lib's float arithmetic) differs from ref(is_v, h, t, c); the first one in *first.
template <class Deq, class Ref>
int64_t mismatches(Deq deq, Ref ref, int H, int L, int D, std::string* first) {
  int64_t bad = 0;
  for (int v = 0; v < 2; ++v)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < L; ++t)
        for (int c = 0; c < D; ++c) {
          const float a = deq(v == 1, h, t, c), r = ref(v == 1, h, t, c);
          if (a == r || (std::isnan(a) && std::isnan(r))) continue;
          if (!bad++) {
            std::ostringstream s;
            s << (v ? "V" : "K") << " h=" << h << " t=" << t << " c=" << c << ": twin " << a << ", lib " << r;
            *first = s.str();
          }
        }
  return bad;
}

struct Fmt {
  const char* preset;
  // Dequantized twin value (float, lib's arithmetic) of sequence 0 holding L tokens.
  std::function<std::function<float(bool, int, int, int)>(const twins::Inputs&, int bits, int L, int64_t capacity)> twin;
};

std::function<float(bool, int, int, int)> cov_deq(const twins::Inputs& in, int bits, int L, int64_t cap) {
  auto c = std::make_shared<cov_twin::Cache>(cov_twin::build(in.k, in.v, {L}, bits, cap));
  return [c, L](bool is_v, int h, int t, int ch) { return cov_twin::dequant<float>(*c, is_v, 0, h, t, L, ch); };
}
std::function<float(bool, int, int, int)> omni_deq(const twins::Inputs& in, int bits, int L, int64_t cap) {
  auto c = std::make_shared<omni_twin::Cache>(omni_twin::build(in.k, in.v, {L}, bits, cap));
  return [c, L](bool is_v, int h, int t, int ch) { return omni_twin::dequant<float>(*c, is_v, 0, h, t, L, ch); };
}

// The twin against simulate_layer at each length, and against QuantizedKvCache through prefill + appends.
void check_format(const Fmt& f, const std::vector<int>& lengths, const std::vector<std::pair<int, int>>& incremental) {
  const int D = 128, T = 700;
  for (twins::Profile prof : {twins::Profile::Mix, twins::Profile::Stress})
    for (int bits : {2, 4})
      for (int H : {1, 3, 8}) {
        const twins::Inputs in = twins::make_inputs(prof, 1, H, H, T, D, uint32_t(bits * 100 + H));
        const Recipe r = kernel_recipe(f.preset, bits, D);
        const LayerRotations rot = layer_rotations(r, D, 0, nullptr);
        for (int L : lengths) {
          const SimulatedLayer sim = simulate_layer(r, heads(in.k, 0, L), heads(in.v, 0, L), rot);
          std::string first;
          const int64_t bad = mismatches(
              f.twin(in, bits, L, T),
              [&](bool is_v, int h, int t, int c) { return (is_v ? sim.v_hat : sim.k_hat).head(h)[size_t(t) * D + c]; }, H, L, D, &first);
          INFO(f.preset << " vs simulate_layer: " << twins::profile_name(prof) << " int" << bits << " H=" << H << " L=" << L << ": " << first);
          CHECK(bad == 0);
        }
        if (H == 8) continue;  // token-by-token checks on 1 and 3 heads (the step loop rebuilds the twin)
        for (auto [L0, L1] : incremental) {
          ModelConfig mc;
          mc.n_layers = 1; mc.n_heads = H; mc.n_kv_heads = H; mc.dim = H * D; mc.hidden_dim = 1; mc.vocab_size = 1; mc.seq_len = T;
          QuantizedKvCache cache(mc, r, nullptr);
          int64_t bad_steps = 0;
          std::string first;
          for (int L = L0; L <= L1; ++L) {
            const int a = L == L0 ? 0 : L - 1;
            cache.append(0, rows(in.k, a, L), rows(in.v, a, L));
            AttentionView view;
            cache.attention_view(0, L - a, view);
            cache.advance(L - a);
            MatrixRM kv, vv;
            cache.state(0, kv, vv);
            std::string here;
            const int64_t bad = mismatches(
                f.twin(in, bits, L, T), [&](bool is_v, int h, int t, int c) { return (is_v ? vv : kv)(t, h * D + c); }, H, L, D, &here);
            if (bad && !bad_steps++) first = "at L=" + std::to_string(L) + ": " + std::to_string(bad) + " differ, first " + here;
          }
          INFO(f.preset << " vs QuantizedKvCache: " << twins::profile_name(prof) << " int" << bits << " H=" << H << " prefill " << L0
                        << " + appends to " << L1 << ": " << first);
          CHECK(bad_steps == 0);
        }
      }
}

}  // namespace

TEST_CASE("oscar-cov twin equals lib's reference (simulate_layer, QuantizedKvCache) bit for bit", "[twins][cov]") {
  // Around the sink (64), the window end (sink + recent = 320) and beyond.
  check_format(Fmt{"oscar-cov", cov_deq}, {1, 37, 63, 64, 65, 319, 320, 321, 333, 577},
               {{37, 345}, {330, 400}});
}

TEST_CASE("oscar-omni twin equals lib's reference (simulate_layer, QuantizedKvCache) bit for bit", "[twins][omni]") {
  // Around the key block (32) and the residual block (128).
  check_format(Fmt{"oscar-omni", omni_deq}, {1, 31, 32, 127, 128, 129, 255, 256, 300, 515},
               {{100, 400}, {256, 300}});
}

TEST_CASE("twins take their array sizes from the formats' layout()", "[twins]") {
  const int64_t cap = 1000;
  const cov_twin::Cache c = cov_twin::empty(3, 2, 128, 2, cap);
  const covfmt::Layout cl = covfmt::layout(3, 2, 128, 2, cap, covfmt::kDefaultSink, covfmt::kDefaultRecent);
  int64_t total = 0;
  for (const auto& a : c.img.arrays) total += a.bytes();
  CHECK(total == cl.total_bytes());
  CHECK(c.body_capacity == cap - 64 - 256);
  const omni_twin::Cache o = omni_twin::empty(3, 2, 128, 4, cap);
  const omnifmt::Layout ol = omnifmt::layout(3, 2, 128, 4, cap);
  total = 0;
  for (const auto& a : o.img.arrays) total += a.bytes();
  CHECK(total == ol.total_bytes());
  CHECK(o.capacity >= cap);
  CHECK(o.body_capacity % 128 == 0);
}

TEST_CASE("twin images compare live elements only and name the first difference", "[twins]") {
  const twins::Inputs in = twins::make_inputs(twins::Profile::Mix, 2, 2, 2, 400, 128, 7);
  const cov_twin::Cache a = cov_twin::build(in.k, in.v, {10, 400}, 2, 400);
  cov_twin::Cache b = a;
  std::string log;
  CHECK(twins::compare(a.img, b.img, &log) == 0);
  b.img.arrays[cov_twin::kRecent].data.back() ^= 1;  // (b=1, h=1): L = 400 fills every ring slot, so live
  b.img.arrays[cov_twin::kSink].as<uint16_t>()[20 * 128 + 3] ^= 1;  // (b=0, h=0) token 20: beyond L = 10, not live
  CHECK(twins::compare(a.img, b.img, &log) == 1);
  CHECK(log.find("k_recent[bh=3][slot=255][ch=127]") != std::string::npos);
}

TEST_CASE("the decode twin is softmax attention", "[twins]") {
  // Two keys, scores 0 and log 3: weights 1/4, 3/4.
  const int D = 2;
  const std::vector<double> K = {0, 0, std::log(3.0), 0}, V = {1, 2, 5, -2};
  const double q[2] = {1, 0};
  double o[2];
  attn_twin::attention(q, K, V, 2, D, 1.0, o);
  CHECK(o[0] == Approx(0.25 * 1 + 0.75 * 5));
  CHECK(o[1] == Approx(0.25 * 2 + 0.75 * -2));
  attn_twin::attention(q, K, V, 0, D, 1.0, o);
  CHECK(o[0] == 0.0);
  const float got[2] = {float(1.01 * 4), 0.f};
  const double ref[2] = {4, 0};
  CHECK(attn_twin::rel_err(got, ref, 2) == Approx(0.01));
  // The FWHT twin: H_2 (1, 2) = (3, -1).
  const std::vector<float> y = fwht_twin::transform({1.f, 2.f}, 1, 2, false);
  CHECK(y == std::vector<float>{3.f, -1.f});
}

namespace {
// Sequence b of a batch as a batch of one (same rows, same row stride).
twins::Bf16Rows one_sequence(const twins::Bf16Rows& x, int b) {
  twins::Bf16Rows r;
  r.init(1, x.H, x.T, x.D);
  std::copy(x.row(b, 0, 0), x.row(b, 0, 0) + size_t(x.H) * x.T * x.D, r.x.begin());
  return r;
}
int64_t live_count(const twins::Array& a) { return std::count(a.live.begin(), a.live.end(), uint8_t(1)); }
}  // namespace

TEST_CASE("a batch's twin is each sequence's twin, and its live flags cover exactly the held tokens", "[twins]") {
  // The GPU driver's quant shape: lengths 0, 1 and around the residual block, appends' room in the rows.
  const std::vector<int> lens = {0, 1, 127, 128, 129, 333, 700};
  const int H = 3, D = 128, T = 800, B = int(lens.size());
  const twins::Inputs in = twins::make_inputs(twins::Profile::Stress, B, H, H, T, D, 11);
  for (int bits : {2, 4}) {
    const cov_twin::Cache cb = cov_twin::build(in.k, in.v, lens, bits, T);
    const omni_twin::Cache ob = omni_twin::build(in.k, in.v, lens, bits, T);
    int64_t cov_sink = 0, cov_recent = 0, cov_body = 0, omni_res = 0, omni_body = 0;
    for (int b = 0; b < B; ++b) {
      const int L = lens[size_t(b)];
      const twins::Bf16Rows k1 = one_sequence(in.k, b), v1 = one_sequence(in.v, b);
      const cov_twin::Cache c1 = cov_twin::build(k1, v1, {L}, bits, T);
      const omni_twin::Cache o1 = omni_twin::build(k1, v1, {L}, bits, T);
      int64_t bad = 0;
      for (int is_v = 0; is_v < 2; ++is_v)
        for (int h = 0; h < H; ++h)
          for (int t = 0; t < L; ++t)
            for (int c = 0; c < D; ++c) {
              bad += cov_twin::dequant<double>(cb, is_v, b, h, t, L, c) != cov_twin::dequant<double>(c1, is_v, 0, h, t, L, c);
              bad += omni_twin::dequant<double>(ob, is_v, b, h, t, L, c) != omni_twin::dequant<double>(o1, is_v, 0, h, t, L, c);
            }
      INFO("bits " << bits << " b " << b << " L " << L);
      CHECK(bad == 0);
      const int64_t nb = covfmt::body_tokens(L, 64, 256);
      cov_sink += std::min(L, 64);
      cov_recent += L - std::min(L, 64) - nb;
      cov_body += nb;
      omni_body += omnifmt::body_tokens(L);
      omni_res += L - omnifmt::body_tokens(L);
    }
    // Live elements per array: every held token's row in exactly one place, nothing else.
    using namespace cov_twin;
    const int64_t CB = D * bits / 8;
    CHECK(live_count(cb.img.arrays[kSink]) == cov_sink * H * D);
    CHECK(live_count(cb.img.arrays[kRecent + 1]) == cov_recent * H * D);
    CHECK(live_count(cb.img.arrays[kCodes]) == cov_body * H * CB);
    CHECK(live_count(cb.img.arrays[kParams + 1]) == cov_body * H);
    CHECK(live_count(ob.img.arrays[omni_twin::kRes]) == omni_res * H * D);
    CHECK(live_count(ob.img.arrays[omni_twin::kCodes + 1]) == omni_body * H * CB);
    CHECK(live_count(ob.img.arrays[omni_twin::kKParams]) == omni_body / 32 * H * D);
    CHECK(live_count(ob.img.arrays[omni_twin::kVParams]) == omni_body * H * (D / 32));
    CHECK(live_count(ob.img.arrays[omni_twin::kNorms]) == omni_body);
  }
}
