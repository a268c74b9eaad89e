// gpu_test_decode.cu: decode attention (INT2, INT4 oscar-cov caches and the BF16 baseline) against a
// CPU reference in double over the dequantized cache, for a batch of sequences of different lengths,
// plus the C API's errors. Exits 77 (CTest: skipped) when no GPU is present.
//
// Tolerance: max over (sequence, query head) of ||out - ref||_2 / ||ref||_2 <= 1e-2. The reference
// uses the cache exactly as stored (bf16 windows, code * scale + zero in double) and the bf16 query,
// so the only differences are the kernel's own roundings: (i) the query converted bf16 -> fp16 for the
// packed-body score MMA (relative 2^-11 per element; an exact conversion for |q| >= 2^-14); (ii) the
// softmax weights p (and p * scale_v) rounded to bf16 before the P V MMA: a relative perturbation of at
// most 2^-9 ~ 2e-3 of each weight, hence of each output at most 2^-9 * max|v| / |o| (values drawn with a
// non-zero mean keep |o| ~ max|v| / 4, so <= ~8e-3 even when one token dominates, and ~2e-3 / sqrt(n)
// for spread weights); (iii) fp32 accumulation and exp2f (relative ~1e-6). 1e-2 covers the worst case of
// (ii) and stays several times above the typical error (measured 3e-4 .. 8e-3), while a wrong index, a
// dropped window or a mis-merged split moves the output by far more than 1e-2 on these inputs.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "oscar/float_formats.h"
#include "oscar/cov_format.h"
#include "oscar/quant_rules.h"
#include "oscar_kv.h"

#include "attention_reference.h"
#include "gpu_check.h"

namespace {
constexpr int D = 128;
using oscar::bf16_bits_to_float;

template <class T>
T* dev_copy(const std::vector<T>& h) {
  T* p = nullptr;
  cudaMalloc(&p, h.size() * sizeof(T) + 16);
  cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  return p;
}
template <class T>
std::vector<T> host_copy(const void* p, size_t n) {
  std::vector<T> h(n);
  cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}

}  // namespace

int main() {
  if (oscar_device_count() == 0) {
    std::printf("SKIPPED: no CUDA device visible; run the GPU tests on a GPU machine (ctest -L gpu)\n");
    return 77;
  }
  std::mt19937 rng(777);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int S = 64, W = 256;
  const std::vector<int> lens = {1, 50, S + W + 3001, 333, S + W + 513, 0};
  const int B = int(lens.size());
  const int T = S + W + 3001;
  const double scale = 1.0 / std::sqrt(double(D));
  struct Shape { int hq, hkv; };
  for (Shape sh : {Shape{8, 2}, Shape{4, 4}, Shape{16, 2}}) {
    const int Hq = sh.hq, H = sh.hkv;
    std::vector<uint16_t> k(size_t(B) * H * T * D), v(k.size()), q(size_t(B) * Hq * D);
    std::vector<float> vmean(D);
    for (auto& x : vmean) x = nd(rng);
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] = oscar::float_to_bf16_bits(nd(rng) + 0.2f);
      v[i] = oscar::float_to_bf16_bits(vmean[i % D] + nd(rng));
    }
    for (auto& x : q) x = oscar::float_to_bf16_bits(2.5f * nd(rng));  // peaky-ish softmax
    uint16_t *dk = dev_copy(k), *dv = dev_copy(v), *dq = dev_copy(q);
    int32_t* dl = dev_copy(std::vector<int32_t>(lens.begin(), lens.end()));
    float* dout;
    CK(cudaMalloc(&dout, size_t(B) * Hq * D * 4));
    std::vector<double> ref(D);
    oscar_error err{};

    // BF16 baseline over the same K/V.
    {
      const size_t ws = oscar_decode_workspace_bytes(B, Hq, H, D, T, 0);
      void* dws;
      CK(cudaMalloc(&dws, ws));
      CK(cudaMemset(dout, 0xff, size_t(B) * Hq * D * 4));  // poison (NaN)
      oscar_status s = oscar_bf16_decode(dk, dv, B, H, T, D, dq, Hq, dl, T, float(scale), dout, dws, ws, nullptr, &err);
      EXPECT(s == OSCAR_OK, "bf16 decode: %s", err.message);
      CK(cudaDeviceSynchronize());
      const auto out = host_copy<float>(dout, size_t(B) * Hq * D);
      double worst = 0;
      for (int b = 0; b < B; ++b)
        for (int hq = 0; hq < Hq; ++hq) {
          const int hh = hq / (Hq / H);
          const size_t off = (size_t(b) * H + hh) * T * D;
          std::vector<double> K(size_t(lens[b]) * D), V(K.size());
          for (size_t i = 0; i < K.size(); ++i) { K[i] = bf16_bits_to_float(k[off + i]); V[i] = bf16_bits_to_float(v[off + i]); }
          attn_ref::attention_bf16q(&q[(size_t(b) * Hq + hq) * D], K, V, lens[b], D, scale, ref.data());
          const double e = attn_ref::rel_err(&out[(size_t(b) * Hq + hq) * D], ref.data(), D);
          worst = std::max(worst, e);
          EXPECT(e <= 1e-2, "bf16 Hq=%d Hkv=%d b=%d (L=%d) hq=%d rel err %.3e", Hq, H, b, lens[b], hq, e);
        }
      std::printf("bf16 Hq=%d Hkv=%d: max rel err %.3e\n", Hq, H, worst);
      // Bad input.
      EXPECT(oscar_bf16_decode(dk, dv, B, H, T, 64, dq, Hq, dl, T, 1.f, dout, dws, ws, nullptr, &err) == OSCAR_ERR_UNSUPPORTED, "hd 64");
      EXPECT(oscar_bf16_decode(dk, dv, B, H, T, D, dq, Hq, dl, T + 1, 1.f, dout, dws, ws, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT &&
                 std::strstr(err.message, "capacity"), "len beyond capacity");
      EXPECT(oscar_bf16_decode(dk, dv, B, H, T, D, dq, Hq, dl, T, 1.f, dout, dws, ws / 2, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT,
             "small workspace");
      EXPECT(oscar_bf16_decode(dk, dv, B, H, T, D, dq + 1, Hq, dl, T, 1.f, dout, dws, ws, nullptr, &err) == OSCAR_ERR_MISALIGNED, "misaligned q");
      EXPECT(oscar_bf16_decode(dk, dv, B, H, T, D, dq, Hq + 1, dl, T, 1.f, dout, dws, ws, nullptr, &err) == OSCAR_ERR_UNSUPPORTED, "bad GQA");
      EXPECT(oscar_bf16_decode(nullptr, dv, B, H, T, D, dq, Hq, dl, T, 1.f, dout, dws, ws, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT, "null k");
      cudaFree(dws);
    }

    for (int bits : {2, 4}) {
      oscar_cov_cache c{};
      c.batch = B; c.num_kv_heads = H; c.head_dim = D; c.bits = bits; c.sink = S; c.recent = W;
      c.body_capacity = T - S - W; c.clip_k = oscar::covfmt::kClipK; c.clip_v = oscar::covfmt::kClipV;
      const size_t bh = size_t(B) * H, cb = D * bits / 8;
      void** ptrs[8] = {&c.k_sink, &c.v_sink, &c.k_recent, &c.v_recent, &c.k_codes, &c.v_codes, &c.k_params, &c.v_params};
      const size_t sizes[8] = {bh * S * D * 2, bh * S * D * 2, bh * W * D * 2, bh * W * D * 2,
                               bh * c.body_capacity * cb, bh * c.body_capacity * cb, bh * c.body_capacity * 4, bh * c.body_capacity * 4};
      for (int i = 0; i < 8; ++i) { CK(cudaMalloc(ptrs[i], sizes[i])); CK(cudaMemset(*ptrs[i], 0x7f, sizes[i])); }
      oscar_status s = oscar_cov_prefill(&c, dk, dv, dl, T, nullptr, &err);
      EXPECT(s == OSCAR_OK, "prefill: %s", err.message);
      const size_t ws = oscar_decode_workspace_bytes(B, Hq, H, D, T, 1);
      void* dws;
      CK(cudaMalloc(&dws, ws));
      CK(cudaMemset(dout, 0xff, size_t(B) * Hq * D * 4));
      s = oscar_cov_decode(&c, dq, Hq, dl, T, float(scale), dout, dws, ws, nullptr, &err);
      EXPECT(s == OSCAR_OK, "decode bits=%d: %s", bits, err.message);
      CK(cudaDeviceSynchronize());
      const auto out = host_copy<float>(dout, size_t(B) * Hq * D);
      const auto ks = host_copy<uint16_t>(c.k_sink, sizes[0] / 2), vs = host_copy<uint16_t>(c.v_sink, sizes[1] / 2);
      const auto kr = host_copy<uint16_t>(c.k_recent, sizes[2] / 2), vr = host_copy<uint16_t>(c.v_recent, sizes[3] / 2);
      const auto kc = host_copy<uint8_t>(c.k_codes, sizes[4]), vc = host_copy<uint8_t>(c.v_codes, sizes[5]);
      const auto kp = host_copy<uint32_t>(c.k_params, sizes[6] / 4), vp = host_copy<uint32_t>(c.v_params, sizes[7] / 4);
      double worst = 0, worst_vs_orig = 0;
      for (int b = 0; b < B; ++b)
        for (int hh = 0; hh < H; ++hh) {
          const size_t bhi = size_t(b) * H + hh;
          const int L = lens[b];
          const int64_t nb = oscar::covfmt::body_tokens(L, S, W);
          std::vector<double> K(size_t(L) * D), V(K.size()), K0(K.size()), V0(K.size());
          for (int t = 0; t < L; ++t) {
            for (int cc = 0; cc < D; ++cc) {
              K0[size_t(t) * D + cc] = bf16_bits_to_float(k[(bhi * T + t) * D + cc]);
              V0[size_t(t) * D + cc] = bf16_bits_to_float(v[(bhi * T + t) * D + cc]);
            }
            if (t < S) {
              for (int cc = 0; cc < D; ++cc) { K[size_t(t) * D + cc] = bf16_bits_to_float(ks[(bhi * S + t) * D + cc]);
                                               V[size_t(t) * D + cc] = bf16_bits_to_float(vs[(bhi * S + t) * D + cc]); }
            } else if (t - S < nb) {
              const size_t bi = bhi * c.body_capacity + (t - S);
              const double ksc = oscar::half_bits_to_float(uint16_t(kp[bi])), kz = oscar::half_bits_to_float(uint16_t(kp[bi] >> 16));
              const double vsc = oscar::half_bits_to_float(uint16_t(vp[bi])), vz = oscar::half_bits_to_float(uint16_t(vp[bi] >> 16));
              for (int cc = 0; cc < D; ++cc) {
                K[size_t(t) * D + cc] = oscar::unpack_code(&kc[bi * cb], cc, bits) * ksc + kz;
                V[size_t(t) * D + cc] = oscar::unpack_code(&vc[bi * cb], cc, bits) * vsc + vz;
              }
            } else {
              const size_t slot = bhi * W + (t - S) % W;
              for (int cc = 0; cc < D; ++cc) { K[size_t(t) * D + cc] = bf16_bits_to_float(kr[slot * D + cc]);
                                               V[size_t(t) * D + cc] = bf16_bits_to_float(vr[slot * D + cc]); }
            }
          }
          for (int g = 0; g < Hq / H; ++g) {
            const int hq = hh * (Hq / H) + g;
            attn_ref::attention_bf16q(&q[(size_t(b) * Hq + hq) * D], K, V, L, D, scale, ref.data());
            const double e = attn_ref::rel_err(&out[(size_t(b) * Hq + hq) * D], ref.data(), D);
            worst = std::max(worst, e);
            EXPECT(e <= 1e-2, "int%d Hq=%d Hkv=%d b=%d (L=%d) hq=%d rel err %.3e", bits, Hq, H, b, L, hq, e);
            attn_ref::attention_bf16q(&q[(size_t(b) * Hq + hq) * D], K0, V0, L, D, scale, ref.data());
            worst_vs_orig = std::max(worst_vs_orig, attn_ref::rel_err(&out[(size_t(b) * Hq + hq) * D], ref.data(), D));
          }
        }
      std::printf("int%d Hq=%d Hkv=%d: max rel err %.3e vs dequantized reference (%.3e vs unquantized bf16, information only)\n",
                  bits, Hq, H, worst, worst_vs_orig);
      // Bad input.
      EXPECT(oscar_cov_decode(&c, dq, Hq, dl, int32_t(oscar_cov_capacity(&c) + 1), 1.f, dout, dws, ws, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT &&
                 std::strstr(err.message, "capacity"), "decode beyond capacity");
      EXPECT(oscar_cov_decode(&c, dq, Hq, nullptr, T, 1.f, dout, dws, ws, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT, "null lens");
      EXPECT(oscar_cov_decode(&c, dq, Hq, dl, T, 1.f, dout + 1, dws, ws, nullptr, &err) == OSCAR_ERR_MISALIGNED, "misaligned out");
      oscar_cov_cache bad = c;
      bad.bits = 8;
      EXPECT(oscar_cov_decode(&bad, dq, Hq, dl, T, 1.f, dout, dws, ws, nullptr, &err) == OSCAR_ERR_UNSUPPORTED, "bits 8");
      EXPECT(oscar_cov_decode(&c, dq, H * 9, dl, T, 1.f, dout, dws, ws, nullptr, &err) == OSCAR_ERR_UNSUPPORTED, "G 9");
      cudaFree(dws);
      for (int i = 0; i < 8; ++i) cudaFree(*ptrs[i]);
    }
    cudaFree(dk); cudaFree(dv); cudaFree(dq); cudaFree(dl); cudaFree(dout);
  }
  CK(cudaGetLastError());
  std::printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
