// gpu_test_omni.cu: the oscar-omni cache kernels against their CPU twin (omni_twin.h): prefill and
// token-by-token append give bit-identical norms, codes, scales/zeros and residual rows; decode attention
// matches a double-precision reference over the dequantized cache; the C API rejects bad input.
// Exits 77 (CTest: skipped) when no GPU is present.
//
// Decode tolerance: max over (sequence, query head) of ||out - ref|| / ||ref|| <= 1e-2, as for oscar-cov
// (gpu_test_decode.cu: bf16 softmax weights, fp32 accumulation), plus this format's own roundings: the
// block query fragment q^ * scale_k in fp16 (two roundings of 2^-11 each per channel) and the dequantized
// values code * scale_v and weights in fp16 (2^-11 relative each). A wrong block, norm, group, split or
// large-scale rescaling moves the output far more.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "oscar_kv.h"

#include "attention_reference.h"
#include "gpu_check.h"
#include "omni_twin.h"

namespace {
constexpr int D = 128;
using oscar::bf16_bits_to_float;

struct DevOmni {
  oscar_omni_cache c{};
  size_t sizes[7];
  void alloc(int B, int H, int bits, int64_t cap) {
    c.batch = B; c.num_kv_heads = H; c.head_dim = D; c.bits = bits; c.body_capacity = cap;
    const size_t bh = size_t(B) * H, cb = D * bits / 8;
    void** p[7] = {&c.k_res, &c.v_res, &c.k_codes, &c.v_codes, &c.k_params, &c.v_params, &c.k_norms};
    const size_t s[7] = {bh * 128 * D * 2, bh * 128 * D * 2, bh * cap * cb, bh * cap * cb, bh * (cap / 32) * D * 4,
                         bh * cap * (D / 32) * 4, size_t(B) * cap * 2};
    for (int i = 0; i < 7; ++i) {
      sizes[i] = s[i];
      CK(cudaMalloc(p[i], s[i] + 16));
      CK(cudaMemset(*p[i], 0, s[i]));
    }
  }
  void free() {
    void* p[7] = {c.k_res, c.v_res, c.k_codes, c.v_codes, c.k_params, c.v_params, c.k_norms};
    for (void* x : p) cudaFree(x);
  }
  template <class T>
  std::vector<T> get(int i) const {
    const void* p[7] = {c.k_res, c.v_res, c.k_codes, c.v_codes, c.k_params, c.v_params, c.k_norms};
    std::vector<T> h(sizes[i] / sizeof(T));
    cudaMemcpy(h.data(), p[i], sizes[i], cudaMemcpyDeviceToHost);
    return h;
  }
};

// Compares the device cache with the twin over the live entries of every sequence.
int compare(const DevOmni& d, const omni_twin::Cache& tw, const std::vector<int>& lens, const char* what) {
  const auto kr = d.get<uint16_t>(0), vr = d.get<uint16_t>(1);
  const auto kc = d.get<uint8_t>(2), vc = d.get<uint8_t>(3);
  const auto kp = d.get<uint32_t>(4), vp = d.get<uint32_t>(5);
  const auto kn = d.get<uint16_t>(6);
  const int64_t cap = tw.cap, CB = D * tw.bits / 8;
  int bad = 0;
  auto diff = [&](bool ne, const char* field, int b, int h, int64_t t, int x) {
    if (ne && ++bad <= 8) std::printf("  %s: %s differs at b=%d h=%d t=%lld [%d]\n", what, field, b, h, (long long)t, x);
  };
  for (int b = 0; b < tw.B; ++b) {
    const int64_t L = lens[b], nb = oscar::omnifmt::body_tokens(L);
    for (int64_t t = 0; t < nb; ++t) diff(kn[b * cap + t] != tw.k_norms[b * cap + t], "norm", b, -1, t, 0);
    for (int h = 0; h < tw.H; ++h) {
      const int64_t bh = int64_t(b) * tw.H + h;
      for (int64_t t = 0; t < nb; ++t) {
        for (int i = 0; i < CB; ++i) {
          diff(kc[(bh * cap + t) * CB + i] != tw.k_codes[(bh * cap + t) * CB + i], "k code byte", b, h, t, i);
          diff(vc[(bh * cap + t) * CB + i] != tw.v_codes[(bh * cap + t) * CB + i], "v code byte", b, h, t, i);
        }
        for (int g = 0; g < D / 32; ++g) diff(vp[(bh * cap + t) * 4 + g] != tw.v_params[(bh * cap + t) * 4 + g], "v params", b, h, t, g);
      }
      for (int64_t blk = 0; blk < nb / 32; ++blk)
        for (int ch = 0; ch < D; ++ch)
          diff(kp[(bh * (cap / 32) + blk) * D + ch] != tw.k_params[(bh * (cap / 32) + blk) * D + ch], "k params", b, h, blk * 32, ch);
      for (int64_t t = nb; t < L; ++t)
        for (int ch = 0; ch < D; ++ch) {
          diff(kr[(bh * 128 + t - nb) * D + ch] != tw.k_res[(bh * 128 + t - nb) * D + ch], "k residual", b, h, t, ch);
          diff(vr[(bh * 128 + t - nb) * D + ch] != tw.v_res[(bh * 128 + t - nb) * D + ch], "v residual", b, h, t, ch);
        }
    }
  }
  return bad;
}

}  // namespace

int main() {
  if (oscar_device_count() == 0) {
    std::printf("SKIPPED: no CUDA device visible; run the GPU tests on a GPU machine (ctest -L gpu)\n");
    return 77;
  }
  std::mt19937 rng(2026);
  std::normal_distribution<float> nd(0.f, 1.f);
  // Lengths: empty, 1, one short of a block, exactly a block, one over, odd, long; T leaves room to append.
  const std::vector<int> lens = {0, 1, 127, 128, 129, 333, 3001};
  const int B = int(lens.size());
  const int T = 3001 + 300;
  const int64_t cap = 3328;  // 26 blocks of 128: T - 1 fits (T - 1 <= cap + 127)
  const double scale = 1.0 / std::sqrt(double(D));
  oscar_error err{};
  struct Shape { int hq, hkv; };
  for (Shape sh : {Shape{8, 2}, Shape{4, 4}, Shape{24, 3}}) {
    const int Hq = sh.hq, H = sh.hkv;
    std::vector<uint16_t> k(size_t(B) * H * T * D), v(k.size()), q(size_t(B) * Hq * D);
    std::vector<float> vmean(D), tokscale(size_t(B) * T);
    for (auto& x : vmean) x = nd(rng);
    // Values 300x larger (value scales of 100s, past the decode kernel's fp16 limit of 64 for -1024 s,
    // so it takes its rescaled path) in all of sequence 5 and in tokens 1000..1099 of sequence 6 (some
    // chunks rescaled, others not, within one split).
    auto vbig = [](int b, int t) { return (b == 5 || (b == 6 && t >= 1000 && t < 1100)) ? 300.f : 1.f; };
    // Token Norm Imbalance: some tokens with 20x smaller, some with 8x larger keys (all heads alike).
    for (size_t i = 0; i < tokscale.size(); ++i) tokscale[i] = (i % 53 == 0) ? 0.05f : (i % 71 == 0) ? 8.f : 1.f;
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int t = 0; t < T; ++t)
          for (int c = 0; c < D; ++c) {
            const size_t i = ((size_t(b) * H + h) * T + t) * D + c;
            k[i] = oscar::float_to_bf16_bits((nd(rng) + 0.2f) * tokscale[size_t(b) * T + t]);
            v[i] = oscar::float_to_bf16_bits((vmean[c] + nd(rng)) * vbig(b, t));
          }
    // a token whose keys are zero in every head (norm 0: stored unscaled)
    for (int h = 0; h < H; ++h)
      for (int c = 0; c < D; ++c) k[((size_t(6) * H + h) * T + 40) * D + c] = 0;
    for (auto& x : q) x = oscar::float_to_bf16_bits(2.5f * nd(rng));
    uint16_t *dk, *dv, *dq;
    int32_t* dl;
    float* dout;
    CK(cudaMalloc(&dk, k.size() * 2)); CK(cudaMalloc(&dv, v.size() * 2)); CK(cudaMalloc(&dq, q.size() * 2));
    CK(cudaMalloc(&dl, B * 4)); CK(cudaMalloc(&dout, size_t(B) * Hq * D * 4));
    CK(cudaMemcpy(dk, k.data(), k.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dv, v.data(), v.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
    for (int bits : {2, 4}) {
      DevOmni dc;
      dc.alloc(B, H, bits, cap);
      // 1) prefill
      CK(cudaMemcpy(dl, lens.data(), B * 4, cudaMemcpyHostToDevice));
      oscar_status s = oscar_omni_prefill(&dc.c, dk, dv, dl, T, nullptr, &err);
      EXPECT(s == OSCAR_OK, "prefill: %s", err.message);
      CK(cudaDeviceSynchronize());
      auto tw = omni_twin::build(k, v, lens, H, T, D, bits, cap);
      EXPECT(compare(dc, tw, lens, "prefill") == 0, "omni prefill int%d Hkv=%d differs from the CPU twin", bits, H);
      // 2) decode after prefill
      auto check_decode = [&](const std::vector<int>& L, const omni_twin::Cache& c, const char* what) {
        const int mx = *std::max_element(L.begin(), L.end());
        const size_t ws = oscar_decode_workspace_bytes(B, Hq, H, D, mx, 1);
        void* dws;
        CK(cudaMalloc(&dws, ws));
        CK(cudaMemcpy(dl, L.data(), B * 4, cudaMemcpyHostToDevice));
        CK(cudaMemset(dout, 0xff, size_t(B) * Hq * D * 4));
        const oscar_status st = oscar_omni_decode(&dc.c, dq, Hq, dl, mx, float(scale), dout, dws, ws, nullptr, &err);
        EXPECT(st == OSCAR_OK, "decode: %s", err.message);
        CK(cudaDeviceSynchronize());
        std::vector<float> out(size_t(B) * Hq * D);
        CK(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost));
        double worst = 0;
        int wb = -1, wq = -1;
        std::vector<double> ref(D);
        for (int b = 0; b < B; ++b)
          for (int h = 0; h < H; ++h) {
            std::vector<double> K(size_t(L[b]) * D), V(K.size());
            for (int t = 0; t < L[b]; ++t)
              for (int ch = 0; ch < D; ++ch) {
                K[size_t(t) * D + ch] = omni_twin::key(c, b, h, t, L[b], ch);
                V[size_t(t) * D + ch] = omni_twin::value(c, b, h, t, L[b], ch);
              }
            for (int g = 0; g < Hq / H; ++g) {
              const int hq = h * (Hq / H) + g;
              attn_ref::attention_bf16q(&q[(size_t(b) * Hq + hq) * D], K, V, L[b], D, scale, ref.data());
              const double e = attn_ref::rel_err(&out[(size_t(b) * Hq + hq) * D], ref.data(), D);
              if (e > worst) { worst = e; wb = b; wq = hq; }
              EXPECT(e <= 1e-2, "%s int%d Hq=%d Hkv=%d b=%d (L=%d) hq=%d rel err %.3e", what, bits, Hq, H, b, L[b], hq, e);
            }
          }
        std::printf("omni %s int%d Hq=%d Hkv=%d: max rel err %.3e vs the dequantized cache (b=%d, L=%d, hq=%d)\n", what, bits, Hq, H, worst,
                    wb, wb >= 0 ? L[wb] : 0, wq);
        cudaFree(dws);
      };
      check_decode(lens, tw, "prefill");
      // 3) append 300 tokens one by one (every sequence crosses at least two residual flushes)
      std::vector<int> cur = lens;
      std::vector<uint16_t> kn(size_t(B) * H * D), vn(kn.size());
      uint16_t *dkn, *dvn;
      CK(cudaMalloc(&dkn, kn.size() * 2));
      CK(cudaMalloc(&dvn, vn.size() * 2));
      for (int step = 0; step < 300; ++step) {
        int mx = 0;
        for (int b = 0; b < B; ++b) {
          for (int h = 0; h < H; ++h) {
            std::memcpy(&kn[(size_t(b) * H + h) * D], &k[((size_t(b) * H + h) * T + cur[b]) * D], D * 2);
            std::memcpy(&vn[(size_t(b) * H + h) * D], &v[((size_t(b) * H + h) * T + cur[b]) * D], D * 2);
          }
          mx = std::max(mx, cur[b]);
        }
        CK(cudaMemcpy(dkn, kn.data(), kn.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dvn, vn.data(), vn.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dl, cur.data(), B * 4, cudaMemcpyHostToDevice));
        s = oscar_omni_append(&dc.c, dkn, dvn, dl, mx, nullptr, &err);
        if (s != OSCAR_OK) { EXPECT(false, "append step %d: %s", step, err.message); break; }
        for (int& L : cur) ++L;
      }
      CK(cudaDeviceSynchronize());
      tw = omni_twin::build(k, v, cur, H, T, D, bits, cap);
      EXPECT(compare(dc, tw, cur, "append") == 0, "omni append int%d Hkv=%d differs from the CPU twin", bits, H);
      check_decode(cur, tw, "append");
      cudaFree(dkn);
      cudaFree(dvn);
      // 4) bad input
      if (H == 2) {
        const size_t ws = oscar_decode_workspace_bytes(B, Hq, H, D, T, 1);
        void* dws;
        CK(cudaMalloc(&dws, ws));
        EXPECT(oscar_omni_prefill(&dc.c, dk, dv, dl, int32_t(oscar_omni_capacity(&dc.c) + 1), nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT &&
                   std::strstr(err.message, "capacity"), "max_len beyond capacity: %s", err.message);
        EXPECT(oscar_omni_append(&dc.c, dk, dv, dl, int32_t(oscar_omni_capacity(&dc.c)), nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT,
               "append beyond capacity");
        EXPECT(oscar_omni_decode(&dc.c, dq, Hq, dl, int32_t(oscar_omni_capacity(&dc.c) + 1), 1.f, dout, dws, ws, nullptr, &err) ==
                   OSCAR_ERR_INVALID_ARGUMENT, "decode beyond capacity");
        EXPECT(oscar_omni_decode(&dc.c, dq, Hq, dl, T, 1.f, dout, dws, ws / 4, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT, "small workspace");
        EXPECT(oscar_omni_decode(&dc.c, dq + 1, Hq, dl, T, 1.f, dout, dws, ws, nullptr, &err) == OSCAR_ERR_MISALIGNED, "misaligned q");
        EXPECT(oscar_omni_prefill(&dc.c, nullptr, dv, dl, T, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT, "null k");
        oscar_omni_cache bad = dc.c;
        bad.bits = 3;
        EXPECT(oscar_omni_prefill(&bad, dk, dv, dl, T, nullptr, &err) == OSCAR_ERR_UNSUPPORTED && std::strstr(err.message, "bits=3"), "bits 3");
        bad = dc.c;
        bad.head_dim = 64;
        EXPECT(oscar_omni_decode(&bad, dq, Hq, dl, T, 1.f, dout, dws, ws, nullptr, &err) == OSCAR_ERR_UNSUPPORTED, "hd 64");
        bad = dc.c;
        bad.body_capacity = 100;
        EXPECT(oscar_omni_append(&bad, dk, dv, dl, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT && std::strstr(err.message, "multiple"),
               "capacity not a multiple of 128");
        bad = dc.c;
        bad.k_norms = nullptr;
        EXPECT(oscar_omni_prefill(&bad, dk, dv, dl, T, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT && std::strstr(err.message, "k_norms"),
               "null norms");
        bad = dc.c;
        bad.v_params = static_cast<char*>(bad.v_params) + 4;
        EXPECT(oscar_omni_decode(&bad, dq, Hq, dl, T, 1.f, dout, dws, ws, nullptr, &err) == OSCAR_ERR_MISALIGNED, "misaligned params");
        cudaFree(dws);
      }
      dc.free();
    }
    cudaFree(dk); cudaFree(dv); cudaFree(dq); cudaFree(dl); cudaFree(dout);
  }
  CK(cudaGetLastError());
  std::printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
