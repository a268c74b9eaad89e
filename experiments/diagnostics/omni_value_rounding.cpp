// omni_value_rounding.cpp: emulates, in double with round-to-nearest, the roundings of a bf16 value path for
// the oscar-omni decode ("bf16 path" below, against the fp16 path the kernel takes; BENCHMARKS.md, decode
// accuracy) (bf16 softmax weights in the P V MMA, fp32 weights in the zero-point term,
// value scales fp16 -> bf16, values bf16(code * scale)) on the long-split spread-attention case (gpu_test_ops -o long),
// and reports the error of each rounding alone against a double reference over the dequantized cache.
// Diagnostic, not built by CMake (BENCHMARKS.md, decode accuracy, has its numbers):
//   g++ -O2 -std=c++20 -Itests -Ikernels/include experiments/diagnostics/omni_value_rounding.cpp -o /tmp/omni_value_rounding
//   /tmp/omni_value_rounding BITS [L]      (BITS 2 or 4; L default 65529)
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
#include "twins/omni_twin.h"
using namespace oscar;
static float bf16r(float x) { return bf16_bits_to_float(float_to_bf16_bits(x)); }
static float f16r(float x) { return half_bits_to_float(float_to_half_bits(x)); }
int main(int argc, char** argv) {
  const int D = 128, H = 8, Hq = 32, G = 4, bits = argc > 1 ? atoi(argv[1]) : 4;
  const int L = argc > 2 ? atoi(argv[2]) : 65529;
  std::mt19937 rng(4242);
  std::normal_distribution<float> nd(0.f, 1.f);
  const size_t seq = size_t(H) * L * D;
  std::vector<uint16_t> k(seq), v(seq), q(size_t(32) * Hq * D);
  for (size_t i = 0; i < seq; ++i) { k[i] = float_to_bf16_bits(nd(rng)); v[i] = float_to_bf16_bits(nd(rng)); }
  for (auto& x : q) x = float_to_bf16_bits(nd(rng));
  twins::Bf16Rows kr, vr;  // the twin's input form, [1][H][L][D]
  kr.init(1, H, L, D); kr.x = k;
  vr.init(1, H, L, D); vr.x = v;
  const auto tw = omni_twin::build(kr, vr, {L}, bits, L);
  const int64_t cap = tw.body_capacity;
  const uint32_t* v_params = tw.img.arrays[omni_twin::kVParams].as<uint32_t>();
  const uint8_t* v_codes = tw.img.arrays[omni_twin::kCodes + 1].as<uint8_t>();
  const int64_t nb = omnifmt::body_tokens(L);
  const double scale = 1.0 / std::sqrt(double(D));
  double worst[7] = {0};
  for (int h = 0; h < 2; ++h) {
    std::vector<double> K(size_t(L) * D), V(K.size());
    for (int t = 0; t < L; ++t) for (int ch = 0; ch < D; ++ch) {
      K[size_t(t) * D + ch] = omni_twin::dequant<double>(tw, false, 0, h, t, L, ch);
      V[size_t(t) * D + ch] = omni_twin::dequant<double>(tw, true, 0, h, t, L, ch);
    }
    for (int g = 0; g < G; ++g) {
      const uint16_t* qb = &q[size_t(h * G + g) * D];
      std::vector<double> s(L);
      double mx = -1e300;
      for (int t = 0; t < L; ++t) { double a = 0; for (int ch = 0; ch < D; ++ch) a += bf16_bits_to_float(qb[ch]) * K[size_t(t) * D + ch]; s[t] = a * scale; mx = std::max(mx, s[t]); }
      std::vector<double> ref(D, 0), o1(D, 0), o2(D, 0), o3(D, 0), o4(D, 0), o5(D, 0), o6(D, 0);
      double l = 0, lb = 0;
      for (int t = 0; t < L; ++t) {
        const double p = std::exp(s[t] - mx);
        const float pf = float(p), pb = bf16r(pf), ph = f16r(pf);
        l += p; lb += pb;
        for (int ch = 0; ch < D; ++ch) {
          const double vv = V[size_t(t) * D + ch];
          ref[ch] += p * vv;
          o1[ch] += pb * vv;  // p in bf16, exact values
          if (t < nb) {
            const uint32_t par = v_params[(size_t(h) * cap + t) * 4 + ch / 32];
            const float sc = half_bits_to_float(uint16_t(par)), z = half_bits_to_float(uint16_t(par >> 16));
            const int code = unpack_code(&v_codes[(size_t(h) * cap + t) * (D * bits / 8)], ch, bits);
            const float vq = bf16r(code * bf16r(sc));    // bf16 path: bf16(code * bf16(scale))
            o2[ch] += double(pb) * vq + double(pf) * z;  // bf16 path: MMA with bf16 p, zero term with fp32 p
            o3[ch] += double(pb) * (code * double(sc)) + double(pf) * z;  // scale kept fp16, product exact
            o4[ch] += double(pf) * (bf16r(code * bf16r(sc))) + double(pf) * z;  // p exact, values rounded
            o5[ch] += double(pf) * (code * double(bf16r(sc))) + double(pf) * z;  // only the scale rounding
            o6[ch] += double(ph) * f16r(code * sc) + double(ph) * z;  // the kernel's fp16 path: values and weights, zeros with the same weights
          } else {
            o2[ch] += double(pb) * vv; o3[ch] += double(pb) * vv; o4[ch] += pf * vv; o5[ch] += pf * vv; o6[ch] += double(ph) * vv;
          }
        }
      }
      for (int ch = 0; ch < D; ++ch) { ref[ch] /= l; o1[ch] /= l; o2[ch] /= l; o3[ch] /= l; o4[ch] /= l; o5[ch] /= l; o6[ch] /= l; }
      auto rel = [&](const std::vector<double>& o) { double n = 0, d = 0; for (int c = 0; c < D; ++c) { n += (o[c] - ref[c]) * (o[c] - ref[c]); d += ref[c] * ref[c]; } return std::sqrt(n / d); };
      const double e[6] = {rel(o1), rel(o2), rel(o3), rel(o4), rel(o5), rel(o6)};
      for (int i = 0; i < 6; ++i) worst[i] = std::max(worst[i], e[i]);
    }
  }
  std::printf("int%d L=%d: p bf16 only %.3e | bf16 value path %.3e | bf16 p + exact values %.3e | exact p + bf16 values %.3e | only scale->bf16 %.3e | fp16 path (the kernel's) %.3e\n",
              bits, L, worst[0], worst[1], worst[2], worst[3], worst[4], worst[5]);
}
