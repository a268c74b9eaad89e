// gpu_test_long_split.cu: decode accuracy where fp32 accumulation is hardest. A batch of 32 sequences x 8
// KV heads leaves each (sequence, head) only a few body splits, so every warp accumulates thousands of
// tokens; the attention is spread (q, k ~ N(0, 1): scores ~ N(0, 1)) and the values have zero mean, so the
// output is ~1/sqrt(n) of the values and any offset carried in an accumulator shows in it. Both cache
// formats at INT2 and INT4 and the BF16 kernel, against a double reference over the dequantized cache for
// the first and the last sequence (the largest offsets). Exits 77 (CTest: skipped) without a GPU.
//
// Tolerance: max over query heads of ||out - ref|| / ||ref||, per kernel. Spread weights make |out| ~
// |v| / sqrt(n_eff) (about 1/150 of the values here), so this relative error is ~150x harsher than on
// peaky attention: an arithmetic error of 1e-4 of the values reads as 1.5e-2. Measured on the H100
// (2026-11-23, L = 65529; BENCHMARKS.md, fifth section): BF16 kernel 1.9e-3 (its bf16 P, the floor of a
// bf16 P V); oscar-cov INT2 2.4e-3, INT4 2.2e-3; oscar-omni INT2 7.3e-4, INT4 8.9e-4 (fp16 value path).
// History: with accumulators that carried the codes' offset over a whole split, oscar-cov read 0.243 /
// 0.091 and oscar-omni 1.59e-2 / 2.51e-2; centred per chunk but on 1.5 for INT4 too, with weights rounded
// for the codes only (oscar-cov) and a bf16 value path (oscar-omni): 9.1e-3 / 1.06e-2 and 1.26e-2 /
// 2.41e-2. Bound 5e-3 for every kernel: above the bf16-weight floor (1.8e-3 emulated in
// experiments/diagnostics/cov_value_rounding.cpp) with margin, below every earlier fault.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <random>
#include <vector>

#include "oscar/float_formats.h"
#include "oscar/cov_format.h"
#include "oscar/quant_rules.h"
#include "oscar_kv.h"

#include "attention_reference.h"
#include "gpu_check.h"
#include "omni_twin.h"

namespace {
constexpr int D = 128, H = 8, Hq = 32, G = Hq / H;
int B = 32, L = 65536 - 7;  // L not a multiple of any block; both can be set on the command line (diagnosis)
using oscar::bf16_bits_to_float;

template <class T>
std::vector<T> host_copy(const void* p, size_t offset_elems, size_t n) {
  std::vector<T> h(n);
  CK(cudaMemcpy(h.data(), static_cast<const T*>(p) + offset_elems, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// Checks out (device, [B][Hq][D]) for sequences 0 and B - 1; deq(b, h, K, V) fills the reference cache.
template <class Deq>
void check(const char* what, double bound, const float* dout, const std::vector<uint16_t>& q, double scale, Deq deq) {
  const auto out = host_copy<float>(dout, 0, size_t(B) * Hq * D);
  std::vector<double> K(size_t(L) * D), V(K.size()), ref(D);
  double worst = 0;
  for (int b : {0, B - 1})
    for (int h = 0; h < H; ++h) {
      deq(b, h, K, V);
      for (int g = 0; g < G; ++g) {
        const int hq = h * G + g;
        attn_ref::attention_bf16q(&q[(size_t(b) * Hq + hq) * D], K, V, L, D, scale, ref.data());
        const double e = attn_ref::rel_err(&out[(size_t(b) * Hq + hq) * D], ref.data(), D);
        worst = std::max(worst, e);
        EXPECT(e <= bound, "%s b=%d hq=%d rel err %.3e (bound %.0e)", what, b, hq, e, bound);
      }
    }
  std::printf("%s: max rel err %.3e (B=%d x %d KV heads, L=%d)\n", what, worst, B, H, L);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3) { B = std::atoi(argv[1]); L = std::atoi(argv[2]); }
  if ((argc != 1 && argc != 3) || B < 1 || L < 1) {
    std::fprintf(stderr, "usage: %s [BATCH CONTEXT]  (positive integers; default 32 65529)\n", argv[0]);
    return 2;
  }
  if (oscar_device_count() == 0) {
    std::printf("SKIPPED: no CUDA device visible; run the GPU tests on a GPU machine (ctest -L gpu)\n");
    return 77;
  }
  // One sequence of K/V (every batch entry holds a copy: the check is about split length and offsets).
  std::mt19937 rng(4242);
  std::normal_distribution<float> nd(0.f, 1.f);
  const size_t seq = size_t(H) * L * D;
  std::vector<uint16_t> k(seq), v(seq), q(size_t(B) * Hq * D);
  for (size_t i = 0; i < seq; ++i) {
    k[i] = oscar::float_to_bf16_bits(nd(rng));
    v[i] = oscar::float_to_bf16_bits(nd(rng));
  }
  for (auto& x : q) x = oscar::float_to_bf16_bits(nd(rng));
  const double scale = 1.0 / std::sqrt(double(D));
  uint16_t *dk, *dv, *dq;
  int32_t* dl;
  float* dout;
  CK(cudaMalloc(&dk, seq * B * 2)); CK(cudaMalloc(&dv, seq * B * 2)); CK(cudaMalloc(&dq, q.size() * 2));
  CK(cudaMalloc(&dl, B * 4)); CK(cudaMalloc(&dout, size_t(B) * Hq * D * 4));
  CK(cudaMemcpy(dk, k.data(), seq * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dv, v.data(), seq * 2, cudaMemcpyHostToDevice));
  for (int b = 1; b < B; ++b) {
    CK(cudaMemcpy(dk + b * seq, dk, seq * 2, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(dv + b * seq, dv, seq * 2, cudaMemcpyDeviceToDevice));
  }
  CK(cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
  const std::vector<int32_t> lens(B, L);
  CK(cudaMemcpy(dl, lens.data(), B * 4, cudaMemcpyHostToDevice));
  const size_t ws = oscar_decode_workspace_bytes(B, Hq, H, D, L, 1);
  void* dws;
  CK(cudaMalloc(&dws, ws));
  oscar_error err{};

  // BF16 baseline.
  CK(cudaMemset(dout, 0xff, size_t(B) * Hq * D * 4));
  EXPECT(oscar_bf16_decode(dk, dv, B, H, L, D, dq, Hq, dl, L, float(scale), dout, dws, ws, nullptr, &err) == OSCAR_OK,
         "bf16 decode: %s", err.message);
  CK(cudaDeviceSynchronize());
  check("bf16", 5e-3, dout, q, scale, [&](int, int h, std::vector<double>& K, std::vector<double>& V) {
    for (size_t i = 0; i < size_t(L) * D; ++i) {
      K[i] = bf16_bits_to_float(k[size_t(h) * L * D + i]);
      V[i] = bf16_bits_to_float(v[size_t(h) * L * D + i]);
    }
  });

  // oscar-cov.
  const int S = oscar::covfmt::kDefaultSink, W = oscar::covfmt::kDefaultRecent;
  for (int bits : {2, 4}) {
    oscar_cov_cache c{};
    c.batch = B; c.num_kv_heads = H; c.head_dim = D; c.bits = bits; c.sink = S; c.recent = W;
    c.body_capacity = L - S - W; c.clip_k = oscar::covfmt::kClipK; c.clip_v = oscar::covfmt::kClipV;
    const size_t bh = size_t(B) * H, cb = D * bits / 8, cap = size_t(c.body_capacity);
    void** ptrs[8] = {&c.k_sink, &c.v_sink, &c.k_recent, &c.v_recent, &c.k_codes, &c.v_codes, &c.k_params, &c.v_params};
    const size_t sizes[8] = {bh * S * D * 2, bh * S * D * 2, bh * W * D * 2, bh * W * D * 2, bh * cap * cb, bh * cap * cb, bh * cap * 4, bh * cap * 4};
    for (int i = 0; i < 8; ++i) CK(cudaMalloc(ptrs[i], sizes[i]));
    EXPECT(oscar_cov_prefill(&c, dk, dv, dl, L, nullptr, &err) == OSCAR_OK, "prefill: %s", err.message);
    CK(cudaMemset(dout, 0xff, size_t(B) * Hq * D * 4));
    EXPECT(oscar_cov_decode(&c, dq, Hq, dl, L, float(scale), dout, dws, ws, nullptr, &err) == OSCAR_OK, "decode: %s", err.message);
    CK(cudaDeviceSynchronize());
    const int64_t nb = oscar::covfmt::body_tokens(L, S, W);
    char what[32];
    std::snprintf(what, sizeof what, "oscar-cov int%d", bits);
    check(what, 5e-3, dout, q, scale, [&](int b, int h, std::vector<double>& K, std::vector<double>& V) {
      const size_t bhi = size_t(b) * H + h;
      const auto ks = host_copy<uint16_t>(c.k_sink, bhi * S * D, size_t(S) * D), vs = host_copy<uint16_t>(c.v_sink, bhi * S * D, size_t(S) * D);
      const auto kr = host_copy<uint16_t>(c.k_recent, bhi * W * D, size_t(W) * D), vr = host_copy<uint16_t>(c.v_recent, bhi * W * D, size_t(W) * D);
      const auto kc = host_copy<uint8_t>(c.k_codes, bhi * cap * cb, cap * cb), vc = host_copy<uint8_t>(c.v_codes, bhi * cap * cb, cap * cb);
      const auto kp = host_copy<uint32_t>(c.k_params, bhi * cap, cap), vp = host_copy<uint32_t>(c.v_params, bhi * cap, cap);
      for (int t = 0; t < L; ++t)
        for (int ch = 0; ch < D; ++ch) {
          const size_t o = size_t(t) * D + ch;
          if (t < S) {
            K[o] = bf16_bits_to_float(ks[size_t(t) * D + ch]); V[o] = bf16_bits_to_float(vs[size_t(t) * D + ch]);
          } else if (t - S < nb) {
            const size_t i = t - S;
            K[o] = oscar::unpack_code(&kc[i * cb], ch, bits) * double(oscar::half_bits_to_float(uint16_t(kp[i]))) +
                   oscar::half_bits_to_float(uint16_t(kp[i] >> 16));
            V[o] = oscar::unpack_code(&vc[i * cb], ch, bits) * double(oscar::half_bits_to_float(uint16_t(vp[i]))) +
                   oscar::half_bits_to_float(uint16_t(vp[i] >> 16));
          } else {
            const size_t slot = size_t(t - S) % W;
            K[o] = bf16_bits_to_float(kr[slot * D + ch]); V[o] = bf16_bits_to_float(vr[slot * D + ch]);
          }
        }
    });
    for (int i = 0; i < 8; ++i) cudaFree(*ptrs[i]);
  }

  // oscar-omni: the reference is the CPU twin of one sequence (every entry holds the same K/V; the
  // twin's bit-exactness against the prefill kernel is gpu_test_omni's job).
  for (int bits : {2, 4}) {
    const int64_t cap = (L + 127) / 128 * 128;
    oscar_omni_cache c{};
    c.batch = B; c.num_kv_heads = H; c.head_dim = D; c.bits = bits; c.body_capacity = cap;
    const size_t bh = size_t(B) * H, cb = D * bits / 8;
    void** p[7] = {&c.k_res, &c.v_res, &c.k_codes, &c.v_codes, &c.k_params, &c.v_params, &c.k_norms};
    const size_t s[7] = {bh * 128 * D * 2, bh * 128 * D * 2, bh * cap * cb, bh * cap * cb, bh * (cap / 32) * D * 4,
                         bh * cap * (D / 32) * 4, size_t(B) * cap * 2};
    for (int i = 0; i < 7; ++i) CK(cudaMalloc(p[i], s[i]));
    EXPECT(oscar_omni_prefill(&c, dk, dv, dl, L, nullptr, &err) == OSCAR_OK, "omni prefill: %s", err.message);
    CK(cudaMemset(dout, 0xff, size_t(B) * Hq * D * 4));
    EXPECT(oscar_omni_decode(&c, dq, Hq, dl, L, float(scale), dout, dws, ws, nullptr, &err) == OSCAR_OK, "omni decode: %s", err.message);
    CK(cudaDeviceSynchronize());
    const auto tw = omni_twin::build(k, v, {L}, H, L, D, bits, cap);
    char what[32];
    std::snprintf(what, sizeof what, "oscar-omni int%d", bits);
    check(what, 5e-3, dout, q, scale, [&](int, int h, std::vector<double>& K, std::vector<double>& V) {
      for (int t = 0; t < L; ++t)
        for (int ch = 0; ch < D; ++ch) {
          K[size_t(t) * D + ch] = omni_twin::key(tw, 0, h, t, L, ch);
          V[size_t(t) * D + ch] = omni_twin::value(tw, 0, h, t, L, ch);
        }
    });
    for (int i = 0; i < 7; ++i) cudaFree(*p[i]);
  }
  cudaFree(dws); cudaFree(dk); cudaFree(dv); cudaFree(dq); cudaFree(dl); cudaFree(dout);
  CK(cudaGetLastError());
  std::printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
