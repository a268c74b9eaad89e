// omni_key_rounding.cpp: a CPU emulation of oscar-omni's decode arithmetic (body chunks, INT2/INT4) on the
// GPU driver's stress data (same generator and seed), against float64: how much of the INT4 stress-g4 error the
// fp16 rounding of the block query fragment q^*scale_k makes (the kernel takes it as an exact hi+lo pair).
// Build: g++ -O2 -std=c++20 -ffp-contract=off -Itests -Ikernels/include experiments/diagnostics/omni_key_rounding.cpp
// Run: a.out [stress-g4|stress-g1|stress-g8] [bits] [appends] [exact keys 0/1] [exact values 0/1]
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>
#include "twins/omni_twin.h"
#include "twins/inputs.h"
#include "twins/attention_twin.h"
using namespace oscar;
static float f16r(float x) { return half_bits_to_float(float_to_half_bits(x)); }
static float bf16r(float x) { return bf16_bits_to_float(float_to_bf16_bits(x)); }
int MODE_KEYEXACT = 0, MODE_VALEXACT = 0;
int main(int argc, char** argv) {
  std::string name = argc > 1 ? argv[1] : "stress-g4";
  int bits = argc > 2 ? atoi(argv[2]) : 4;
  int appends = argc > 3 ? atoi(argv[3]) : 0;
  MODE_KEYEXACT = argc > 4 ? atoi(argv[4]) : 0;
  MODE_VALEXACT = argc > 5 ? atoi(argv[5]) : 0;
  int Hq = 8, H = 2;
  if (name.find("g1") != std::string::npos) { Hq = 4; H = 4; }
  if (name.find("g8") != std::string::npos) { Hq = 24; H = 3; }
  std::string sname = name + (appends ? "-appended" : "");
  std::vector<int> lens = {0, 1, 127, 128, 129, 333, 3001};
  const int B = lens.size(), D = 128;
  const int T = 3001 + appends;
  uint32_t seed = uint32_t(std::hash<std::string>{}(sname) & 0xffffff) + uint32_t(bits);
  auto in = twins::make_inputs(twins::Profile::Stress, B, Hq, H, T, D, seed);
  for (auto& L : lens) L += appends;
  auto tw = omni_twin::build(in.k, in.v, lens, bits, T);
  const int G = Hq / H;
  const double scale = 1.0 / std::sqrt(double(D));
  const float sl2 = float(scale) * 1.4426950408889634f;
  const auto& A = tw.img.arrays;
  const int64_t cap = tw.body_capacity, CB = D * bits / 8;
  const float mid = 0.5f * ((1 << bits) - 1);
  double worst = 0;
  for (int b = 0; b < B; ++b) {
    const int64_t L = lens[b], nb = omnifmt::body_tokens(L);
    for (int h = 0; h < H; ++h) {
      std::vector<double> K, V;
      omni_twin::dequant_head(tw, b, h, L, K, V);
      const int64_t bh = int64_t(b) * H + h;
      for (int g = 0; g < G; ++g) {
        const uint16_t* qb = &in.q[(size_t(b) * Hq + h * G + g) * D];
        std::vector<double> ref(D);
        if (L) attn_twin::attention_bf16q(qb, K, V, L, D, scale, ref.data()); else continue;
        // kernel emulation: partials (m, l, o[D]) per chunk, plus the residual in exact arithmetic (bf16 p)
        struct Part { double m, l; std::vector<double> o; };
        std::vector<Part> parts;
        float amax = 0; for (int c = 0; c < D; ++c) amax = std::max(amax, std::fabs(bf16_bits_to_float(qb[c])));
        int e; frexpf(amax, &e);
        std::vector<float> qh(D);
        auto posf = [&](int c) { return bits == 4 ? ((c & 1) ? 16.f : 1.f) : 0.f; };
        // INT2: pos = (ch % 8 within word-half...) compute generally
        auto vposf = [&](int c) -> float {
          if (bits == 4) return (c & 1) ? 16.f : 1.f;
          // INT2: PW = 8, channel ch0 = 32t + (p/8)*16 + p%8: pos = (p%8)%5
          int i = c % 16; if (i >= 8) i -= 8; return float(1 << (2 * (i % 5)));
        };
        (void)posf;
        for (int c = 0; c < D; ++c) qh[c] = f16r(ldexpf(bf16_bits_to_float(qb[c]), 8 - e) / vposf(c));
        const float fsc = ldexpf(sl2, e - 8);
        for (int64_t t0 = 0; t0 < nb; t0 += 32) {
          const uint32_t* kp = A[omni_twin::kKParams].as<uint32_t>() + (bh * (cap / 32) + t0 / 32) * D;
          float cb = 0, cz = 0;
          std::vector<float> bq(D);
          for (int c = 0; c < D; ++c) {
            float s = half_bits_to_float(uint16_t(kp[c])), z = half_bits_to_float(uint16_t(kp[c] >> 16));
            bq[c] = f16r(qh[c] * s);
            float az = f16r(z * vposf(c));
            cb += bq[c]; cz += az * qh[c];
          }
          float bias = cz - 1024.f * cb;
          const float C0 = getenv("C0") ? atof(getenv("C0")) : 0.f;
          if (C0 != 0.f) {
            float cb2 = 0, ck = 0;
            for (int c = 0; c < D; ++c) { float s = half_bits_to_float(uint16_t(kp[c])); cb2 += bq[c] * (1024.f + C0 * vposf(c)); ck += f16r(s * C0 * vposf(c)) * qh[c]; }
            bias = cz + ck - cb2;
          }
          if (getenv("BQEXACT")) { for (int c = 0; c < D; ++c) bq[c] = qh[c] * half_bits_to_float(uint16_t(kp[c])); cb = 0; for (int c = 0; c < D; ++c) cb += bq[c]; bias = cz - 1024.f * cb; }
          std::vector<float> bl(D, 0.f);
          if (getenv("HILO")) { float cbx = 0; for (int c = 0; c < D; ++c) { float s = half_bits_to_float(uint16_t(kp[c])); bl[c] = f16r(std::fma(qh[c], s, -bq[c])); cbx += qh[c] * s; } bias = cz - 1024.f * cbx; }
          double sc[32];
          for (int i = 0; i < 32; ++i) {
            const int64_t t = t0 + i;
            if (MODE_KEYEXACT) { double d = 0; for (int c = 0; c < D; ++c) d += bf16_bits_to_float(qb[c]) * K[t * D + c]; sc[i] = d * scale * 1.4426950408889634; continue; }
            const uint8_t* kc = A[omni_twin::kCodes].as<uint8_t>() + (bh * cap + t) * CB;
            float d = 0;
            for (int c = 0; c < D; ++c) d += bq[c] * (1024.f + unpack_code(kc, c, bits) * vposf(c));
            for (int c = 0; c < D; ++c) d += bl[c] * (1024.f + unpack_code(kc, c, bits) * vposf(c));
            const float n = half_bits_to_float(A[omni_twin::kNorms].as<uint16_t>()[int64_t(b) * cap + t]);
            sc[i] = n * (d + bias) * fsc;
          }
          if (getenv("DIAG") && b == 6 && h * G + g == atoi(getenv("DIAG")) && t0 >= 960 && t0 < 1152) {
            double se[32], mean = 0, sd = 0;
            for (int i = 0; i < 32; ++i) { double d = 0; for (int c = 0; c < D; ++c) d += bf16_bits_to_float(qb[c]) * K[(t0 + i) * D + c]; se[i] = sc[i] - d * scale * 1.4426950408889634; mean += se[i] / 32; }
            for (int i = 0; i < 32; ++i) sd += (se[i] - mean) * (se[i] - mean) / 32;
            // exact bias vs float bias
            double cbe = 0, cze = 0; for (int c = 0; c < D; ++c) { float s = half_bits_to_float(uint16_t(kp[c])), z = half_bits_to_float(uint16_t(kp[c] >> 16)); cbe += double(qh[c]) * s; cze += double(qh[c]) * z * vposf(c); }
            const float n0 = half_bits_to_float(A[omni_twin::kNorms].as<uint16_t>()[int64_t(b) * cap + t0]);
            printf("t0=%lld score err mean %.4e sd %.4e  cb %.6g cz %.6g bias %.6g exact-bias(dq exact) %.6g, e=%d n0=%g fsc=%g\n", (long long)t0, mean, std::sqrt(sd), cb, cz, bias, cze - 1024 * cbe, e, n0, fsc);
          }
          if (getenv("DIAG2") && b == 6 && h * G + g == atoi(getenv("DIAG2"))) {
            for (int i = 0; i < 32; ++i) { double d = 0; for (int c = 0; c < D; ++c) d += bf16_bits_to_float(qb[c]) * K[(t0 + i) * D + c]; double ex = d * scale * 1.4426950408889634;
              const float nn = half_bits_to_float(A[omni_twin::kNorms].as<uint16_t>()[int64_t(b) * cap + t0 + i]);
              if (ex > 8 || std::fabs(sc[i] - ex) > 0.01) printf("t=%lld exact %.5f kernel %.5f err %.4e n=%g\n", (long long)(t0 + i), ex, sc[i], sc[i] - ex, nn); }
          }
          double m = -INFINITY; for (int i = 0; i < 32; ++i) m = std::max(m, sc[i]);
          float p[32]; double l = 0;
          for (int i = 0; i < 32; ++i) { p[i] = exp2f(float(sc[i] - m)); l += p[i]; }
          // value path
          const uint32_t* vp = A[omni_twin::kVParams].as<uint32_t>() + (bh * cap + t0) * 4;
          float mx = 0; for (int i = 0; i < 128; ++i) mx = std::max(mx, std::fabs(half_bits_to_float(uint16_t(vp[i]))));
          int k = 0; if (mx >= 64) k = std::max(1, ilogbf(mx) - 5);
          float pw = k ? ldexpf(1, 15 - k) : 32768.f;
          std::vector<double> o(D, 0);
          if (MODE_VALEXACT) {
            for (int i = 0; i < 32; ++i) for (int c = 0; c < D; ++c) o[c] += double(p[i]) * V[(t0 + i) * D + c];
          } else {
            float w[32]; for (int i = 0; i < 32; ++i) w[i] = f16r(p[i] * pw);
            for (int gr = 0; gr < 4; ++gr) {
              float cs = 0, ex = 0;
              std::vector<float> acc(32, 0);
              for (int i = 0; i < 32; ++i) {
                const uint32_t par = vp[i * 4 + gr];
                float s = half_bits_to_float(uint16_t(par)), z = half_bits_to_float(uint16_t(par >> 16));
                float sp = f16r(ldexpf(s, -k)), bw = f16r(ldexpf(w[i], k));
                cs += sp * bw; ex += w[i] * z;
                const uint8_t* vc = A[omni_twin::kCodes + 1].as<uint8_t>() + (bh * cap + t0 + i) * CB;
                for (int j = 0; j < 32; ++j) { int c = gr * 32 + j; float a = f16r(unpack_code(vc, c, bits) * vposf(c) * sp); acc[j] += a * bw; }
              }
              for (int j = 0; j < 32; ++j) { int c = gr * 32 + j; float aa = acc[j] - mid * vposf(c) * cs; float off = mid * cs;
                o[c] = fmaf(aa, 1.f / vposf(c), ex + off) / pw; }
            }
          }
          parts.push_back({m, l, o});
        }
        // residual exact with bf16 p
        for (int64_t t = nb; t < L; t += 16) {
          int n = std::min<int64_t>(16, L - t);
          double sc[16], m = -INFINITY;
          for (int i = 0; i < n; ++i) { double d = 0; for (int c = 0; c < D; ++c) d += bf16_bits_to_float(qb[c]) * K[(t + i) * D + c]; sc[i] = d * sl2; m = std::max(m, sc[i]); }
          std::vector<double> o(D, 0); double l = 0;
          for (int i = 0; i < n; ++i) { float p = exp2f(float(sc[i] - m)); l += p; for (int c = 0; c < D; ++c) o[c] += bf16r(p) * V[(t + i) * D + c]; }
          parts.push_back({m, l, o});
        }
        double M = -INFINITY; for (auto& pp : parts) M = std::max(M, pp.m);
        std::vector<double> num(D, 0); double den = 0;
        for (auto& pp : parts) { double w = std::exp2(pp.m - M); den += w * pp.l; for (int c = 0; c < D; ++c) num[c] += w * pp.o[c]; }
        std::vector<float> out(D); for (int c = 0; c < D; ++c) out[c] = float(num[c] / den);
        double err = attn_twin::rel_err(out.data(), ref.data(), D);
        if (err > 3e-3) printf("b=%d L=%lld hq=%d err %.3e out %.5g %.5g %.5g ref %.5g %.5g %.5g\n", b, (long long)L, h * G + g, err, out[0], out[1], out[2], ref[0], ref[1], ref[2]);
        worst = std::max(worst, err);
      }
    }
  }
  printf("%s bits %d appends %d keyexact %d valexact %d: worst %.3e\n", sname.c_str(), bits, appends, MODE_KEYEXACT, MODE_VALEXACT, worst);
}
