// oscar_bench.cpp: oscar-bench: decode-attention and prefill-quantize throughput of the oscar-cov and
// oscar-omni INT2/INT4 caches and of our BF16 baseline, on Llama-3-8B attention shapes (32 query / 8 KV heads,
// head_dim 128), through the C API only (oscar_kv.h) and the CUDA runtime. CUDA-event timing, warm-up,
// median of repeats; caches rotated so every repeat reads at least 256 MB (more than the 50 MB L2);
// a device-to-device copy measured in the same run gives the bandwidth ceiling. Prints a Markdown
// table; --json FILE writes every number.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <random>
#include <string>
#include <vector>

#include <cerrno>

#include "app_main.h"
#include "oscar/01_core/output_files.h"
#include "oscar/kv_cache_format.h"
#include "oscar/omni_format.h"
#include "oscar_kv.h"

namespace {

struct Row {
  int batch = 0, ctx = 0;
  std::string kernel;
  double us = 0, bytes = 0, tbps = 0, frac_copy = 0, speedup_bf16 = 0;
};
struct PrefillRow {
  int batch = 0, ctx = 0;
  std::string format;  // e.g. "int2 oscar-cov"
  double us = 0, read = 0, written = 0;
  double tbps() const { return (read + written) / (us * 1e-6) / 1e12; }
};

#define CUDA_OK(call)                                                                                     \
  do {                                                                                                    \
    const cudaError_t e_ = (call);                                                                        \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(e_)); \
  } while (0)
#define OSCAR_OK_(call)                                                                                   \
  do {                                                                                                    \
    oscar_error err_{};                                                                                   \
    const oscar_status s_ = (call);                                                                       \
    if (s_ != OSCAR_OK) throw std::runtime_error(std::string(#call) + ": " + err_.message);             \
  } while (0)

template <class F>
double time_median_us(F&& f, int warmup, int reps) {
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) f(i);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    CUDA_OK(cudaEventRecord(a));
    f(warmup + i);
    CUDA_OK(cudaEventRecord(b));
    CUDA_OK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// `chunk`: a host buffer of N(0,1) bf16 values made on first use and reused for every fill.
void fill_random_bf16(uint16_t* dst, size_t n, std::mt19937& rng, std::vector<uint16_t>& chunk) {
  if (chunk.empty()) {
    chunk.resize(size_t(1) << 24);  // 32 MB of N(0,1) bf16
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& x : chunk) {
      float f = nd(rng);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      x = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
  }
  for (size_t off = 0; off < n; off += chunk.size()) {
    const size_t m = std::min(chunk.size(), n - off);
    const size_t start = (off / chunk.size() * 7919) % (chunk.size() - m + 1);  // vary the data between copies
    CUDA_OK(cudaMemcpy(dst + off, chunk.data() + start, m * 2, cudaMemcpyHostToDevice));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oscar-bench: decode attention (INT2/INT4 oscar-cov vs BF16) and prefill-quantize throughput"};
  std::vector<int> batches{1, 8, 32};
  std::vector<int> ctxs{4096, 16384, 32768, 65536, 131072};
  int hq = 32, hkv = 8, warmup = 5, reps = 30;
  std::string json;
  app.add_option("--batch", batches, "batch sizes");
  app.add_option("--ctx", ctxs, "context lengths (tokens)");
  app.add_option("--q-heads", hq, "query heads");
  app.add_option("--kv-heads", hkv, "KV heads");
  app.add_option("--reps", reps, "timed repeats (median reported)");
  app.add_option("--warmup", warmup, "warm-up runs");
  app.add_option("--json", json, "write the results as JSON to this file");
  return oscar::run_app("oscar-bench", app, argc, argv, [&]() -> int {
  try {
    if (!json.empty()) oscar::check_output_file(json);  // before minutes of benchmarking
    if (oscar_device_count() == 0) throw std::runtime_error("no CUDA device visible");
    cudaDeviceProp prop{};
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    const int D = 128, S = oscar::kvfmt::kDefaultSink, W = oscar::kvfmt::kDefaultRecent;
    const double min_bytes = 256e6;
    std::mt19937 rng(1);
    std::vector<uint16_t> chunk;

    // Copy ceiling: 1 GiB device-to-device, bytes read + written.
    double copy_tbps = 0;
    {
      const size_t n = size_t(1) << 30;
      void *a, *b;
      CUDA_OK(cudaMalloc(&a, n));
      CUDA_OK(cudaMalloc(&b, n));
      CUDA_OK(cudaMemset(a, 1, n));
      const double us = time_median_us([&](int) { CUDA_OK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice)); }, 3, 20);
      copy_tbps = 2.0 * n / (us * 1e-6) / 1e12;
      cudaFree(a);
      cudaFree(b);
    }
    std::printf("device: %s (%d SMs, L2 %d MB); copy bandwidth (read+write): %.3f TB/s\n", prop.name, prop.multiProcessorCount,
                prop.l2CacheSize >> 20, copy_tbps);

    std::vector<Row> rows;
    std::vector<PrefillRow> prefill;
    for (int B : batches)
      for (int ctx : ctxs) {
        const size_t bh = size_t(B) * hkv;
        const size_t bf16_bytes = bh * size_t(ctx) * D * 2 * 2;  // K + V
        const int nrot = int(std::min<double>(64, std::ceil(min_bytes / double(bf16_bytes))));
        size_t free_b = 0, total_b = 0;
        CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
        const double need = double(nrot) * (bf16_bytes * (1.0 + 136.0 / 512 + 72.0 / 512 + 162.0 / 512)) + 1e9;
        if (need > double(free_b)) {
          std::printf("skip batch=%d ctx=%d: needs %.1f GB, %.1f GB free\n", B, ctx, need / 1e9, free_b / 1e9);
          continue;
        }
        // BF16 caches (also the prefill input), nrot rotations.
        uint16_t *k16, *v16, *q;
        const size_t per = bh * size_t(ctx) * D;
        CUDA_OK(cudaMalloc(&k16, per * nrot * 2));
        CUDA_OK(cudaMalloc(&v16, per * nrot * 2));
        fill_random_bf16(k16, per * nrot, rng, chunk);
        fill_random_bf16(v16, per * nrot, rng, chunk);
        CUDA_OK(cudaMalloc(&q, size_t(B) * hq * D * 2));
        fill_random_bf16(q, size_t(B) * hq * D, rng, chunk);
        std::vector<int32_t> hl(B, ctx);
        int32_t* lens;
        CUDA_OK(cudaMalloc(&lens, B * 4));
        CUDA_OK(cudaMemcpy(lens, hl.data(), B * 4, cudaMemcpyHostToDevice));
        float* out;
        CUDA_OK(cudaMalloc(&out, size_t(B) * hq * D * 4));
        const float scale = 1.0f / std::sqrt(float(D));

        const size_t ws16 = oscar_kv_decode_workspace_bytes(B, hq, hkv, D, ctx, 0);
        const size_t wsq = oscar_kv_decode_workspace_bytes(B, hq, hkv, D, ctx, 1);
        void* ws;
        CUDA_OK(cudaMalloc(&ws, std::max(ws16, wsq)));
        const double bf16_read = double(bf16_bytes);
        const double us16 = time_median_us(
            [&](int i) {
              const size_t r = size_t(i % nrot) * per;
              OSCAR_OK_(oscar_bf16_decode(k16 + r, v16 + r, B, hkv, ctx, D, q, hq, lens, ctx, scale, out, ws, ws16, nullptr, &err_));
            },
            warmup, reps);
        rows.push_back({B, ctx, "bf16 (ours)", us16, bf16_read, bf16_read / (us16 * 1e-6) / 1e12, 0, 1.0});

        for (int bits : {2, 4}) {
          const int64_t cap = std::max<int64_t>(0, int64_t(ctx) - S - W);
          const size_t cb = size_t(D) * bits / 8;
          const size_t sz[8] = {bh * S * D * 2, bh * S * D * 2, bh * W * D * 2, bh * W * D * 2, bh * cap * cb, bh * cap * cb, bh * cap * 4, bh * cap * 4};
          void* base[8];
          for (int i = 0; i < 8; ++i) CUDA_OK(cudaMalloc(&base[i], sz[i] * nrot + 16));
          auto view = [&](int r) {
            oscar_kv_cache c{};
            c.batch = B; c.num_kv_heads = hkv; c.head_dim = D; c.bits = bits; c.sink = S; c.recent = W; c.body_capacity = cap;
            c.clip_k = oscar::kvfmt::kClipK; c.clip_v = oscar::kvfmt::kClipV;
            void** p[8] = {&c.k_sink, &c.v_sink, &c.k_recent, &c.v_recent, &c.k_codes, &c.v_codes, &c.k_params, &c.v_params};
            for (int i = 0; i < 8; ++i) *p[i] = static_cast<char*>(base[i]) + sz[i] * r;
            return c;
          };
          // Prefill-quantize every rotation (timed on rotation order too).
          const double pre_read = double(bf16_bytes);
          double pre_write = 0;
          for (int i = 0; i < 8; ++i) pre_write += double(sz[i]);
          const double uspre = time_median_us(
              [&](int i) {
                const int r = i % nrot;
                const oscar_kv_cache c = view(r);
                OSCAR_OK_(oscar_kv_prefill(&c, k16 + size_t(r) * per, v16 + size_t(r) * per, lens, ctx, nullptr, &err_));
              },
              nrot, std::max(reps / 2, nrot));
          prefill.push_back({B, ctx, "int" + std::to_string(bits) + " oscar-cov", uspre, pre_read, pre_write});
          const double read = double(bh) * oscar::kvfmt::decode_read_bytes(ctx, D, bits, S, W);
          const double us = time_median_us(
              [&](int i) {
                const oscar_kv_cache c = view(i % nrot);
                OSCAR_OK_(oscar_kv_decode(&c, q, hq, lens, ctx, scale, out, ws, wsq, nullptr, &err_));
              },
              warmup, reps);
          rows.push_back({B, ctx, bits == 2 ? "int2 oscar-cov" : "int4 oscar-cov", us, read, read / (us * 1e-6) / 1e12, 0, us16 / us});
          for (int i = 0; i < 8; ++i) cudaFree(base[i]);
        }
        for (int bits : {2, 4}) {  // oscar-omni: the whole context in the body (residual empty)
          const int64_t cap = int64_t(ctx) / oscar::omnifmt::kResidual * oscar::omnifmt::kResidual;
          const size_t cb = size_t(D) * bits / 8;
          const size_t sz[7] = {bh * 128 * D * 2, bh * 128 * D * 2, bh * cap * cb, bh * cap * cb, bh * (cap / 32) * D * 4,
                                bh * cap * (D / 32) * 4, size_t(B) * cap * 2};
          void* base[7];
          for (int i = 0; i < 7; ++i) CUDA_OK(cudaMalloc(&base[i], sz[i] * nrot + 16));
          auto view = [&](int r) {
            oscar_omni_cache c{};
            c.batch = B; c.num_kv_heads = hkv; c.head_dim = D; c.bits = bits; c.body_capacity = cap;
            void** p[7] = {&c.k_res, &c.v_res, &c.k_codes, &c.v_codes, &c.k_params, &c.v_params, &c.k_norms};
            for (int i = 0; i < 7; ++i) *p[i] = static_cast<char*>(base[i]) + sz[i] * r;
            return c;
          };
          const double pre_read = double(bf16_bytes);
          double pre_write = 0;
          for (int i = 2; i < 7; ++i) pre_write += double(sz[i]);
          const double uspre = time_median_us(
              [&](int i) {
                const int r = i % nrot;
                const oscar_omni_cache c = view(r);
                OSCAR_OK_(oscar_omni_prefill(&c, k16 + size_t(r) * per, v16 + size_t(r) * per, lens, ctx, nullptr, &err_));
              },
              nrot, std::max(reps / 2, nrot));
          prefill.push_back({B, ctx, "int" + std::to_string(bits) + " oscar-omni", uspre, pre_read, pre_write});
          const double read = double(bh) * oscar::omnifmt::decode_read_bytes(ctx, D, bits, hkv);
          const double us = time_median_us(
              [&](int i) {
                const oscar_omni_cache c = view(i % nrot);
                OSCAR_OK_(oscar_omni_decode(&c, q, hq, lens, ctx, scale, out, ws, wsq, nullptr, &err_));
              },
              warmup, reps);
          rows.push_back({B, ctx, bits == 2 ? "int2 oscar-omni" : "int4 oscar-omni", us, read, read / (us * 1e-6) / 1e12, 0, us16 / us});
          for (int i = 0; i < 7; ++i) cudaFree(base[i]);
        }
        cudaFree(k16); cudaFree(v16); cudaFree(q); cudaFree(lens); cudaFree(out); cudaFree(ws);
        CUDA_OK(cudaGetLastError());
      }
    for (auto& r : rows) r.frac_copy = r.tbps / copy_tbps;

    std::printf("\n### Prefill quantize (K+V, rotations of the whole cache)\n\n| batch | ctx | format | us | GB read | GB written | TB/s (r+w) | vs copy |\n|---|---|---|---|---|---|---|---|\n");
    for (const PrefillRow& p : prefill)
      std::printf("| %d | %d | %s | %.1f | %.3f | %.3f | %.2f | %.0f%% |\n", p.batch, p.ctx, p.format.c_str(), p.us, p.read / 1e9,
                  p.written / 1e9, p.tbps(), 100.0 * p.tbps() / copy_tbps);
    std::printf("\n### Decode attention (%d q heads / %d KV heads, head_dim %d; copy %.3f TB/s)\n\n", hq, hkv, D, copy_tbps);
    std::printf("| batch | ctx | kernel | us | MB read | TB/s read | vs copy | speed-up vs our bf16 |\n|---|---|---|---|---|---|---|---|\n");
    for (auto& r : rows)
      std::printf("| %d | %d | %s | %.1f | %.1f | %.3f | %.0f%% | %.2fx |\n", r.batch, r.ctx, r.kernel.c_str(), r.us, r.bytes / 1e6, r.tbps,
                  100 * r.frac_copy, r.speedup_bf16);
    if (!json.empty()) {
      oscar::AtomicOutput out(json);
      FILE* f = std::fopen(out.temp_path().c_str(), "w");
      if (!f) oscar::fail_write(json, errno);
      std::fprintf(f, "{\n  \"device\": \"%s\",\n  \"copy_tbps_read_plus_write\": %.4f,\n  \"decode\": [\n", prop.name, copy_tbps);
      for (size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        std::fprintf(f, "    {\"batch\": %d, \"ctx\": %d, \"kernel\": \"%s\", \"us\": %.3f, \"bytes_read\": %.0f, \"tbps\": %.4f, \"frac_copy\": %.4f, \"speedup_vs_bf16\": %.4f}%s\n",
                     r.batch, r.ctx, r.kernel.c_str(), r.us, r.bytes, r.tbps, r.frac_copy, r.speedup_bf16, i + 1 < rows.size() ? "," : "");
      }
      std::fprintf(f, "  ],\n  \"prefill\": [\n");
      for (size_t i = 0; i < prefill.size(); ++i) {
        const PrefillRow& p = prefill[i];
        std::fprintf(f, "    {\"batch\": %d, \"ctx\": %d, \"format\": \"%s\", \"us\": %.3f, \"bytes_read\": %.0f, \"bytes_written\": %.0f, \"tbps\": %.4f, \"frac_copy\": %.4f}%s\n",
                     p.batch, p.ctx, p.format.c_str(), p.us, p.read, p.written, p.tbps(), p.tbps() / copy_tbps, i + 1 < prefill.size() ? "," : "");
      }
      std::fprintf(f, "  ]\n}\n");
      if (std::fflush(f) != 0 || std::ferror(f)) {
        const int e = errno;
        std::fclose(f);
        oscar::fail_write(json, e);
      }
      std::fclose(f);
      out.commit();
    }
    return 0;
  } catch (const oscar::Error&) {
    throw;  // one line from run_app
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oscar-bench: error: %s\n", e.what());
    return 1;
  }
  });
}
