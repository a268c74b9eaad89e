// float_formats.h: bit-exact float32 <-> float16 / bfloat16 conversions shared by lib/ and the kernels.
// Contract: to_half / to_bf16 round to nearest, ties to even (as __float2half_rn / __float2bfloat16_rn),
// keep NaN a NaN and overflow to infinity; the from_* functions are exact.
#pragma once
#include <cstdint>
#include <cstring>
#include "oscar/host_device.h"
#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

namespace oscar {

OSCAR_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
OSCAR_HD float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

OSCAR_HD uint16_t float_to_half_bits(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // the one NaN pattern
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));  // the hardware conversion: the same rounding (one instruction)
#endif
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (ax < 0x38800000u) {                                               // half subnormal or zero
    if (ax < 0x33000000u) return static_cast<uint16_t>(sign);          // < 2^-25: rounds to zero
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // 14 + (113 - e) - 1 ... places the value in units of 2^-24
    const uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    const uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return static_cast<uint16_t>(sign | r);
  }
  const uint32_t m = ax & 0x1fffu;
  uint32_t h = ((ax - 0x38000000u) >> 13);  // rebias exponent 127 -> 15, drop 13 mantissa bits
  if (m > 0x1000u || (m == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

OSCAR_HD float half_bits_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  if ((h & 0x7c00u) != 0x7c00u || (h & 0x3ffu) == 0) return __half2float(__ushort_as_half(h));  // exact; NaN below
#endif
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    if (m == 0) return bits_float(sign);
    return (sign ? -1.0f : 1.0f) * static_cast<float>(m) * 5.9604644775390625e-8f;  // m * 2^-24, exact
  }
  if (e == 31) return bits_float(sign | 0x7f800000u | (m << 13));
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

OSCAR_HD uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16);
}

OSCAR_HD float bf16_bits_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// Value after a round trip through the storage format (the value a kernel will read back).
OSCAR_HD float round_to_half(float f) { return half_bits_to_float(float_to_half_bits(f)); }
OSCAR_HD float round_to_bf16(float f) { return bf16_bits_to_float(float_to_bf16_bits(f)); }

}  // namespace oscar
