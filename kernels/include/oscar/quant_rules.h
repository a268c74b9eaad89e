// quant_rules.h: THE quantization contract shared by the CPU reference (lib/) and the CUDA kernels.
// Everything that decides a code lives here, as OSCAR_HD functions compiled by g++ and nvcc alike,
// so GPU codes can be compared with CPU codes bit for bit. Host code is built with -ffp-contract=off
// and kernels use IEEE division (nvcc's default -prec-div=true): no step below admits an FMA.
//
// Integer widths 1..8. A group of values x_i shares (scale, zero):
//   asymmetric: lo = clip*min(x), hi = clip*max(x); scale = (hi - lo) / (2^b - 1); zero = lo.
//               code = clamp(round((x - zero) / scale), 0, 2^b - 1);  x^ = code * scale + zero.
//   symmetric:  (b >= 2) m = clip*max|x|; scale = m / (2^(b-1) - 1); zero = 0.
//               q = clamp(round(x / scale), -(2^(b-1) - 1), 2^(b-1) - 1); code = q + 2^(b-1);
//               x^ = (code - 2^(b-1)) * scale.
// scale and zero are first rounded to their storage dtype (fp16, bf16 or fp32); codes are computed
// from the stored values, exactly as a kernel that reads them back would dequantize. A group whose
// stored scale is 0 (constant group) gets code 0 (asymmetric) or the mid code (symmetric).
// Rounding: half to even (rintf; the default) or half away from zero (roundf; for the non-negative
// (x - zero) / scale of an asymmetric group this is OSCAR's half-up, floor(v + 0.5)).
// Quantile clip (OSCAR's code, below): each token row is clamped to +-(its k-th smallest |x|) before its groups
// take their min and max with clip 1. Integer zero point (OScaR's and QuaRot's code, below): the zero point is a
// whole number of steps.
// Packing: code i of a packed row occupies bits [i*b, (i+1)*b) of a little-endian bit stream (byte k
// holds stream bits 8k..8k+7, least significant first); for b = 2, byte k holds codes 4k..4k+3 with
// code 4k in its two lowest bits; for b = 4, code 2k in the low nibble.
#pragma once
#include <cmath>
#include <cstdint>

#include "oscar/float_formats.h"
#include "oscar/host_device.h"

namespace oscar {

enum class ScaleDtype : int { F16 = 0, BF16 = 1, F32 = 2 };
enum class Rounding : int { HalfEven = 0, HalfAway = 1 };
enum class ClipMode : int { Ratio = 0, Quantile = 1 };
enum class ZeroPoint : int { Float = 0, Integer = 1 };

OSCAR_HD int scale_dtype_bytes(ScaleDtype t) { return t == ScaleDtype::F32 ? 4 : 2; }

// The value a group parameter has once stored in `t` (and read back).
OSCAR_HD float store_param(float v, ScaleDtype t) {
  return t == ScaleDtype::F16 ? round_to_half(v) : t == ScaleDtype::BF16 ? round_to_bf16(v) : v;
}

OSCAR_HD float round_value(float v, Rounding r) { return r == Rounding::HalfEven ? rintf(v) : roundf(v); }

OSCAR_HD int max_code(int bits) { return (1 << bits) - 1; }

struct GroupParams {
  float scale;  // stored value (already rounded to the storage dtype)
  float zero;   // stored value; 0 for symmetric
};

// Group parameters from the group's min and max (already computed over the group).
OSCAR_HD GroupParams group_params(float mn, float mx, int bits, bool symmetric, float clip, ScaleDtype t) {
  GroupParams p;
  if (symmetric) {
    const float m = clip * fmaxf(fabsf(mn), fabsf(mx));
    const float levels = static_cast<float>((1 << (bits - 1)) - 1);
    p.scale = store_param(m / levels, t);
    p.zero = 0.0f;
  } else {
    const float lo = clip * mn, hi = clip * mx;
    p.scale = store_param((hi - lo) / static_cast<float>(max_code(bits)), t);
    p.zero = store_param(lo, t);
  }
  return p;
}

OSCAR_HD uint8_t quantize_value(float x, GroupParams p, int bits, bool symmetric, Rounding r) {
  if (symmetric) {
    const int half = 1 << (bits - 1), lim = half - 1;
    if (!(p.scale > 0.0f)) return static_cast<uint8_t>(half);
    float q = round_value(x / p.scale, r);
    q = fminf(fmaxf(q, static_cast<float>(-lim)), static_cast<float>(lim));
    return static_cast<uint8_t>(static_cast<int>(q) + half);
  }
  if (!(p.scale > 0.0f)) return 0;
  float q = round_value((x - p.zero) / p.scale, r);
  q = fminf(fmaxf(q, 0.0f), static_cast<float>(max_code(bits)));
  return static_cast<uint8_t>(q);
}

// The kernels' fast path for asymmetric groups: (x - zero) / scale through the group's reciprocal r = 1 / scale
// (one IEEE division per group) and one fma correction: q0 = d r, e = d - q0 scale (exact by fma), q = q0 + e r.
// For a correctly rounded r and q0 within one ulp this is the correctly rounded quotient (Markstein) barring
// underflow (a zero quotient may come out +0 where the division gives -0: the same code); test_quant_recip checks
// it equal to the IEEE division for every positive fp16 scale against random
// numerators over the whole range the kernels see, and quantize_value_recip equal to quantize_value.
OSCAR_HD float div_by_recip(float d, float s, float r) {
#if defined(__CUDA_ARCH__)
  const float q0 = __fmul_rn(d, r);
  return __fmaf_rn(__fmaf_rn(-q0, s, d), r, q0);
#else
  const float q0 = d * r;
  return std::fma(std::fma(-q0, s, d), r, q0);
#endif
}
// quantize_value for an asymmetric group whose reciprocal r = 1 / p.scale is given (p.scale > 0 or the
// group is constant); equal to quantize_value(x, p, bits, false, r) wherever div_by_recip equals the division.
OSCAR_HD uint8_t quantize_value_recip(float x, GroupParams p, float r, int bits, Rounding rounding) {
  if (!(p.scale > 0.0f)) return 0;
#if defined(__CUDA_ARCH__)
  float q = round_value(div_by_recip(__fsub_rn(x, p.zero), p.scale, r), rounding);
#else
  float q = round_value(div_by_recip(x - p.zero, p.scale, r), rounding);
#endif
  q = fminf(fmaxf(q, 0.0f), static_cast<float>(max_code(bits)));
  return static_cast<uint8_t>(q);
}

// The code of quotient q (= (x - zero) / scale) of an asymmetric group, rounded and clamped on the integer: half
// away from zero as trunc(q + 0.49999997f) (the addition rounded to nearest), half to even as the nearest integer,
// both converted with saturation (negative and NaN -> 0), then min(code, 2^bits - 1). Equal to quantize_value's
// round_value and float clamp for every float q (test_quant_recip checks [0.25, 20] exhaustively; below 0.25 both
// give 0, above 2^bits both clamp); on the GPU two or three instructions (cvt.rzi/cvt.rni with saturation, min).
OSCAR_HD uint32_t rounded_code(float q, int bits, Rounding r) {
  const uint32_t top = static_cast<uint32_t>(max_code(bits));
#if defined(__CUDA_ARCH__)
  const uint32_t c = r == Rounding::HalfAway ? __float2uint_rz(__fadd_rn(q, 0.49999997f)) : __float2uint_rn(q);
#else
  const float f = r == Rounding::HalfAway ? std::trunc(q + 0.49999997f) : std::nearbyint(q);
  const uint32_t c = !(f > 0.0f) ? 0u : f >= 4294967295.0f ? 0xffffffffu : static_cast<uint32_t>(f);
#endif
  return c < top ? c : top;
}

OSCAR_HD float dequantize_value(uint8_t code, GroupParams p, int bits, bool symmetric) {
  if (symmetric) return static_cast<float>(static_cast<int>(code) - (1 << (bits - 1))) * p.scale;
  return static_cast<float>(code) * p.scale + p.zero;
}

// Quantile clip (OSCAR, arXiv 2605.17757; its kernels' oracle `sort(abs(x))[int(clip_ratio * head_dim)]`): the
// threshold of a row of n values is its k-th smallest |x| (0-based, counting repeats), k = floor(ratio * n) taken in
// double from the float32 ratio and clamped to [0, n - 1] (equal to OSCAR's float64 index for every two-decimal
// ratio and power-of-two n up to 512). A value is then kept when |x| <= threshold, else replaced by
// copysign(threshold, x): at head_dim 64 a ratio of 0.96 clamps the 2 largest |x| to the 3rd largest.
OSCAR_HD int quantile_clip_index(float ratio, int n) {
  const int k = static_cast<int>(static_cast<double>(ratio) * n);  // ratio > 0: truncation is the floor
  return k < 0 ? 0 : (k > n - 1 ? n - 1 : k);
}
OSCAR_HD float clamp_to_threshold(float x, float threshold) { return fabsf(x) > threshold ? copysignf(threshold, x) : x; }

// Integer zero point (OScaR's quarot_utils.py and CUDA qpack.h, QuaRot's quant_utils.py): with the stored scale s of
// the asymmetric group above, z = rint(-lo / s) (half to even; any integer, also outside [0, 2^b - 1]) and
// code = clamp(round(x / s) + z, 0, 2^b - 1) with the tensor's rounding. The stored zero is dtype(0 - z s) (exact in
// float for |z| < 2^13), so that x^ = code * s + zero as for the float zero point; OScaR's kernel stores its zero so.
// A group whose stored scale is 0 keeps z = 0, zero = dtype(lo) and code 0, as for the float zero point.
struct IntZeroParams {
  GroupParams p;  // the stored (scale, zero)
  float z;        // the integer zero point, in steps
};
OSCAR_HD IntZeroParams int_zero_params(float mn, float mx, int bits, float clip, ScaleDtype t) {
  IntZeroParams q;
  const float lo = clip * mn, hi = clip * mx;
  q.p.scale = store_param((hi - lo) / static_cast<float>(max_code(bits)), t);
  if (!(q.p.scale > 0.0f)) {
    q.z = 0.0f;
    q.p.zero = store_param(lo, t);
    return q;
  }
  q.z = rintf(-lo / q.p.scale);
  q.p.zero = store_param(0.0f - q.z * q.p.scale, t);
  return q;
}
OSCAR_HD uint8_t quantize_value_int_zero(float x, const IntZeroParams& q, int bits, Rounding r) {
  if (!(q.p.scale > 0.0f)) return 0;
  float c = round_value(x / q.p.scale, r) + q.z;
  c = fminf(fmaxf(c, 0.0f), static_cast<float>(max_code(bits)));
  return static_cast<uint8_t>(c);
}
// The same through the group's reciprocal r = 1 / scale (div_by_recip; equal wherever that equals the division).
OSCAR_HD uint8_t quantize_value_int_zero_recip(float x, const IntZeroParams& q, float r, int bits, Rounding rounding) {
  if (!(q.p.scale > 0.0f)) return 0;
#if defined(__CUDA_ARCH__)
  float c = __fadd_rn(round_value(div_by_recip(x, q.p.scale, r), rounding), q.z);
#else
  float c = round_value(div_by_recip(x, q.p.scale, r), rounding) + q.z;
#endif
  c = fminf(fmaxf(c, 0.0f), static_cast<float>(max_code(bits)));
  return static_cast<uint8_t>(c);
}

// Packing into / out of a little-endian bit stream (see the header comment).
OSCAR_HD int packed_bytes(int n, int bits) { return (n * bits + 7) / 8; }

OSCAR_HD void pack_code(uint8_t* out, int i, uint8_t code, int bits) {  // `out` must start zeroed
  const int bit = i * bits;
  const int byte = bit >> 3, off = bit & 7;
  const unsigned v = static_cast<unsigned>(code) << off;
  out[byte] = static_cast<uint8_t>(out[byte] | (v & 0xffu));
  if (off + bits > 8) out[byte + 1] = static_cast<uint8_t>(out[byte + 1] | (v >> 8));
}

OSCAR_HD uint8_t unpack_code(const uint8_t* in, int i, int bits) {
  const int bit = i * bits;
  const int byte = bit >> 3, off = bit & 7;
  unsigned v = in[byte] >> off;
  if (off + bits > 8) v |= static_cast<unsigned>(in[byte + 1]) << (8 - off);
  return static_cast<uint8_t>(v & static_cast<unsigned>(max_code(bits)));
}

}  // namespace oscar
