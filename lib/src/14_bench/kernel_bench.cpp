// kernel_bench.cpp: the kernel benchmark (oscar-bench): CUDA-event timing of the C API's prefill and
// decode entry points on caches allocated by the format units' helpers.
#include "oscar/14_bench/kernel_bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <utility>

#include <fmt/format.h>

#include "oscar/01_core/error.h"
#include "oscar/01_core/file_io.h"
#include "oscar/cov_format.h"
#include "oscar/float_formats.h"
#include "oscar/omni_format.h"
#include "oscar_kv.h"

namespace oscar {

namespace {

constexpr double kMinBytes = 256e6;   // bytes each timed repeat reads, at least (rotated caches)
constexpr int kMaxRotations = 64;

void cuda_check(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    fail("kernel benchmark: {} failed: {} ({}); check the GPU with nvidia-smi and retry with fewer or smaller shapes", call,
         cudaGetErrorName(e), cudaGetErrorString(e));
}
#define OSCAR_BENCH_CUDA(call) cuda_check((call), #call)

// `call`: the call's source text or the C entry point's name; the name (up to the first parenthesis) goes into the message.
void status_check(oscar_status s, const oscar_error& err, const char* call) {
  if (s != OSCAR_OK) {
    const std::string fn(call, std::strcspn(call, "("));
    fail("kernel benchmark: {} returned {}: {}", fn, oscar_status_name(s), err.message);
  }
}
// Runs a C API call with a fresh oscar_error named err_ in scope; throws on a status other than OSCAR_OK.
#define OSCAR_BENCH_API(call)      \
  do {                             \
    oscar_error err_{};            \
    const oscar_status s_ = (call); \
    status_check(s_, err_, #call); \
  } while (0)

// Device memory owned for the duration of one shape.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { OSCAR_BENCH_CUDA(cudaMalloc(&p_, bytes)); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(p_); }

 private:
  void* p_ = nullptr;
};

// `n` caches of one format, each from the format unit's allocator, destroyed together.
template <class Cache, oscar_status (*Destroy)(Cache*, oscar_error*)>
class CacheSet {
 public:
  CacheSet() = default;
  ~CacheSet() {
    for (Cache& c : caches_) Destroy(&c, nullptr);
  }
  CacheSet(const CacheSet&) = delete;
  CacheSet& operator=(const CacheSet&) = delete;
  template <class Create>
  void add(Create&& create) {
    caches_.emplace_back();
    oscar_error err{};
    const oscar_status s = create(&caches_.back(), &err);
    if (s != OSCAR_OK) {
      caches_.pop_back();
      status_check(s, err, "the cache allocator");
    }
  }
  const Cache& operator[](size_t i) const { return caches_[i]; }

 private:
  std::vector<Cache> caches_;
};
using CovCaches = CacheSet<oscar_cov_cache, oscar_cov_cache_destroy>;
using OmniCaches = CacheSet<oscar_omni_cache, oscar_omni_cache_destroy>;

template <class F>
double time_median_us(F&& f, int warmup, int reps) {
  cudaEvent_t a, b;
  OSCAR_BENCH_CUDA(cudaEventCreate(&a));
  OSCAR_BENCH_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) f(i);
  OSCAR_BENCH_CUDA(cudaDeviceSynchronize());
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    OSCAR_BENCH_CUDA(cudaEventRecord(a));
    f(warmup + i);
    OSCAR_BENCH_CUDA(cudaEventRecord(b));
    OSCAR_BENCH_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    OSCAR_BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Median CPU time of one call f(i), each made with the GPU idle (so that no launch waits for the queue).
template <class F>
double host_median_us(F&& f, int reps) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    OSCAR_BENCH_CUDA(cudaDeviceSynchronize());
    const auto t0 = std::chrono::steady_clock::now();
    f(i);
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  OSCAR_BENCH_CUDA(cudaDeviceSynchronize());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// `chunk`: a host buffer of N(0,1) bf16 values made on first use and reused for every fill.
void fill_random_bf16(uint16_t* dst, size_t n, std::mt19937& rng, std::vector<uint16_t>& chunk) {
  if (chunk.empty()) {
    chunk.resize(size_t(1) << 24);  // 32 MB of N(0,1) bf16
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& x : chunk) x = float_to_bf16_bits(nd(rng));
  }
  for (size_t off = 0; off < n; off += chunk.size()) {
    const size_t m = std::min(chunk.size(), n - off);
    const size_t start = (off / chunk.size() * 7919) % (chunk.size() - m + 1);  // vary the data between copies
    OSCAR_BENCH_CUDA(cudaMemcpy(dst + off, chunk.data() + start, m * 2, cudaMemcpyHostToDevice));
  }
}

void check_config(const KernelBenchConfig& c) {
  if (c.batches.empty() || c.ctxs.empty()) fail("kernel benchmark: no shapes; give at least one --batch and one --ctx");
  for (int b : c.batches)
    if (b < 1) fail("kernel benchmark: --batch {} is not a positive batch size; use 1 or more", b);
  for (int l : c.ctxs)
    if (l < 1) fail("kernel benchmark: --ctx {} is not a positive context length; use 1 or more tokens", l);
  if (c.kv_heads < 1 || c.q_heads < c.kv_heads || c.q_heads % c.kv_heads != 0)
    fail("kernel benchmark: --q-heads {} / --kv-heads {}: the query heads must be a positive multiple of the KV heads", c.q_heads,
         c.kv_heads);
  if (c.reps < 1) fail("kernel benchmark: --reps {}: at least one timed repeat is needed", c.reps);
  if (c.warmup < 0) fail("kernel benchmark: --warmup {} is negative; use 0 or more", c.warmup);
  if (!oscar_cov_shape_supported(c.head_dim, 2) && !oscar_omni_shape_supported(c.head_dim, 2))
    fail("kernel benchmark: --head-dim {}: no decode kernel is compiled for it; use 64, 128 or 256", c.head_dim);
  if (c.q_heads / c.kv_heads > oscar_max_query_group())
    fail("kernel benchmark: --q-heads {} / --kv-heads {}: at most {} query heads per KV head", c.q_heads, c.kv_heads, oscar_max_query_group());
}

// One benchmarked shape on the device: nrot rotations of bf16 K/V [B][Hkv][ctx][D] (also the prefill input, `per`
// elements each), the query, the lengths, the output, the decode workspace (wsq bytes for the quantized formats) and the
// BF16 decode's median time us16.
struct BenchShape {
  int B = 0, ctx = 0, hq = 0, hkv = 0, D = 0, nrot = 0, warmup = 0, reps = 0;
  size_t bh = 0, per = 0, bf16_bytes = 0, wsq = 0;
  const uint16_t *k16 = nullptr, *v16 = nullptr, *q = nullptr;
  const int32_t* lens = nullptr;
  float* out = nullptr;
  void* ws = nullptr;
  float scale = 1.f;
  double us16 = 0;
};

// The quantized formats: their caches, plain prefill and decode, and the bytes a prefill writes and a decode reads.
struct CovBench {
  using Caches = CovCaches;
  using Cache = oscar_cov_cache;
  static constexpr const char* kName = "oscar-cov";
  static constexpr int S = covfmt::kDefaultSink, W = covfmt::kDefaultRecent;
  static bool supported(int D, int bits) { return oscar_cov_shape_supported(D, bits) != 0; }
  static oscar_status create(Cache* c, const BenchShape& x, int bits, oscar_error* e) {
    return oscar_cov_cache_create(c, x.B, x.hkv, x.D, bits, S, W, x.ctx, e);
  }
  static constexpr auto prefill = oscar_cov_prefill_plain;
  static constexpr auto decode = oscar_cov_decode_plain;
  static constexpr const char* kPrefill = "oscar_cov_prefill";
  static constexpr const char* kDecode = "oscar_cov_decode";
  // Prefill writes every array.
  static double prefill_write(const BenchShape& x, int bits) { return double(covfmt::layout(x.B, x.hkv, x.D, bits, x.ctx, S, W).total_bytes()); }
  static double decode_read(const BenchShape& x, int bits) { return double(x.bh) * double(covfmt::decode_read_bytes(x.ctx, x.D, bits, S, W)); }
};
struct OmniBench {
  using Caches = OmniCaches;
  using Cache = oscar_omni_cache;
  static constexpr const char* kName = "oscar-omni";
  static bool supported(int D, int bits) { return oscar_omni_shape_supported(D, bits) != 0; }
  static oscar_status create(Cache* c, const BenchShape& x, int bits, oscar_error* e) {
    return oscar_omni_cache_create(c, x.B, x.hkv, x.D, bits, x.ctx, e);
  }
  static constexpr auto prefill = oscar_omni_prefill_plain;
  static constexpr auto decode = oscar_omni_decode_plain;
  static constexpr const char* kPrefill = "oscar_omni_prefill";
  static constexpr const char* kDecode = "oscar_omni_decode";
  // Prefill writes the body (codes, key and value params, key norms); the residual block stays empty (whole residual
  // blocks in the body when ctx % 128 == 0).
  static double prefill_write(const BenchShape& x, int bits) {
    const omnifmt::Layout l = omnifmt::layout(x.B, x.hkv, x.D, bits, x.ctx);
    return double(l.total_bytes() - 2 * l.res_bytes);
  }
  static double decode_read(const BenchShape& x, int bits) { return double(x.bh) * omnifmt::decode_read_bytes(x.ctx, x.D, bits, x.hkv); }
};

// Prefill-quantize every rotation (timed on rotation order too: bf16 K+V in, the format's arrays out) and decode, of
// format F at `bits`.
template <class F>
void bench_format(const BenchShape& x, int bits, KernelBenchResult& res) {
  typename F::Caches caches;
  for (int r = 0; r < x.nrot; ++r) caches.add([&](typename F::Cache* c, oscar_error* e) { return F::create(c, x, bits, e); });
  const double uspre = time_median_us(
      [&](int i) {
        const size_t r = size_t(i % x.nrot);
        oscar_error err{};
        status_check(F::prefill(&caches[r], x.k16 + r * x.per, x.v16 + r * x.per, x.lens, x.ctx, nullptr, &err), err, F::kPrefill);
      },
      x.nrot, std::max(x.reps / 2, x.nrot));
  const std::string name = "int" + std::to_string(bits) + " " + F::kName;
  res.prefill.push_back({x.B, x.ctx, name, uspre, double(x.bf16_bytes), F::prefill_write(x, bits)});
  const double read = F::decode_read(x, bits);
  const auto dec = [&](int i) {
    oscar_error err{};
    status_check(F::decode(&caches[size_t(i % x.nrot)], x.q, x.hq, x.lens, x.ctx, x.scale, x.out, x.ws, x.wsq, nullptr, &err), err,
                 F::kDecode);
  };
  const double us = time_median_us(dec, x.warmup, x.reps);
  res.decode.push_back({x.B, x.ctx, name, us, read, read / (us * 1e-6) / 1e12, 0, x.us16 / us, host_median_us(dec, x.reps)});
}

// Bytes read + written per second of a 1 GiB device-to-device copy (TB/s): the copy ceiling.
double copy_tbps() {
  const size_t n = size_t(1) << 30;
  DeviceBuffer a(n), b(n);
  OSCAR_BENCH_CUDA(cudaMemset(a.as<void>(), 1, n));
  const double us = time_median_us(
      [&](int) { OSCAR_BENCH_CUDA(cudaMemcpyAsync(b.as<void>(), a.as<void>(), n, cudaMemcpyDeviceToDevice)); }, 3, 20);
  return 2.0 * n / (us * 1e-6) / 1e12;
}

// Rotations of the bf16 K/V that make each timed repeat read at least kMinBytes, or 0 (logged) when they and the
// largest quantized cache's rotations do not fit the free device memory.
int rotations_that_fit(const KernelBenchConfig& cfg, int B, int ctx, size_t bf16_bytes, std::FILE* log) {
  const int hkv = cfg.kv_heads, D = cfg.head_dim;
  const int nrot = int(std::min<double>(kMaxRotations, std::ceil(kMinBytes / double(bf16_bytes))));
  int64_t cache_bytes = 0;  // one format at a time
  for (int bits : {2, 4})
    cache_bytes = std::max({cache_bytes, oscar_cov_cache_bytes(B, hkv, D, bits, CovBench::S, CovBench::W, ctx),
                            oscar_omni_cache_bytes(B, hkv, D, bits, ctx)});
  size_t free_b = 0, total_b = 0;
  OSCAR_BENCH_CUDA(cudaMemGetInfo(&free_b, &total_b));
  const double need = double(nrot) * (double(bf16_bytes) + double(cache_bytes)) + 1e9;
  if (need <= double(free_b)) return nrot;
  fmt::print(log, "skip batch={} ctx={}: needs {:.1f} GB, {:.1f} GB free\n", B, ctx, need / 1e9, free_b / 1e9);
  std::fflush(log);
  return 0;
}

// Every format at batch B and context ctx: the BF16 baseline decode, then each quantized format's prefill and decode.
void bench_shape(const KernelBenchConfig& cfg, int B, int ctx, std::mt19937& rng, std::vector<uint16_t>& chunk, KernelBenchResult& res,
                 std::FILE* log) {
  BenchShape x;
  x.B = B, x.ctx = ctx, x.hq = cfg.q_heads, x.hkv = cfg.kv_heads, x.D = cfg.head_dim, x.warmup = cfg.warmup, x.reps = cfg.reps;
  x.bh = size_t(B) * x.hkv;
  x.bf16_bytes = x.bh * size_t(ctx) * x.D * 2 * 2;  // K + V
  if ((x.nrot = rotations_that_fit(cfg, B, ctx, x.bf16_bytes, log)) == 0) return;
  x.per = x.bh * size_t(ctx) * x.D;
  const size_t nq = size_t(B) * x.hq * x.D;
  DeviceBuffer k16b(x.per * x.nrot * 2), v16b(x.per * x.nrot * 2), qb(nq * 2), lensb(size_t(B) * 4), outb(nq * 4);
  fill_random_bf16(k16b.as<uint16_t>(), x.per * x.nrot, rng, chunk);
  fill_random_bf16(v16b.as<uint16_t>(), x.per * x.nrot, rng, chunk);
  fill_random_bf16(qb.as<uint16_t>(), nq, rng, chunk);
  const std::vector<int32_t> hl(B, ctx);
  OSCAR_BENCH_CUDA(cudaMemcpy(lensb.as<int32_t>(), hl.data(), size_t(B) * 4, cudaMemcpyHostToDevice));
  x.k16 = k16b.as<uint16_t>(), x.v16 = v16b.as<uint16_t>(), x.q = qb.as<uint16_t>(), x.lens = lensb.as<int32_t>(), x.out = outb.as<float>();
  x.scale = 1.0f / std::sqrt(float(x.D));
  const size_t ws16 = oscar_decode_workspace_bytes(B, x.hq, x.hkv, x.D, ctx, 0);
  x.wsq = oscar_decode_workspace_bytes(B, x.hq, x.hkv, x.D, ctx, 1);
  DeviceBuffer wsb(std::max(ws16, x.wsq));
  x.ws = wsb.as<void>();
  const double bf16_read = double(x.bf16_bytes);
  const auto dec16 = [&](int i) {
    const size_t r = size_t(i % x.nrot) * x.per;
    OSCAR_BENCH_API(oscar_bf16_decode(x.k16 + r, x.v16 + r, B, x.hkv, ctx, x.D, x.q, x.hq, x.lens, ctx, x.scale, x.out, x.ws, ws16,
                                      nullptr, &err_));
  };
  x.us16 = time_median_us(dec16, x.warmup, x.reps);
  res.decode.push_back({B, ctx, "bf16 (ours)", x.us16, bf16_read, bf16_read / (x.us16 * 1e-6) / 1e12, 0, 1.0, host_median_us(dec16, x.reps)});
  for (int bits : {2, 4})  // no kernel for this head_dim: skipped (the table says which ran)
    if (CovBench::supported(x.D, bits)) bench_format<CovBench>(x, bits, res);
  for (int bits : {2, 4})
    if (OmniBench::supported(x.D, bits)) bench_format<OmniBench>(x, bits, res);
  OSCAR_BENCH_CUDA(cudaGetLastError());
}

}  // namespace

KernelBenchResult run_kernel_bench(const KernelBenchConfig& cfg, std::FILE* log) {
  check_config(cfg);
  if (oscar_device_count() == 0)
    fail("no CUDA device is visible; the kernel benchmark needs an NVIDIA GPU (the kernels are built for sm_90a: H100, H200)");
  cudaDeviceProp prop{};
  OSCAR_BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::mt19937 rng(1);
  std::vector<uint16_t> chunk;
  KernelBenchResult res;
  res.device = prop.name;
  res.head_dim = cfg.head_dim;
  res.q_heads = cfg.q_heads;
  res.kv_heads = cfg.kv_heads;
  res.copy_tbps = copy_tbps();
  fmt::print(log, "device: {} ({} SMs, L2 {} MB); copy bandwidth (read+write): {:.3f} TB/s\n", prop.name,
             prop.multiProcessorCount, prop.l2CacheSize >> 20, res.copy_tbps);
  std::fflush(log);
  for (int B : cfg.batches)
    for (int ctx : cfg.ctxs) bench_shape(cfg, B, ctx, rng, chunk, res, log);
  for (auto& r : res.decode) r.frac_copy = r.tbps / res.copy_tbps;
  return res;
}

std::string kernel_bench_markdown(const KernelBenchResult& r) {
  std::string s =
      "\n### Prefill quantize (K+V, rotations of the whole cache)\n\n| batch | ctx | format | us | GB read | GB written | TB/s (r+w) | "
      "vs copy |\n|---|---|---|---|---|---|---|---|\n";
  for (const PrefillBenchRow& p : r.prefill)
    s += fmt::format("| {} | {} | {} | {:.1f} | {:.3f} | {:.3f} | {:.2f} | {:.0f}% |\n", p.batch, p.ctx, p.format, p.us, p.read / 1e9,
                     p.written / 1e9, p.tbps(), 100.0 * p.tbps() / r.copy_tbps);
  s += fmt::format("\n### Decode attention ({} q heads / {} KV heads, head_dim {}; copy {:.3f} TB/s)\n\n", r.q_heads, r.kv_heads,
                   r.head_dim, r.copy_tbps);
  s += "| batch | ctx | kernel | us | MB read | TB/s read | vs copy | speed-up vs our bf16 | host us / call |\n"
       "|---|---|---|---|---|---|---|---|---|\n";
  for (const DecodeBenchRow& d : r.decode)
    s += fmt::format("| {} | {} | {} | {:.1f} | {:.1f} | {:.3f} | {:.0f}% | {:.2f}x | {:.1f} |\n", d.batch, d.ctx, d.kernel, d.us,
                     d.bytes / 1e6, d.tbps, 100 * d.frac_copy, d.speedup_bf16, d.host_us);
  return s;
}

std::string kernel_bench_json(const KernelBenchResult& r) {
  std::string s = fmt::format("{{\n  \"device\": \"{}\",\n  \"copy_tbps_read_plus_write\": {:.4f},\n  \"decode\": [\n", r.device,
                              r.copy_tbps);
  for (size_t i = 0; i < r.decode.size(); ++i) {
    const DecodeBenchRow& d = r.decode[i];
    s += fmt::format(
        "    {{\"batch\": {}, \"ctx\": {}, \"kernel\": \"{}\", \"us\": {:.3f}, \"bytes_read\": {:.0f}, \"tbps\": {:.4f}, "
        "\"frac_copy\": {:.4f}, \"speedup_vs_bf16\": {:.4f}, \"host_us\": {:.3f}}}{}\n",
        d.batch, d.ctx, d.kernel, d.us, d.bytes, d.tbps, d.frac_copy, d.speedup_bf16, d.host_us, i + 1 < r.decode.size() ? "," : "");
  }
  s += "  ],\n  \"prefill\": [\n";
  for (size_t i = 0; i < r.prefill.size(); ++i) {
    const PrefillBenchRow& p = r.prefill[i];
    s += fmt::format(
        "    {{\"batch\": {}, \"ctx\": {}, \"format\": \"{}\", \"us\": {:.3f}, \"bytes_read\": {:.0f}, \"bytes_written\": {:.0f}, "
        "\"tbps\": {:.4f}, \"frac_copy\": {:.4f}}}{}\n",
        p.batch, p.ctx, p.format, p.us, p.read, p.written, p.tbps(), p.tbps() / r.copy_tbps, i + 1 < r.prefill.size() ? "," : "");
  }
  s += "  ]\n}\n";
  return s;
}

void kernel_bench(const KernelBenchConfig& cfg, const std::string& json_path, std::FILE* out) {
  std::optional<AtomicOutput> json;  // made first: a missing output folder fails before the run, not after
  if (!json_path.empty()) json.emplace(json_path);
  const KernelBenchResult r = run_kernel_bench(cfg, out);
  std::fputs(kernel_bench_markdown(r).c_str(), out);
  std::fflush(out);
  if (!json) return;
  const std::string s = kernel_bench_json(r);
  std::FILE* f = std::fopen(json->temp_path().c_str(), "w");
  if (!f) fail("{}: cannot write the JSON file ({}); check that its folder is writable", json_path, std::strerror(errno));
  const bool ok = std::fwrite(s.data(), 1, s.size(), f) == s.size();
  if (std::fclose(f) != 0 || !ok) fail("{}: writing the JSON file failed ({}); check the free space", json_path, std::strerror(errno));
  json->commit();
}

}  // namespace oscar
