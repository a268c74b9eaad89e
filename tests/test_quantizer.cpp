// test_quantizer.cpp: CPU reference quantizers (quant_rules.h applied through quantize_block) on
// hand-made groups with hand-computed codes, packing, group layouts, clip search, Lloyd-Max, bit costs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "oscar/01_core/error.h"
#include "oscar/07_quantize/quantizer.h"

using namespace oscar;

namespace {

TensorQuant uniform_spec(int bits, int group, ScaleDtype dt = ScaleDtype::F32) {
  TensorQuant s;
  s.bits = bits;
  s.group = group;
  s.scale_dtype = dt;
  return s;
}

// One token holding the whole group (per-token, group = its length).
QuantizedBlock quantize_group(const std::vector<float>& x, TensorQuant s) {
  s.axis = QuantAxis::PerToken;
  s.group = static_cast<int>(x.size());
  return quantize_block(x.data(), 1, static_cast<int>(x.size()), s);
}

std::vector<float> dequant(const QuantizedBlock& q) {
  std::vector<float> out(q.codes.size());
  dequantize_block(q, out.data());
  return out;
}

std::vector<uint8_t> codes_of(const QuantizedBlock& q) { return q.codes; }

// The block's parameters in its order: scale[i] and zero[i] of entry i.
void check_params(const QuantizedBlock& q, const std::vector<float>& scale, const std::vector<float>& zero) {
  REQUIRE(q.params.size() == scale.size());
  for (size_t i = 0; i < scale.size(); ++i) {
    INFO("parameters " << i);
    CHECK(q.params[i].scale == scale[i]);
    CHECK(q.params[i].zero == zero[i]);
  }
}

double sq_error(const std::vector<float>& x, const std::vector<float>& y) {
  double e = 0;
  for (size_t i = 0; i < x.size(); ++i) e += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
  return e;
}

double sq_norm(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += double(v) * v;
  return s;
}

std::vector<float> gaussian(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

}  // namespace

TEST_CASE("asymmetric groups by hand", "[quantizer]") {
  SECTION("0..3 maps onto the 2-bit codes exactly") {
    const auto q = quantize_group({0, 1, 2, 3}, uniform_spec(2, 4));
    REQUIRE(q.params.size() == 1);
    CHECK(q.params[0].scale == 1.0f);
    CHECK(q.params[0].zero == 0.0f);
    CHECK(codes_of(q) == std::vector<uint8_t>{0, 1, 2, 3});
    CHECK(dequant(q) == std::vector<float>{0, 1, 2, 3});
    CHECK(q.clip_used == std::vector<float>{1.0f});
  }
  SECTION("range [-1, 2]: scale 1, zero -1, 1.5 rounds to the even code 2") {
    const std::vector<float> x{-1.0f, 0.2f, 0.5f, 2.0f};
    const auto q = quantize_group(x, uniform_spec(2, 4));
    CHECK(q.params[0].scale == 1.0f);
    CHECK(q.params[0].zero == -1.0f);
    CHECK(codes_of(q) == std::vector<uint8_t>{0, 1, 2, 3});  // 0, 1.2, 1.5, 3
    CHECK(dequant(q) == std::vector<float>{-1, 0, 1, 2});
    TensorQuant away = uniform_spec(2, 4);
    away.rounding = Rounding::HalfAway;
    CHECK(codes_of(quantize_group(x, away)) == std::vector<uint8_t>{0, 1, 2, 3});  // 1.5 -> 2 as well
  }
  SECTION("half-even and half-away differ on 0.5 and 2.5") {
    const std::vector<float> x{0.0f, 0.5f, 2.5f, 3.0f};  // scale 1, zero 0
    CHECK(codes_of(quantize_group(x, uniform_spec(2, 4))) == std::vector<uint8_t>{0, 0, 2, 3});
    TensorQuant away = uniform_spec(2, 4);
    away.rounding = Rounding::HalfAway;
    CHECK(codes_of(quantize_group(x, away)) == std::vector<uint8_t>{0, 1, 3, 3});
  }
  SECTION("an fp16 scale is rounded before codes are computed") {
    // 2-bit range [0, 0.3]: scale 0.1, stored in fp16 as 0.0999755859375; 0.14999 / that = 1.50027.
    const std::vector<float> x{0.0f, 0.14999f, 0.3f};
    const auto h = quantize_group(x, uniform_spec(2, 3, ScaleDtype::F16));
    CHECK(h.params[0].scale == 0.0999755859375f);
    CHECK(codes_of(h) == std::vector<uint8_t>{0, 2, 3});
    CHECK(dequant(h)[2] == 0.2999267578125f);  // 3 * 0.0999755859375, exact
    const auto f = quantize_group(x, uniform_spec(2, 3, ScaleDtype::F32));
    CHECK(f.params[0].scale == Approx(0.1f).epsilon(1e-7));
    CHECK(codes_of(f) == std::vector<uint8_t>{0, 1, 3});  // 1.4999 rounds down with the fp32 scale
    const auto b = quantize_group(x, uniform_spec(2, 3, ScaleDtype::BF16));
    CHECK(b.params[0].scale == 0.10009765625f);  // bf16 keeps 8 significant bits
  }
  SECTION("clip ratio 0.5 halves the range and clamps the extremes") {
    TensorQuant s = uniform_spec(2, 4);
    s.clip_ratio = 0.5f;
    const auto q = quantize_group({-6, -1, 1, 6}, s);  // lo -3, hi 3: scale 2, zero -3
    CHECK(q.params[0].scale == 2.0f);
    CHECK(q.params[0].zero == -3.0f);
    CHECK(codes_of(q) == std::vector<uint8_t>{0, 1, 2, 3});  // -1.5 and 4.5 clamp to 0 and 3
    CHECK(dequant(q) == std::vector<float>{-3, -1, 1, 3});
    CHECK(q.clip_used == std::vector<float>{0.5f});
  }
  SECTION("a constant group has scale 0, code 0 and dequantizes to the constant") {
    const auto q = quantize_group({0.75f, 0.75f, 0.75f, 0.75f}, uniform_spec(2, 4, ScaleDtype::F16));
    CHECK(q.params[0].scale == 0.0f);
    CHECK(q.params[0].zero == 0.75f);
    CHECK(codes_of(q) == std::vector<uint8_t>{0, 0, 0, 0});
    CHECK(dequant(q) == std::vector<float>{0.75f, 0.75f, 0.75f, 0.75f});
  }
}

TEST_CASE("symmetric groups by hand", "[quantizer]") {
  TensorQuant s = uniform_spec(2, 4);
  s.symmetric = true;
  SECTION("2-bit symmetric has levels {-1, 0, 1} * absmax, codes q + 2") {
    const auto q = quantize_group({-0.8f, 0.1f, 0.3f, 0.6f}, s);  // scale 0.8; q = -1, 0, 0, 1
    CHECK(q.params[0].scale == 0.8f);
    CHECK(q.params[0].zero == 0.0f);
    CHECK(codes_of(q) == std::vector<uint8_t>{1, 2, 2, 3});
    CHECK(dequant(q) == std::vector<float>{-0.8f, 0.0f, 0.0f, 0.8f});
  }
  SECTION("3-bit symmetric: scale absmax / 3, codes q + 4") {
    s.bits = 3;
    const auto q = quantize_group({-3.0f, -1.4f, 0.9f, 1.5f}, s);  // q = -3, -1, 1, 2 (1.5 -> even 2)
    CHECK(q.params[0].scale == 1.0f);
    CHECK(codes_of(q) == std::vector<uint8_t>{1, 3, 5, 6});
    CHECK(dequant(q) == std::vector<float>{-3, -1, 1, 2});
  }
  SECTION("an all-zero group gets the mid code and dequantizes to 0") {
    const auto q = quantize_group({0, 0, 0, 0}, s);
    CHECK(codes_of(q) == std::vector<uint8_t>{2, 2, 2, 2});
    CHECK(dequant(q) == std::vector<float>{0, 0, 0, 0});
  }
}

TEST_CASE("quant_rules functions agree with the hand values used above", "[quantizer]") {
  const GroupParams p = group_params(-1.0f, 2.0f, 2, false, 1.0f, ScaleDtype::F32);
  CHECK(p.scale == 1.0f);
  CHECK(p.zero == -1.0f);
  CHECK(quantize_value(0.5f, p, 2, false, Rounding::HalfEven) == 2);
  CHECK(quantize_value(5.0f, p, 2, false, Rounding::HalfEven) == 3);   // clamped
  CHECK(quantize_value(-9.0f, p, 2, false, Rounding::HalfEven) == 0);  // clamped
  CHECK(dequantize_value(2, p, 2, false) == 1.0f);
  const GroupParams s = group_params(-0.5f, 4.0f, 4, true, 1.0f, ScaleDtype::F32);  // scale 4 / 7
  CHECK(s.scale == 4.0f / 7.0f);
  CHECK(quantize_value(-4.0f, s, 4, true, Rounding::HalfEven) == 1);  // q = -7
  CHECK(dequantize_value(15, s, 4, true) == 4.0f);                     // q = 7: 7 * (4/7) rounds to 4
}

TEST_CASE("codes pack into a little-endian bit stream", "[quantizer]") {
  SECTION("2 bits: code 4k in the lowest bits of byte k") {
    const uint8_t c[] = {1, 2, 3, 0, 3};
    CHECK(pack_row(c, 5, 2) == std::vector<uint8_t>{0x39, 0x03});  // 0b00'11'10'01, then 0b11
  }
  SECTION("4 bits: code 2k in the low nibble") {
    const uint8_t c[] = {0xA, 0x5};
    CHECK(pack_row(c, 2, 4) == std::vector<uint8_t>{0x5A});
  }
  SECTION("3 bits: a code straddling two bytes") {
    // bits 0-2: 111, bits 3-5: 000, bits 6-8: 101 -> byte 0 = 0b01000111, byte 1 = 0b1
    const uint8_t c[] = {7, 0, 5};
    CHECK(pack_row(c, 3, 3) == std::vector<uint8_t>{0x47, 0x01});
  }
  SECTION("3 bits: random codes round-trip, and pack_row matches pack_code") {
    std::mt19937 rng(7);
    std::vector<uint8_t> codes(100);
    for (auto& c : codes) c = static_cast<uint8_t>(rng() % 8);
    const auto packed = pack_row(codes.data(), 100, 3);
    REQUIRE(packed.size() == 38);  // ceil(300 / 8)
    std::vector<uint8_t> manual(38, 0);
    for (int i = 0; i < 100; ++i) pack_code(manual.data(), i, codes[i], 3);
    CHECK(packed == manual);
    for (int i = 0; i < 100; ++i) REQUIRE(unpack_code(packed.data(), i, 3) == codes[i]);
  }
  SECTION("a code too wide for the bit width is refused") {
    const uint8_t c[] = {4};
    CHECK_THROWS_WITH(pack_row(c, 1, 2), Catch::Contains("does not fit in 2 bits"));
  }
}

TEST_CASE("per-token and per-channel group layouts on a 4 x 2 block", "[quantizer]") {
  // Rows are tokens: [0 3] [6 9] [2 8] [5 2]; 2-bit asymmetric, fp32 parameters.
  const std::vector<float> x{0, 3, 6, 9, 2, 8, 5, 2};
  SECTION("per-token, group 2: params [token][group]") {
    const auto q = quantize_block(x.data(), 4, 2, uniform_spec(2, 2));
    check_params(q, {1, 1, 2, 1}, {0, 6, 2, 2});
    CHECK(codes_of(q) == std::vector<uint8_t>{0, 3, 0, 3, 0, 3, 3, 0});
    CHECK(dequant(q) == x);
  }
  SECTION("per-channel, group 2: params [token group][channel]") {
    TensorQuant s = uniform_spec(2, 2);
    s.axis = QuantAxis::PerChannel;
    const auto q = quantize_block(x.data(), 4, 2, s);
    // (tg 0, c 0) {0, 6}; (tg 0, c 1) {3, 9}; (tg 1, c 0) {2, 5}; (tg 1, c 1) {8, 2}
    check_params(q, {2, 2, 1, 2}, {0, 3, 2, 2});
    CHECK(codes_of(q) == std::vector<uint8_t>{0, 0, 3, 3, 0, 3, 3, 0});
    CHECK(dequant(q) == x);
    CHECK(q.clip_used.size() == 4);
  }
  SECTION("per-channel, group 4: interior values get interior codes") {
    TensorQuant s = uniform_spec(2, 4);
    s.axis = QuantAxis::PerChannel;
    const auto q = quantize_block(x.data(), 4, 2, s);
    // channel 0 {0, 6, 2, 5}: scale 2, zero 0 -> 0, 3, 1, 2 (2.5 -> even 2)
    // channel 1 {3, 9, 8, 2}: scale 7/3, zero 2 -> 0.43, 3, 2.57, 0 -> 0, 3, 3, 0
    REQUIRE(q.params.size() == 2);
    CHECK(q.params[0].scale == 2.0f);
    CHECK(q.params[1].zero == 2.0f);
    CHECK(codes_of(q) == std::vector<uint8_t>{0, 0, 3, 3, 1, 3, 2, 0});
  }
}

TEST_CASE("per-channel codes are quant_rules codes of each token group of a channel", "[quantizer]") {
  const int T = 64, D = 16, G = 32;
  const auto x = gaussian(T * D, 3);
  TensorQuant s = uniform_spec(2, G, ScaleDtype::F16);
  s.axis = QuantAxis::PerChannel;
  const auto q = quantize_block(x.data(), T, D, s);
  REQUIRE(q.params.size() == (T / G) * D);
  for (int tg = 0; tg < T / G; ++tg)
    for (int c = 0; c < D; ++c) {
      float mn = x[tg * G * D + c], mx = mn;
      for (int t = tg * G; t < (tg + 1) * G; ++t) {
        mn = std::min(mn, x[t * D + c]);
        mx = std::max(mx, x[t * D + c]);
      }
      const GroupParams p = group_params(mn, mx, 2, false, 1.0f, ScaleDtype::F16);
      REQUIRE(q.params[tg * D + c].scale == p.scale);
      REQUIRE(q.params[tg * D + c].zero == p.zero);
      for (int t = tg * G; t < (tg + 1) * G; ++t)
        REQUIRE(q.codes[t * D + c] == quantize_value(x[t * D + c], p, 2, false, Rounding::HalfEven));
    }
}

TEST_CASE("error decreases with bits on Gaussian data", "[quantizer]") {
  const int T = 64, D = 128;
  const auto x = gaussian(T * D, 11);
  std::vector<double> rel;
  for (int bits : {2, 3, 4, 8}) {
    const auto q = quantize_block(x.data(), T, D, uniform_spec(bits, 32, ScaleDtype::F16));
    rel.push_back(sq_error(x, dequant(q)) / sq_norm(x));
  }
  CHECK(rel[0] > rel[1]);
  CHECK(rel[1] > rel[2]);
  CHECK(rel[2] > rel[3]);
  CHECK(rel[0] < 0.3);
  CHECK(std::sqrt(rel[3]) < 1e-2);  // ||x - x^|| / ||x|| at 8 bits
}

TEST_CASE("clip search lowers the error of a group with an outlier", "[quantizer]") {
  auto x = gaussian(128, 5);
  x[17] = 20.0f;
  TensorQuant s = uniform_spec(2, 128);
  const double e_full = sq_error(x, dequant(quantize_group(x, s)));
  s.clip_search = true;
  const auto q = quantize_group(x, s);
  const double e_search = sq_error(x, dequant(q));
  REQUIRE(q.clip_used.size() == 1);
  CHECK(q.clip_used[0] < 1.0f);
  CHECK(q.clip_used[0] >= 0.5f);
  CHECK(e_search <= e_full);
  CHECK(e_search < 0.9 * e_full);
  // It is the best ratio on the grid: no fixed clip ratio does better.
  s.clip_search = false;
  for (int k = 0; k < 26; ++k) {
    s.clip_ratio = static_cast<float>((100 - 2 * k) / 100.0);
    CHECK(e_search <= sq_error(x, dequant(quantize_group(x, s))));
  }
  const GroupParams p = group_params(*std::min_element(x.begin(), x.end()),
                                     *std::max_element(x.begin(), x.end()), 2, false, q.clip_used[0],
                                     ScaleDtype::F32);
  CHECK(q.params[0].scale == p.scale);
}

TEST_CASE("clip search ties keep the larger ratio; per-channel gets one ratio per group", "[quantizer]") {
  TensorQuant s = uniform_spec(2, 4);
  s.clip_search = true;
  s.clip_ratio = 0.93f;  // off the grid: tried as well
  CHECK(quantize_group({0, 0, 0, 0}, s).clip_used == std::vector<float>{1.0f});   // every ratio: error 0
  CHECK(quantize_group({0, 1, 2, 3}, s).clip_used == std::vector<float>{1.0f});   // exact at 1.0 only
  s.axis = QuantAxis::PerChannel;
  const auto x = gaussian(8 * 16, 9);
  const auto q = quantize_block(x.data(), 8, 16, s);
  CHECK(q.clip_used.size() == 2 * 16);
  for (float c : q.clip_used) CHECK((c == 0.93f || std::fabs(c * 50.0f - std::round(c * 50.0f)) < 1e-4f));
}

TEST_CASE("Lloyd-Max codebooks of the standard normal", "[quantizer][lloyd]") {
  const auto& b1 = lloyd_max_normal(1);
  REQUIRE(b1.levels.size() == 2);
  CHECK(b1.levels[1] == Approx(std::sqrt(2.0 / std::numbers::pi)).margin(1e-9));
  CHECK(b1.thresholds == std::vector<double>{0.0});
  const auto& b2 = lloyd_max_normal(2);
  REQUIRE(b2.levels.size() == 4);
  CHECK(b2.levels[2] == Approx(0.4528).margin(1e-3));
  CHECK(b2.levels[3] == Approx(1.5104).margin(1e-3));
  CHECK(b2.thresholds[2] == Approx(0.9816).margin(1e-3));
  const auto& b3 = lloyd_max_normal(3);
  REQUIRE(b3.levels.size() == 8);
  const double l3[] = {0.2451, 0.7560, 1.3440, 2.1520};
  for (int i = 0; i < 4; ++i) CHECK(b3.levels[4 + i] == Approx(l3[i]).margin(1e-3));
  const auto& b4 = lloyd_max_normal(4);
  REQUIRE(b4.levels.size() == 16);
  CHECK(b4.levels[8] == Approx(0.1284).margin(1e-3));
  CHECK(b4.levels[15] == Approx(2.7326).margin(1e-3));
  // Distortion E[X^2] - E[Q^2] = 1 - sum level^2 * P(cell), against the published values.
  const double published[] = {0.3634, 0.1175, 0.03454, 0.009497};
  for (int b = 1; b <= 4; ++b) {
    const auto& cb = lloyd_max_normal(b);
    const size_t L = cb.levels.size();
    REQUIRE(cb.thresholds.size() == L - 1);
    double eq2 = 0;
    for (size_t i = 0; i < L; ++i) {
      CHECK(cb.levels[i] == -cb.levels[L - 1 - i]);
      if (i + 1 < L) CHECK(cb.thresholds[i] == Approx(0.5 * (cb.levels[i] + cb.levels[i + 1])));
      if (i > 0) CHECK(cb.levels[i] > cb.levels[i - 1]);
      const double lo = i == 0 ? -INFINITY : cb.thresholds[i - 1];
      const double hi = i + 1 == L ? INFINITY : cb.thresholds[i];
      const double p = 0.5 * (std::erfc(-hi / std::sqrt(2.0)) - std::erfc(-lo / std::sqrt(2.0)));
      eq2 += cb.levels[i] * cb.levels[i] * p;
    }
    CHECK(1.0 - eq2 == Approx(published[b - 1]).epsilon(2e-3));
  }
  CHECK(&lloyd_max_normal(2) == &b2);  // cached
  CHECK_THROWS_WITH(lloyd_max_normal(5), Catch::Contains("supports 1..4 bits"));
  CHECK_THROWS_AS(lloyd_max_normal(0), Error);
}

TEST_CASE("LloydMax blocks by hand", "[quantizer][lloyd]") {
  // dim 4: sigma = 0.5. Token 0 = [3 0 -4 0] (norm 5, u = [0.6 0 -0.8 0]); token 1 = 0; token 2 = [0.1 0 0 0].
  const std::vector<float> x{3, 0, -4, 0, 0, 0, 0, 0, 0.1f, 0, 0, 0};
  TensorQuant s;
  s.codebook = Codebook::LloydMax;
  s.bits = 2;
  s.scale_dtype = ScaleDtype::F16;
  const auto q = quantize_block(x.data(), 3, 4, s);
  CHECK(q.params.empty());
  CHECK(q.clip_used.empty());
  CHECK(q.token_norms == std::vector<float>{5.0f, 0.0f, 0.0999755859375f});
  // thresholds * sigma: -0.4908, 0, 0.4908; code = thresholds strictly below u
  CHECK(codes_of(q) == std::vector<uint8_t>{3, 1, 0, 1, 0, 0, 0, 0, 3, 1, 1, 1});
  const auto y = dequant(q);
  const double hi = 1.5104 * 0.5 * 5, lo = 0.4528 * 0.5 * 5;
  CHECK(y[0] == Approx(hi).epsilon(1e-3));
  CHECK(y[1] == Approx(-lo).epsilon(1e-3));
  CHECK(y[2] == Approx(-hi).epsilon(1e-3));
  for (int c = 4; c < 8; ++c) CHECK(y[c] == 0.0f);
  CHECK(y[8] == Approx(1.5104 * 0.5 * 0.0999755859375).epsilon(1e-3));
  s.bits = 1;
  const auto q1 = quantize_block(x.data(), 3, 4, s);
  CHECK(codes_of(q1) == std::vector<uint8_t>{1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0});
  CHECK(dequant(q1)[0] == Approx(std::sqrt(2.0 / std::numbers::pi) * 2.5).epsilon(1e-6));
}

TEST_CASE("LloydMax distortion on random-direction vectors matches theory", "[quantizer][lloyd]") {
  // Gaussian vectors are rotation invariant, as the rotated keys the caller passes are assumed to be.
  const int T = 2048, D = 128;
  const auto x = gaussian(size_t(T) * D, 21);
  TensorQuant s;
  s.codebook = Codebook::LloydMax;
  s.scale_dtype = ScaleDtype::F16;
  s.bits = 2;
  const double r2 = sq_error(x, dequant(quantize_block(x.data(), T, D, s))) / sq_norm(x);
  CHECK(r2 == Approx(0.1175).margin(0.02));
  s.bits = 3;
  const double r3 = sq_error(x, dequant(quantize_block(x.data(), T, D, s))) / sq_norm(x);
  CHECK(r3 == Approx(0.03454).margin(0.008));
}

TEST_CASE("block_bits by hand", "[quantizer]") {
  TensorQuant kivi = uniform_spec(2, 32, ScaleDtype::F16);
  kivi.axis = QuantAxis::PerChannel;
  BitCost c = block_bits(kivi, 64, 128);
  CHECK(c.payload == 16384);  // 64 * 128 * 2
  CHECK(c.metadata == 8192);  // (64 / 32) * 128 groups * 2 params * 16 bits
  c = block_bits(uniform_spec(2, 128, ScaleDtype::F16), 1, 128);
  CHECK(c.payload == 256);
  CHECK(c.metadata == 32);
  CHECK(c.total() / 128 == 2.25);
  TensorQuant sym = uniform_spec(4, 32, ScaleDtype::BF16);
  sym.symmetric = true;
  c = block_bits(sym, 64, 128);  // 256 groups * 1 param * 16 bits
  CHECK(c.payload == 32768);
  CHECK(c.metadata == 4096);
  CHECK(block_bits(uniform_spec(2, 64, ScaleDtype::F32), 64, 128).metadata == 128 * 2 * 32);
  TensorQuant lm;
  lm.codebook = Codebook::LloydMax;
  lm.bits = 3;
  c = block_bits(lm, 64, 128);  // one fp16 norm per token
  CHECK(c.payload == 64 * 128 * 3);
  CHECK(c.metadata == 64 * 16);
  c = block_bits(TensorQuant{}, 64, 128);  // bits 16: not quantized
  CHECK(c.payload == 64 * 128 * 16);
  CHECK(c.metadata == 0);
}

TEST_CASE("validate_spec and quantize_block refuse bad specs and inputs with useful messages", "[quantizer]") {
  TensorQuant s = uniform_spec(2, 32);
  CHECK_NOTHROW(validate_spec(s, 64, 128));
  CHECK_NOTHROW(validate_spec(TensorQuant{}, 40, 128));  // bits 16
  s.bits = 0;
  CHECK_THROWS_WITH(validate_spec(s, 64, 128), Catch::Contains("bits 0 is out of range; use 1..8"));
  s.bits = 9;
  CHECK_THROWS_WITH(validate_spec(s, 64, 128), Catch::Contains("bits 9 is out of range"));
  s = uniform_spec(1, 32);
  s.symmetric = true;
  CHECK_THROWS_WITH(validate_spec(s, 64, 128), Catch::Contains("symmetric quantization needs at least 2 bits"));
  s = uniform_spec(2, 48);
  CHECK_THROWS_WITH(validate_spec(s, 64, 128),
                    Catch::Contains("group size 48 does not divide head_dim 128; use a divisor of 128"));
  s.group = 0;
  CHECK_THROWS_WITH(validate_spec(s, 64, 128), Catch::Contains("group size 0 must be positive"));
  s = uniform_spec(2, 32);
  s.axis = QuantAxis::PerChannel;
  CHECK_THROWS_WITH(validate_spec(s, 40, 128),
                    Catch::Contains("per-channel group size 32 does not divide the block's 40 tokens"));
  CHECK_NOTHROW(validate_spec(s, 64, 100));  // per-channel groups need not divide head_dim
  s = uniform_spec(2, 32);
  s.clip_ratio = 0.0f;
  CHECK_THROWS_WITH(validate_spec(s, 64, 128), Catch::Contains("clip ratio 0 is outside (0, 1]"));
  s.clip_ratio = 1.5f;
  CHECK_THROWS_WITH(validate_spec(s, 64, 128), Catch::Contains("clip ratio 1.5 is outside (0, 1]"));
  CHECK_THROWS_AS(validate_spec(s, 64, 128), Error);
  TensorQuant lm;
  lm.codebook = Codebook::LloydMax;
  lm.bits = 5;
  CHECK_THROWS_WITH(validate_spec(lm, 64, 128), Catch::Contains("LloydMax codebook supports 1..4 bits (got 5)"));
  lm.bits = 2;
  lm.group = 48;  // ignored by LloydMax
  CHECK_NOTHROW(validate_spec(lm, 64, 128));

  const std::vector<float> x{0, 1, 2, 3};
  CHECK_THROWS_WITH(quantize_block(x.data(), 1, 4, TensorQuant{}), Catch::Contains("not quantized"));
  const std::vector<float> bad{0, NAN, 2, 3};
  CHECK_THROWS_WITH(quantize_block(bad.data(), 1, 4, uniform_spec(2, 4)),
                    Catch::Contains("token 0, channel 1 is not finite"));
  const std::vector<float> huge{0, 1e6f, 2, 3};  // scale 333333 overflows fp16
  CHECK_THROWS_WITH(quantize_block(huge.data(), 1, 4, uniform_spec(2, 4, ScaleDtype::F16)),
                    Catch::Contains("overflow f16"));
  CHECK_NOTHROW(quantize_block(huge.data(), 1, 4, uniform_spec(2, 4, ScaleDtype::BF16)));
}

// ---- OSCAR's quantile clip and OScaR's / QuaRot's integer zero point (quant_rules.h) ----

namespace {
// The quantile clip by brute force: a full sort of |x|, element k (0-based), then the clamp.
std::vector<float> brute_quantile_clamp(std::vector<float> row, float ratio) {
  std::vector<float> mag(row.size());
  for (size_t i = 0; i < row.size(); ++i) mag[i] = std::fabs(row[i]);
  std::sort(mag.begin(), mag.end());
  const size_t k = std::min(row.size() - 1, static_cast<size_t>(static_cast<double>(ratio) * static_cast<double>(row.size())));
  const float thr = mag[k];
  for (float& v : row)
    if (std::fabs(v) > thr) v = v < 0 ? -thr : thr;
  return row;
}
}  // namespace

TEST_CASE("the quantile clip index is OSCAR's int(ratio * head_dim)", "[quantizer][quantile]") {
  CHECK(quantile_clip_index(0.96f, 64) == 61);   // the 2 largest |x| clamp to the 3rd largest
  CHECK(quantile_clip_index(0.92f, 64) == 58);   // the 5 largest to the 6th
  CHECK(quantile_clip_index(0.96f, 128) == 122);
  CHECK(quantile_clip_index(0.92f, 256) == 235);
  CHECK(quantile_clip_index(1.0f, 64) == 63);    // the largest itself: no clip
  CHECK(quantile_clip_index(0.001f, 64) == 0);
  // float32 ratios give float64's index for every two-decimal ratio on power-of-two rows (OSCAR's Python uses float64)
  for (int n = 8; n <= 512; n *= 2)
    for (int c = 1; c <= 100; ++c) CHECK(quantile_clip_index(static_cast<float>(c / 100.0), n) == std::min(n - 1, static_cast<int>(c / 100.0 * n)));
}

TEST_CASE("quantile clip against a brute-force sort on random rows, ties, one-signed and constant rows", "[quantizer][quantile]") {
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(-3, 3);
  TensorQuant s = uniform_spec(2, 64, ScaleDtype::F16);
  s.clip_mode = ClipMode::Quantile;
  s.rounding = Rounding::HalfAway;
  for (int trial = 0; trial < 400; ++trial) {
    const int d = trial % 3 == 0 ? 64 : (trial % 3 == 1 ? 128 : 32);
    s.group = d;
    s.clip_ratio = trial % 2 ? 0.96f : 0.92f;
    std::vector<float> x(static_cast<size_t>(4 * d));
    for (size_t i = 0; i < x.size(); ++i) {
      switch (trial % 5) {
        case 0: x[i] = g(rng); break;                                       // generic
        case 1: x[i] = static_cast<float>(small(rng));  break;              // many ties of |x| (and of +-)
        case 2: x[i] = -std::fabs(g(rng)) - 0.5f; break;                    // negative only
        case 3: x[i] = 1.25f; break;                                        // constant
        default: x[i] = g(rng) * (i % 7 == 0 ? 40.0f : 1.0f); break;        // outliers
      }
    }
    const QuantizedBlock q = quantize_block(x.data(), 4, d, s);
    for (int t = 0; t < 4; ++t) {
      const std::vector<float> row(x.begin() + t * d, x.begin() + (t + 1) * d);
      const std::vector<float> c = brute_quantile_clamp(row, s.clip_ratio);
      const float mn = *std::min_element(c.begin(), c.end()), mx = *std::max_element(c.begin(), c.end());
      const GroupParams p = group_params(mn, mx, 2, false, 1.0f, ScaleDtype::F16);
      INFO("trial " << trial << " token " << t);
      REQUIRE(q.params[t].scale == p.scale);
      REQUIRE(q.params[t].zero == p.zero);
      for (int i = 0; i < d; ++i) {
        // half away from zero on (x - min) / scale >= 0 is OSCAR's floor(v + 0.5)
        const float v = (c[i] - p.zero) / p.scale;
        const int want = p.scale > 0 ? std::clamp(static_cast<int>(std::floor(v + 0.5f)), 0, 3) : 0;
        REQUIRE(q.codes[t * d + i] == want);
      }
    }
  }
  // The clamp replaces exactly the values above the threshold: at ratio 0.96 on 64 values, the two largest |x|.
  std::vector<float> row(64);
  for (int i = 0; i < 64; ++i) row[i] = static_cast<float>(i) * (i % 2 ? -1.0f : 1.0f);
  const std::vector<float> c = brute_quantile_clamp(row, 0.96f);
  CHECK(c[63] == -61.0f);
  CHECK(c[62] == 61.0f);
  CHECK(c[61] == -61.0f);
  CHECK(c[60] == 60.0f);
  s.group = 64;
  s.clip_ratio = 0.96f;
  const QuantizedBlock q = quantize_block(row.data(), 1, 64, s);
  CHECK(q.params[0].zero == -61.0f);  // min of the clamped row
  // NaN is refused before any clip
  row[5] = NAN;
  CHECK_THROWS_WITH(quantize_block(row.data(), 1, 64, s), Catch::Contains("token 0, channel 5 is not finite"));
  // the quantile clip is per token row, whatever the groups: per-token groups of 32 share their row's threshold
  std::vector<float> two(64, 1.0f);
  two[3] = 100.0f;  // the largest of the row, in the first group: clamped to 1
  s.group = 32;
  const QuantizedBlock q2 = quantize_block(two.data(), 1, 64, s);
  CHECK(q2.params[0].scale == 0.0f);  // the first group is constant once clamped
}

TEST_CASE("integer zero point against the direct formula (OScaR, QuaRot)", "[quantizer][zero-point]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int bits : {2, 3, 4})
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<float> x(32);
      const float shift = trial % 4 == 0 ? 5.0f : (trial % 4 == 1 ? -5.0f : 0.0f);  // groups of one sign: z outside [0, 2^b - 1]
      for (float& v : x) v = g(rng) + shift;
      TensorQuant s = uniform_spec(bits, 32, ScaleDtype::F16);
      s.zero_point = ZeroPoint::Integer;
      const QuantizedBlock q = quantize_group(x, s);
      const float mn = *std::min_element(x.begin(), x.end()), mx = *std::max_element(x.begin(), x.end());
      const float scale = round_to_half((mx - mn) / static_cast<float>((1 << bits) - 1));
      const float z = std::nearbyint(-mn / scale);
      INFO("bits " << bits << " trial " << trial);
      REQUIRE(q.params[0].scale == scale);
      REQUIRE(q.params[0].zero == round_to_half(0.0f - z * scale));
      const std::vector<float> y = dequant(q);
      for (size_t i = 0; i < x.size(); ++i) {
        const float c = std::clamp(std::nearbyint(x[i] / scale) + z, 0.0f, static_cast<float>((1 << bits) - 1));
        REQUIRE(q.codes[i] == static_cast<uint8_t>(c));
        REQUIRE(y[i] == c * scale + q.params[0].zero);
        CHECK(std::fabs(y[i] - (c - z) * scale) <= std::fabs(z * scale) * 1e-3f);  // (code - z) * scale up to the fp16 zero
      }
    }
  // 0 is a grid point: a group with zeros gives them back exactly, unlike the float zero point
  const std::vector<float> x{-1.0f, 0.0f, 0.0f, 2.2f};
  TensorQuant s = uniform_spec(2, 4, ScaleDtype::F32);
  s.zero_point = ZeroPoint::Integer;
  CHECK(dequant(quantize_group(x, s))[1] == 0.0f);
  s.zero_point = ZeroPoint::Float;
  CHECK(dequant(quantize_group(x, s))[1] != 0.0f);
  // QuaRot's range with 0: an all-positive group still maps 0 to code 0 and its minimum is not the range's
  s.zero_point = ZeroPoint::Integer;
  s.range_with_zero = true;
  const std::vector<float> pos{3.0f, 4.0f, 5.0f, 6.0f};
  const QuantizedBlock qp = quantize_group(pos, s);
  CHECK(qp.params[0].scale == 2.0f);  // (6 - 0) / 3
  CHECK(qp.params[0].zero == 0.0f);
  CHECK(codes_of(qp) == std::vector<uint8_t>{2, 2, 2, 3});  // 1.5 -> 2, 2, 2.5 -> 2, 3 (half to even)
  // a constant group keeps its value: code 0, zero = the value
  s.range_with_zero = false;
  const QuantizedBlock qc = quantize_group({0.7f, 0.7f, 0.7f, 0.7f}, s);
  CHECK(qc.params[0].scale == 0.0f);
  CHECK(dequant(qc) == std::vector<float>{0.7f, 0.7f, 0.7f, 0.7f});
  // refused combinations
  s.symmetric = true;
  CHECK_THROWS_WITH(validate_spec(s, 4, 4), Catch::Contains("integer zero point applies to asymmetric"));
  TensorQuant qs = uniform_spec(2, 4);
  qs.clip_mode = ClipMode::Quantile;
  qs.clip_search = true;
  CHECK_THROWS_WITH(validate_spec(qs, 4, 4), Catch::Contains("quantile clip applies to uniform codes without clip search"));
}
