// test_quant_recip.cpp: the kernels' reciprocal division (oscar::div_by_recip in oscar/quant_rules.h) against the
// IEEE division it replaces: for every positive finite fp16 scale (the stored scales of both kernel formats),
// random numerators over every exponent the kernels meet (|x - zero| from 2^-40 to 2^20, both signs, exact
// multiples of the scale and their half-way points), the quotient bit for bit (a zero up to its sign), and the codes of
// quantize_value_recip equal to quantize_value's.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "oscar/float_formats.h"
#include "oscar/quant_rules.h"

using namespace oscar;

namespace {
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
}  // namespace

TEST_CASE("the reciprocal division equals the IEEE division for every fp16 scale", "[quant][recip]") {
  std::mt19937 rng(20261124);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-40, 20), sign(0, 1), mult(0, 64);
  int64_t checked = 0, differ = 0, code_differ = 0;
  for (uint32_t h = 1; h < 0x7c00; ++h) {  // every positive finite fp16 (subnormals included)
    const float s = half_bits_to_float(static_cast<uint16_t>(h));
    const float r = 1.0f / s;
    for (int i = 0; i < 400; ++i) {
      float d;
      switch (i % 4) {
        case 0: d = std::ldexp(mant(rng), expo(rng)); break;             // any magnitude
        case 1: d = s * static_cast<float>(mult(rng)); break;             // multiples of the scale
        case 2: d = s * (static_cast<float>(mult(rng)) + 0.5f); break;    // half-way points (ties of the code)
        default: d = s * std::ldexp(mant(rng), expo(rng) % 4); break;     // quotients near 1..16
      }
      if (sign(rng)) d = -d;
      ++checked;
      const float want = d / s, got = div_by_recip(d, s, r);
      // a zero quotient may differ in sign only (-0 / s is -0, the fma correction gives +0): equal codes
      if (bits_of(want) != bits_of(got) && !(want == 0.0f && got == 0.0f) && !(std::isnan(want) && std::isnan(got))) {
        if (++differ <= 5) FAIL_CHECK("scale " << s << " d " << d << ": IEEE " << want << ", reciprocal " << got);
      }
      const GroupParams p{s, 0.0f};
      for (int bits : {2, 4})
        if (quantize_value(d, p, bits, false, Rounding::HalfEven) != quantize_value_recip(d, p, r, bits, Rounding::HalfEven)) ++code_differ;
    }
  }
  INFO(checked << " quotients checked");
  CHECK(checked > 12000000);
  CHECK(differ == 0);
  CHECK(code_differ == 0);
}

TEST_CASE("quantize_value_recip keeps the constant-group and clamp rules", "[quant][recip]") {
  const GroupParams constant{0.0f, 1.5f};
  CHECK(quantize_value_recip(3.0f, constant, INFINITY, 2, Rounding::HalfEven) == 0);
  const GroupParams p = group_params(-1.0f, 2.0f, 2, false, 1.0f, ScaleDtype::F16);
  const float r = 1.0f / p.scale;
  for (float x : {-5.0f, -1.0f, -0.2f, 0.0f, 0.5f, 1.0f, 1.99f, 2.0f, 7.0f})
    CHECK(quantize_value_recip(x, p, r, 2, Rounding::HalfEven) == quantize_value(x, p, 2, false, Rounding::HalfEven));
}

TEST_CASE("the integer zero point's reciprocal path equals its division path", "[quant][recip]") {
  std::mt19937 rng(20261125);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale_exp(-12.0f, 6.0f);
  int64_t n = 0, differ = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const float spread = std::exp2(scale_exp(rng)), shift = g(rng) * spread * 3.0f;
    float mn = INFINITY, mx = -INFINITY;
    float x[32];
    for (float& v : x) {
      v = round_to_half(g(rng) * spread + shift);
      mn = std::fmin(mn, v);
      mx = std::fmax(mx, v);
    }
    for (int bits : {2, 4}) {
      const IntZeroParams q = int_zero_params(mn, mx, bits, 1.0f, ScaleDtype::F16);
      const float r = 1.0f / q.p.scale;
      for (float v : x)
        for (Rounding rd : {Rounding::HalfEven, Rounding::HalfAway}) {
          ++n;
          if (quantize_value_int_zero(v, q, bits, rd) != quantize_value_int_zero_recip(v, q, r, bits, rd)) ++differ;
        }
    }
  }
  INFO(n << " codes");
  CHECK(differ == 0);
}

TEST_CASE("rounded_code equals quantize_value's rounding and clamp for every quotient", "[quant][recip]") {
  // the float rule of quantize_value: round, then clamp to [0, 2^b - 1] in float, then the cast
  const auto reference = [](float q, int bits, Rounding r) {
    const float c = std::fmin(std::fmax(round_value(q, r), 0.0f), static_cast<float>(max_code(bits)));
    return static_cast<uint32_t>(c);
  };
  int64_t checked = 0, differ = 0;
  for (Rounding r : {Rounding::HalfAway, Rounding::HalfEven})
    for (int bits : {2, 3, 4}) {
      // every float of [0.25, 20]: the half-way points and their neighbours included (below 0.25 both give 0)
      for (uint32_t u = bits_of(0.25f); u <= bits_of(20.0f); ++u) {
        float q;
        std::memcpy(&q, &u, 4);
        differ += rounded_code(q, bits, r) != reference(q, bits, r);
        ++checked;
      }
      for (float q : {0.0f, -0.0f, 1e-30f, 0.24999999f, -0.49999997f, -0.5f, -0.50000006f, -1.0f, -3.5f, -1e30f, 1e30f,
                      65504.0f, INFINITY, -INFINITY, 4294967296.0f}) {
        differ += rounded_code(q, bits, r) != reference(q, bits, r);
        ++checked;
      }
      CHECK(rounded_code(NAN, bits, r) == 0u);
    }
  INFO(checked << " quotients checked");
  CHECK(differ == 0);
}
