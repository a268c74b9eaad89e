// gpu_test_kv_quant.cu: the oscar-cov cache writers (oscar_cov_prefill, oscar_cov_append) against a CPU
// twin that applies oscar/quant_rules.h and the layout of oscar/cov_format.h: codes, scales,
// zeros and BF16 windows must match bit for bit. Lengths are not multiples of any block, one sequence is
// shorter than sink + recent, and the append path crosses the window overflow (demotion into the body).
// Exits 77 (CTest: skipped) when no GPU is present.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "oscar/float_formats.h"
#include "oscar/cov_format.h"
#include "oscar/quant_rules.h"
#include "oscar_kv.h"

#include "gpu_check.h"

namespace {
constexpr int D = 128;

struct HostCache {  // host copies of every cache array
  std::vector<uint16_t> ks, vs, kr, vr;
  std::vector<uint8_t> kc, vc;
  std::vector<uint32_t> kp, vp;
};

struct DevCache {
  oscar_cov_cache c{};
  void alloc(int B, int H, int bits, int S, int W, int64_t cap) {
    c.batch = B; c.num_kv_heads = H; c.head_dim = D; c.bits = bits; c.sink = S; c.recent = W; c.body_capacity = cap;
    c.clip_k = oscar::covfmt::kClipK; c.clip_v = oscar::covfmt::kClipV;
    const size_t bh = size_t(B) * H;
    auto m = [](void** p, size_t n) { cudaMalloc(p, n ? n : 16); cudaMemset(*p, 0xAB, n ? n : 16); };
    m(&c.k_sink, bh * S * D * 2); m(&c.v_sink, bh * S * D * 2);
    m(&c.k_recent, bh * W * D * 2); m(&c.v_recent, bh * W * D * 2);
    m(&c.k_codes, bh * cap * D * bits / 8); m(&c.v_codes, bh * cap * D * bits / 8);
    m(&c.k_params, bh * cap * 4); m(&c.v_params, bh * cap * 4);
  }
  void free() {
    for (void* p : {c.k_sink, c.v_sink, c.k_recent, c.v_recent, c.k_codes, c.v_codes, c.k_params, c.v_params}) cudaFree(p);
  }
  HostCache download() const {
    HostCache h;
    const size_t bh = size_t(c.batch) * c.num_kv_heads, cb = D * c.bits / 8;
    auto get = [](auto& v, const void* p, size_t n) { v.resize(n); cudaMemcpy(v.data(), p, n * sizeof(v[0]), cudaMemcpyDeviceToHost); };
    get(h.ks, c.k_sink, bh * c.sink * D); get(h.vs, c.v_sink, bh * c.sink * D);
    get(h.kr, c.k_recent, bh * c.recent * D); get(h.vr, c.v_recent, bh * c.recent * D);
    get(h.kc, c.k_codes, bh * c.body_capacity * cb); get(h.vc, c.v_codes, bh * c.body_capacity * cb);
    get(h.kp, c.k_params, bh * c.body_capacity); get(h.vp, c.v_params, bh * c.body_capacity);
    return h;
  }
};

// CPU twin of one body row: codes (packed per quant_rules) and (scale, zero) fp16 bits.
void cpu_quantize_row(const uint16_t* x16, int bits, float clip, uint8_t* codes, uint32_t* params) {
  float x[D];
  float mn = 0, mx = 0;
  for (int i = 0; i < D; ++i) {
    x[i] = oscar::bf16_bits_to_float(x16[i]);
    mn = i ? std::min(mn, x[i]) : x[i];
    mx = i ? std::max(mx, x[i]) : x[i];
  }
  const oscar::GroupParams p = oscar::group_params(mn, mx, bits, false, clip, oscar::ScaleDtype::F16);
  std::memset(codes, 0, D * bits / 8);
  for (int i = 0; i < D; ++i)
    oscar::pack_code(codes, i, oscar::quantize_value(x[i], p, bits, false, oscar::Rounding::HalfEven), bits);
  *params = uint32_t(oscar::float_to_half_bits(p.scale)) | (uint32_t(oscar::float_to_half_bits(p.zero)) << 16);
}

// Compares the live part of a downloaded cache with the CPU twin for sequences holding lens[b]
// tokens whose rows are k/v [B][H][T][D] (bf16 bits). Returns the number of mismatching rows.
int compare(const HostCache& h, const oscar_cov_cache& c, const std::vector<uint16_t>& k, const std::vector<uint16_t>& v, int T,
            const std::vector<int>& lens, const char* what) {
  const int S = c.sink, W = c.recent, bits = c.bits, cb = D * bits / 8;
  int bad = 0;
  std::vector<uint8_t> codes(cb);
  for (int b = 0; b < c.batch; ++b)
    for (int hh = 0; hh < c.num_kv_heads; ++hh) {
      const size_t bh = size_t(b) * c.num_kv_heads + hh;
      const int L = lens[b];
      const int64_t nb = oscar::covfmt::body_tokens(L, S, W);
      for (int t = 0; t < L; ++t)
        for (int tensor = 0; tensor < 2; ++tensor) {
          const uint16_t* src = (tensor ? v : k).data() + (bh * T + t) * D;
          bool ok;
          if (t < S) {
            ok = std::memcmp((tensor ? h.vs : h.ks).data() + (bh * S + t) * D, src, D * 2) == 0;
          } else if (t - S < nb) {
            uint32_t par;
            cpu_quantize_row(src, bits, tensor ? c.clip_v : c.clip_k, codes.data(), &par);
            const size_t bi = bh * c.body_capacity + (t - S);
            ok = std::memcmp((tensor ? h.vc : h.kc).data() + bi * cb, codes.data(), cb) == 0 && (tensor ? h.vp : h.kp)[bi] == par;
          } else {
            ok = std::memcmp((tensor ? h.vr : h.kr).data() + (bh * W + (t - S) % W) * D, src, D * 2) == 0;
          }
          if (!ok && bad++ < 5) std::printf("  %s: mismatch b=%d h=%d t=%d %s (L=%d nb=%lld)\n", what, b, hh, t, tensor ? "V" : "K", L, (long long)nb);
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
  std::mt19937 rng(4321);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int B = 4, H = 3, S = 64, W = 256;
  const std::vector<int> lens = {37, S + W + 101, 300, S + W + 777};  // one < S, one < S + W, two with a body
  const int T = S + W + 777 + 300;  // input rows per (b, h); room for the appended tokens
  const int64_t cap = T - S - W + 5;
  std::vector<uint16_t> k(size_t(B) * H * T * D), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    const float outlier = (i % 97 == 0) ? 8.f : 1.f;  // some channels with large values
    k[i] = oscar::float_to_bf16_bits(nd(rng) * outlier + 0.3f);
    v[i] = oscar::float_to_bf16_bits(nd(rng) * 0.5f - 0.1f);
  }
  for (int c = 0; c < D; ++c) k[size_t(2) * T * D + 5 * D + c] = oscar::float_to_bf16_bits(1.25f);  // a constant row
  uint16_t *dk, *dv;
  int32_t* dlens;
  CK(cudaMalloc(&dk, k.size() * 2));
  CK(cudaMalloc(&dv, v.size() * 2));
  CK(cudaMalloc(&dlens, B * 4));
  CK(cudaMemcpy(dk, k.data(), k.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dv, v.data(), v.size() * 2, cudaMemcpyHostToDevice));

  for (int bits : {2, 4}) {
    // 1) Prefill of every sequence to its length.
    DevCache dc;
    dc.alloc(B, H, bits, S, W, cap);
    oscar_error err{};
    CK(cudaMemcpy(dlens, lens.data(), B * 4, cudaMemcpyHostToDevice));
    oscar_status s = oscar_cov_prefill(&dc.c, dk, dv, dlens, T, nullptr, &err);
    EXPECT(s == OSCAR_OK, "prefill bits=%d: %s", bits, err.message);
    CK(cudaDeviceSynchronize());
    EXPECT(compare(dc.download(), dc.c, k, v, T, lens, "prefill") == 0, "prefill bits=%d codes differ from the CPU twin", bits);

    // 2) Append 300 tokens one at a time (crosses the recent-window overflow for every sequence).
    std::vector<int> cur = lens;
    std::vector<uint16_t> kn(size_t(B) * H * D), vn(kn.size());
    uint16_t *dkn, *dvn;
    CK(cudaMalloc(&dkn, kn.size() * 2));
    CK(cudaMalloc(&dvn, vn.size() * 2));
    for (int step = 0; step < 300; ++step) {
      int mx = 0;
      for (int b = 0; b < B; ++b) {
        for (int hh = 0; hh < H; ++hh) {
          std::memcpy(&kn[(size_t(b) * H + hh) * D], &k[((size_t(b) * H + hh) * T + cur[b]) * D], D * 2);
          std::memcpy(&vn[(size_t(b) * H + hh) * D], &v[((size_t(b) * H + hh) * T + cur[b]) * D], D * 2);
        }
        mx = std::max(mx, cur[b]);
      }
      CK(cudaMemcpy(dkn, kn.data(), kn.size() * 2, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dvn, vn.data(), vn.size() * 2, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dlens, cur.data(), B * 4, cudaMemcpyHostToDevice));
      s = oscar_cov_append(&dc.c, dkn, dvn, dlens, mx, nullptr, &err);
      if (s != OSCAR_OK) { EXPECT(false, "append step %d: %s", step, err.message); break; }
      for (int& L : cur) ++L;
    }
    CK(cudaDeviceSynchronize());
    EXPECT(compare(dc.download(), dc.c, k, v, T, cur, "append") == 0, "append bits=%d differs from the CPU twin", bits);
    cudaFree(dkn);
    cudaFree(dvn);

    // 3) Bad input.
    EXPECT(oscar_cov_prefill(&dc.c, dk, dv, dlens, int32_t(oscar_cov_capacity(&dc.c) + 1), nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT &&
               std::strstr(err.message, "capacity"), "max_len beyond capacity: %s", err.message);
    EXPECT(oscar_cov_append(&dc.c, dk, dv, dlens, int32_t(oscar_cov_capacity(&dc.c)), nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT,
           "append beyond capacity");
    EXPECT(oscar_cov_prefill(&dc.c, nullptr, dv, dlens, T, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT, "null k");
    EXPECT(oscar_cov_prefill(&dc.c, dk + 1, dv, dlens, T, nullptr, &err) == OSCAR_ERR_MISALIGNED, "misaligned k");
    oscar_cov_cache bad = dc.c;
    bad.bits = 3;
    EXPECT(oscar_cov_prefill(&bad, dk, dv, dlens, T, nullptr, &err) == OSCAR_ERR_UNSUPPORTED && std::strstr(err.message, "bits=3"), "bits 3");
    bad = dc.c;
    bad.head_dim = 96;
    EXPECT(oscar_cov_prefill(&bad, dk, dv, dlens, T, nullptr, &err) == OSCAR_ERR_UNSUPPORTED && std::strstr(err.message, "head_dim=96"), "hd 96");
    bad = dc.c;
    bad.k_codes = static_cast<char*>(bad.k_codes) + 2;
    EXPECT(oscar_cov_prefill(&bad, dk, dv, dlens, T, nullptr, &err) == OSCAR_ERR_MISALIGNED, "misaligned codes");
    bad = dc.c;
    bad.v_recent = nullptr;
    EXPECT(oscar_cov_append(&bad, dk, dv, dlens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT, "null recent");
    EXPECT(oscar_cov_prefill(nullptr, dk, dv, dlens, T, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT, "null cache");
    dc.free();
  }
  cudaFree(dk);
  cudaFree(dv);
  cudaFree(dlens);
  CK(cudaGetLastError());
  std::printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
