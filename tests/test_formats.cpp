// test_formats.cpp: shared header math: float16/bfloat16 rounding and the CPU fast Walsh-Hadamard
// transform against the explicit Sylvester matrix.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "oscar/float_formats.h"
#include "oscar/fwht_math.h"

using namespace oscar;

TEST_CASE("float16 conversion rounds to nearest even and round-trips exactly", "[formats]") {
  CHECK(float_to_half_bits(1.0f) == 0x3c00);
  CHECK(float_to_half_bits(-2.0f) == 0xc000);
  CHECK(float_to_half_bits(65504.0f) == 0x7bff);
  CHECK(float_to_half_bits(65520.0f) == 0x7c00);        // ties to even: overflows to inf
  CHECK(float_to_half_bits(65519.99f) == 0x7bff);
  CHECK(float_to_half_bits(1.0f + 1.0f / 2048) == 0x3c00);  // halfway between 1 and 1+2^-10: even is 1
  CHECK(float_to_half_bits(1.0f + 3.0f / 2048) == 0x3c02);  // halfway, odd below: rounds up
  CHECK(float_to_half_bits(5.9604644775390625e-8f) == 0x0001);  // smallest subnormal 2^-24
  CHECK(float_to_half_bits(2.98023223876953125e-8f) == 0x0000);  // 2^-25: tie to even (zero)
  CHECK(float_to_half_bits(4.0e-8f) == 0x0001);
  CHECK(float_to_half_bits(INFINITY) == 0x7c00);
  CHECK((float_to_half_bits(NAN) & 0x7c00) == 0x7c00);
  CHECK((float_to_half_bits(NAN) & 0x03ff) != 0);
  for (uint32_t h = 0; h < 0x10000; ++h) {  // every finite half survives half -> float -> half
    if (((h >> 10) & 0x1f) == 0x1f) continue;
    REQUIRE(float_to_half_bits(half_bits_to_float(static_cast<uint16_t>(h))) == h);
  }
}

TEST_CASE("bfloat16 conversion rounds to nearest even", "[formats]") {
  CHECK(float_to_bf16_bits(1.0f) == 0x3f80);
  CHECK(float_to_bf16_bits(bits_float(0x3f808000u)) == 0x3f80);  // tie, even below
  CHECK(float_to_bf16_bits(bits_float(0x3f818000u)) == 0x3f82);  // tie, odd below
  CHECK(float_to_bf16_bits(bits_float(0x3f808001u)) == 0x3f81);
  CHECK(bf16_bits_to_float(0x3f80) == 1.0f);
}

TEST_CASE("FWHT equals the explicit Sylvester Hadamard matrix", "[formats][fwht]") {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  for (int n : {2, 8, 32, 128, 256}) {
    std::vector<float> x(n), y(n);
    for (auto& v : x) v = nd(rng);
    y = x;
    fwht_inplace(y.data(), n, true);
    for (int i = 0; i < n; ++i) {
      double ref = 0;  // H[i][j] = (-1)^popcount(i & j) / sqrt(n)
      for (int j = 0; j < n; ++j) ref += ((__builtin_popcount(i & j) & 1) ? -1.0 : 1.0) * x[j];
      ref /= std::sqrt(static_cast<double>(n));
      REQUIRE(y[i] == Approx(ref).margin(1e-5));
    }
    fwht_inplace(y.data(), n, true);  // normalized transform is its own inverse
    for (int i = 0; i < n; ++i) REQUIRE(y[i] == Approx(x[i]).margin(1e-5));
  }
}
