// cov_value_rounding.cpp: emulates, in double with round-to-nearest, the oscar-cov decode kernel's value
// path on random zero-mean values with spread attention: a path with P V MMA weights bf16(p * scale_v) on
// exact codes and a zero-point term with fp32 p ("codes" below), the kernel's path (the same
// weights on code - mid only, mid scale_v + zero_v with fp32 p; mid = (2^bits - 1) / 2), the zero term with the same rounded
// weights, the floor (bf16 p on exact values) and fp16 weights. Diagnostic, not built by CMake:
//   g++ -O2 -std=c++20 -Ikernels/include experiments/diagnostics/cov_value_rounding.cpp -o /tmp/cov_value_rounding
//   /tmp/cov_value_rounding BITS [L]
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
#include "oscar/float_formats.h"
#include "oscar/quant_rules.h"
using namespace oscar;
static float bf16r(float x) { return bf16_bits_to_float(float_to_bf16_bits(x)); }
static float f16r(float x) { return half_bits_to_float(float_to_half_bits(x)); }
int main(int argc, char** argv) {
  const int D = 128, bits = argc > 1 ? atoi(argv[1]) : 4, L = argc > 2 ? atoi(argv[2]) : 65529;
  const double mid = 0.5 * ((1 << bits) - 1);
  std::mt19937 rng(4242);
  std::normal_distribution<float> nd(0.f, 1.f);
  double worst[5] = {0};
  for (int rep = 0; rep < 4; ++rep) {
    std::vector<float> K(size_t(L) * D), V(K.size()), q(D);
    for (auto& x : K) x = bf16r(nd(rng));
    for (auto& x : V) x = bf16r(nd(rng));
    for (auto& x : q) x = bf16r(nd(rng));
    std::vector<double> s(L); double mx = -1e300;
    for (int t = 0; t < L; ++t) { double a = 0; for (int c = 0; c < D; ++c) a += q[c] * K[size_t(t) * D + c]; s[t] = a / std::sqrt(128.0); mx = std::max(mx, s[t]); }
    std::vector<double> ref(D, 0), o1(D, 0), o2(D, 0), o3(D, 0), o4(D, 0), o5(D, 0);
    double l = 0;
    for (int t = 0; t < L; ++t) {
      const float* v = &V[size_t(t) * D];
      float mn = v[0], mxv = v[0];
      for (int c = 0; c < D; ++c) { mn = std::min(mn, v[c]); mxv = std::max(mxv, v[c]); }
      const GroupParams gp = group_params(mn, mxv, bits, false, 0.92f, ScaleDtype::F16);
      const double p = std::exp(s[t] - mx); const float pf = float(p);
      l += p;
      const float pp = bf16r(pf * gp.scale);                          // kernel: bf16(p * scale_v)
      const float pb = bf16r(pf), ph = f16r(pf * gp.scale);
      for (int c = 0; c < D; ++c) {
        const int code = quantize_value(v[c], gp, bits, false, Rounding::HalfEven);
        const double vq = code * double(gp.scale) + gp.zero;
        ref[c] += p * vq;
        o1[c] += double(pp) * code + double(pf) * gp.zero;                 // codes: zero term with fp32 p
        o5[c] += double(pp) * (code - mid) + double(pf) * (mid * double(gp.scale) + gp.zero);  // the kernel's
        o2[c] += double(pp) * code + (gp.scale != 0 ? double(pp) * (gp.zero / gp.scale) : pf * gp.zero);  // zero term with pp
        o3[c] += double(pb) * vq;                                          // bf16 p on exact values (floor)
        o4[c] += double(ph) * code + (gp.scale != 0 ? double(ph) * (gp.zero / gp.scale) : pf * gp.zero);  // fp16 weights, same in the zero term
      }
    }
    auto rel = [&](const std::vector<double>& o) { double n = 0, d = 0; for (int c = 0; c < D; ++c) { n += (o[c] / l - ref[c] / l) * (o[c] / l - ref[c] / l); d += ref[c] / l * ref[c] / l; } return std::sqrt(n / d); };
    worst[0] = std::max(worst[0], rel(o1)); worst[1] = std::max(worst[1], rel(o2)); worst[2] = std::max(worst[2], rel(o3)); worst[3] = std::max(worst[3], rel(o4)); worst[4] = std::max(worst[4], rel(o5));
  }
  std::printf("cov int%d L=%d: pp on codes, fp32-p zeros %.3e | the kernel's (pp on code - mid) %.3e | zero term with the same pp %.3e | "
              "bf16 p on exact values %.3e | fp16 weights, same in the zero term %.3e\n",
              bits, L, worst[0], worst[4], worst[1], worst[2], worst[3]);
}
