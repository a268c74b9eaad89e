// gpu_test_real.cu: the decode kernels on REAL activations: every layer of the bundled head_dim-128 model
// (kjv-llama-hd128, 4 query / 2 KV heads) on held-out text. Keys, values and queries are rotated by the
// normalized Hadamard (what oscar-omni does; for oscar-cov it stands in for the calibrated rotation,
// which the kernels also take pre-applied), rounded to bf16, prefilled into an oscar-cov and an
// oscar-omni cache (INT2 and INT4) as a batch of three sequences of different lengths (1536, 1459, 301),
// and each sequence's last query is decoded. Checks: oscar-omni codes equal the CPU twin bit for bit;
// both formats' outputs are within 1e-2 (relative L2) of a double-precision reference over the
// dequantized cache (the bound of gpu_test_decode / gpu_test_omni, which justify it). Also prints the
// error against unquantized attention (information). Exits 77 without a GPU.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "oscar/float_formats.h"
#include "oscar/fwht_math.h"
#include "oscar/cov_format.h"
#include "oscar_kv.h"

#include "attention_reference.h"
#include "gpu_check.h"
#include "omni_twin.h"
#include "real_activations.h"

namespace {
constexpr int D = 128;

template <class T>
std::vector<T> get(const void* p, size_t bytes) {
  std::vector<T> h(bytes / sizeof(T));
  cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost);
  return h;
}
// Hadamard-rotated bf16 rows of a head-major [heads][T][D] tensor.
std::vector<uint16_t> rotate_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  std::vector<float> row(D);
  for (size_t r = 0; r < x.size() / D; ++r) {
    std::memcpy(row.data(), &x[r * D], D * 4);
    oscar::fwht_inplace(row.data(), D, true);
    for (int c = 0; c < D; ++c) out[r * D + c] = oscar::float_to_bf16_bits(row[c]);
  }
  return out;
}
}  // namespace

int main() {
  if (oscar_device_count() == 0) {
    std::printf("SKIPPED: no CUDA device visible; run the GPU tests on a GPU machine (ctest -L gpu)\n");
    return 77;
  }
  const int T = 1536;
  const std::vector<int> lens = {T, T - 77, 301};
  const int B = int(lens.size());
  const std::vector<RealLayer> layers = real_activations(T);
  const double scale = 1.0 / std::sqrt(double(D));
  oscar_error err{};
  for (size_t li = 0; li < layers.size(); ++li) {
    const RealLayer& L0 = layers[li];
    const int Hq = L0.n_heads, H = L0.n_kv_heads, G = Hq / H;
    // The batch: sequence b holds the layer's first lens[b] tokens (same text, different lengths).
    const std::vector<uint16_t> kr = rotate_bf16(L0.k), vr = rotate_bf16(L0.v), qr = rotate_bf16(L0.q);
    std::vector<uint16_t> k(size_t(B) * H * T * D), v(k.size()), q(size_t(B) * Hq * D);
    for (int b = 0; b < B; ++b) {
      std::memcpy(&k[size_t(b) * H * T * D], kr.data(), kr.size() * 2);
      std::memcpy(&v[size_t(b) * H * T * D], vr.data(), vr.size() * 2);
      for (int h = 0; h < Hq; ++h)  // query of the sequence's last token
        std::memcpy(&q[(size_t(b) * Hq + h) * D], &qr[(size_t(h) * T + lens[b] - 1) * D], D * 2);
    }
    uint16_t *dk, *dv, *dq;
    int32_t* dl;
    float* dout;
    CK(cudaMalloc(&dk, k.size() * 2)); CK(cudaMalloc(&dv, v.size() * 2)); CK(cudaMalloc(&dq, q.size() * 2));
    CK(cudaMalloc(&dl, B * 4)); CK(cudaMalloc(&dout, size_t(B) * Hq * D * 4));
    CK(cudaMemcpy(dk, k.data(), k.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dv, v.data(), v.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dl, lens.data(), B * 4, cudaMemcpyHostToDevice));
    const size_t ws = oscar_decode_workspace_bytes(B, Hq, H, D, T, 1);
    void* dws;
    CK(cudaMalloc(&dws, ws));
    // Checks the decoded outputs against the reference over `deq(b, h, t, c, is_v)`.
    auto check = [&](const char* fmt, int bits, auto deq) {
      std::vector<float> out(size_t(B) * Hq * D);
      CK(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost));
      double worst = 0, worst_orig = 0;
      std::vector<double> ref(D), qd(D);
      for (int b = 0; b < B; ++b)
        for (int h = 0; h < H; ++h) {
          std::vector<double> K(size_t(lens[b]) * D), V(K.size()), K0(K.size()), V0(K.size());
          for (int t = 0; t < lens[b]; ++t)
            for (int c = 0; c < D; ++c) {
              K[size_t(t) * D + c] = deq(b, h, t, c, false);
              V[size_t(t) * D + c] = deq(b, h, t, c, true);
              K0[size_t(t) * D + c] = oscar::bf16_bits_to_float(k[((size_t(b) * H + h) * T + t) * D + c]);
              V0[size_t(t) * D + c] = oscar::bf16_bits_to_float(v[((size_t(b) * H + h) * T + t) * D + c]);
            }
          for (int g = 0; g < G; ++g) {
            const int hq = h * G + g;
            for (int c = 0; c < D; ++c) qd[c] = oscar::bf16_bits_to_float(q[(size_t(b) * Hq + hq) * D + c]);
            attn_ref::attention(qd.data(), K, V, lens[b], D, scale, ref.data());
            const double e = attn_ref::rel_err(&out[(size_t(b) * Hq + hq) * D], ref.data(), D);
            worst = std::max(worst, e);
            EXPECT(e <= 1e-2, "layer %zu %s int%d b=%d (L=%d) hq=%d rel err %.3e", li, fmt, bits, b, lens[b], hq, e);
            attn_ref::attention(qd.data(), K0, V0, lens[b], D, scale, ref.data());
            worst_orig = std::max(worst_orig, attn_ref::rel_err(&out[(size_t(b) * Hq + hq) * D], ref.data(), D));
          }
        }
      std::printf("layer %zu %s int%d: max rel err %.3e vs the dequantized cache (%.3e vs unquantized, information)\n", li, fmt,
                  bits, worst, worst_orig);
    };
    for (int bits : {2, 4}) {
      // oscar-cov
      {
        oscar_cov_cache c{};
        const int S = oscar::covfmt::kDefaultSink, W = oscar::covfmt::kDefaultRecent;
        c.batch = B; c.num_kv_heads = H; c.head_dim = D; c.bits = bits; c.sink = S; c.recent = W;
        c.body_capacity = T - S - W; c.clip_k = oscar::covfmt::kClipK; c.clip_v = oscar::covfmt::kClipV;
        const size_t bh = size_t(B) * H, cb = D * bits / 8;
        void** p[8] = {&c.k_sink, &c.v_sink, &c.k_recent, &c.v_recent, &c.k_codes, &c.v_codes, &c.k_params, &c.v_params};
        const size_t sz[8] = {bh * S * D * 2, bh * S * D * 2, bh * W * D * 2, bh * W * D * 2,
                              bh * c.body_capacity * cb, bh * c.body_capacity * cb, bh * c.body_capacity * 4, bh * c.body_capacity * 4};
        for (int i = 0; i < 8; ++i) CK(cudaMalloc(p[i], sz[i] + 16));
        EXPECT(oscar_cov_prefill(&c, dk, dv, dl, T, nullptr, &err) == OSCAR_OK, "cov prefill: %s", err.message);
        EXPECT(oscar_cov_decode(&c, dq, Hq, dl, T, float(scale), dout, dws, ws, nullptr, &err) == OSCAR_OK, "cov decode: %s", err.message);
        CK(cudaDeviceSynchronize());
        const auto ks = get<uint16_t>(c.k_sink, sz[0]), vs = get<uint16_t>(c.v_sink, sz[1]);
        const auto krc = get<uint16_t>(c.k_recent, sz[2]), vrc = get<uint16_t>(c.v_recent, sz[3]);
        const auto kc = get<uint8_t>(c.k_codes, sz[4]), vc = get<uint8_t>(c.v_codes, sz[5]);
        const auto kp = get<uint32_t>(c.k_params, sz[6]), vp = get<uint32_t>(c.v_params, sz[7]);
        check("oscar-cov", bits, [&](int b, int h, int t, int ch, bool is_v) -> double {
          const size_t bhi = size_t(b) * H + h;
          const int64_t nb = oscar::covfmt::body_tokens(lens[b], S, W);
          if (t < S) return oscar::bf16_bits_to_float((is_v ? vs : ks)[(bhi * S + t) * D + ch]);
          if (t - S < nb) {
            const size_t bi = bhi * c.body_capacity + (t - S);
            const uint32_t pr = (is_v ? vp : kp)[bi];
            return oscar::unpack_code(&(is_v ? vc : kc)[bi * cb], ch, bits) * double(oscar::half_bits_to_float(uint16_t(pr))) +
                   oscar::half_bits_to_float(uint16_t(pr >> 16));
          }
          return oscar::bf16_bits_to_float((is_v ? vrc : krc)[(bhi * W + (t - S) % W) * D + ch]);
        });
        for (int i = 0; i < 8; ++i) cudaFree(*p[i]);
      }
      // oscar-omni
      {
        oscar_omni_cache c{};
        const int64_t cap = (T + 127) / 128 * 128;
        c.batch = B; c.num_kv_heads = H; c.head_dim = D; c.bits = bits; c.body_capacity = cap;
        const size_t bh = size_t(B) * H, cb = D * bits / 8;
        void** p[7] = {&c.k_res, &c.v_res, &c.k_codes, &c.v_codes, &c.k_params, &c.v_params, &c.k_norms};
        const size_t sz[7] = {bh * 128 * D * 2, bh * 128 * D * 2, bh * cap * cb, bh * cap * cb, bh * (cap / 32) * D * 4,
                              bh * cap * (D / 32) * 4, size_t(B) * cap * 2};
        for (int i = 0; i < 7; ++i) { CK(cudaMalloc(p[i], sz[i] + 16)); CK(cudaMemset(*p[i], 0, sz[i])); }
        EXPECT(oscar_omni_prefill(&c, dk, dv, dl, T, nullptr, &err) == OSCAR_OK, "omni prefill: %s", err.message);
        EXPECT(oscar_omni_decode(&c, dq, Hq, dl, T, float(scale), dout, dws, ws, nullptr, &err) == OSCAR_OK, "omni decode: %s", err.message);
        CK(cudaDeviceSynchronize());
        const omni_twin::Cache tw = omni_twin::build(k, v, lens, H, T, D, bits, cap);
        EXPECT(get<uint8_t>(c.k_codes, sz[2]) == tw.k_codes && get<uint8_t>(c.v_codes, sz[3]) == tw.v_codes &&
                   get<uint32_t>(c.k_params, sz[4]) == tw.k_params && get<uint32_t>(c.v_params, sz[5]) == tw.v_params &&
                   get<uint16_t>(c.k_norms, sz[6]) == tw.k_norms && get<uint16_t>(c.k_res, sz[0]) == tw.k_res &&
                   get<uint16_t>(c.v_res, sz[1]) == tw.v_res,
               "layer %zu omni int%d: device cache differs from the CPU twin", li, bits);
        check("oscar-omni", bits, [&](int b, int h, int t, int ch, bool is_v) -> double {
          return is_v ? omni_twin::value(tw, b, h, t, lens[b], ch) : omni_twin::key(tw, b, h, t, lens[b], ch);
        });
        for (int i = 0; i < 7; ++i) cudaFree(*p[i]);
      }
    }
    cudaFree(dk); cudaFree(dv); cudaFree(dq); cudaFree(dl); cudaFree(dout); cudaFree(dws);
  }
  CK(cudaGetLastError());
  std::printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
