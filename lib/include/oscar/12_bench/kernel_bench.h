// kernel_bench.h: the kernel benchmark behind oscar-bench: decode-attention and prefill-quantize
// throughput of the oscar-cov and oscar-omni INT2/INT4 caches and of our BF16 baseline, through the C API
// (oscar_kv.h) only. Contract: caches come from oscar_cov_cache_create / oscar_omni_cache_create, bytes
// read and written from the format headers (oscar/cov_format.h, oscar/omni_format.h); CUDA-event timing,
// warm-up, median of repeats (and of each decode call's CPU time), caches rotated so that each repeat reads at least 256 MB (more than the L2).
// Throws Error (one line naming what is wrong and what to do) when no GPU is visible or a call fails.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

namespace oscar {

struct KernelBenchConfig {
  std::vector<int> batches{1, 8, 32};
  std::vector<int> ctxs{4096, 16384, 32768, 65536, 131072};
  int q_heads = 32, kv_heads = 8, head_dim = 128;
  int warmup = 5, reps = 30;
};

// One decode-attention measurement: `bytes` is what one decode step must read (format headers).
struct DecodeBenchRow {
  int batch = 0, ctx = 0;
  std::string kernel;  // "bf16 (ours)", "int2 oscar-cov", "int4 oscar-omni", ...
  double us = 0, bytes = 0, tbps = 0, frac_copy = 0, speedup_bf16 = 0;
  double host_us = 0;  // CPU time of one call (the GPU idle before it): the library's fixed cost on the host
};

// One prefill-quantize measurement: bf16 K+V read, the cache's arrays written.
struct PrefillBenchRow {
  int batch = 0, ctx = 0;
  std::string format;  // e.g. "int2 oscar-cov"
  double us = 0, read = 0, written = 0;
  double tbps() const { return (read + written) / (us * 1e-6) / 1e12; }
};

struct KernelBenchResult {
  std::string device;
  int head_dim = 128, q_heads = 0, kv_heads = 0;
  double copy_tbps = 0;  // device-to-device copy, bytes read + written, measured in the same run
  std::vector<DecodeBenchRow> decode;
  std::vector<PrefillBenchRow> prefill;
};

// Runs every (batch, ctx) of `cfg`, printing the device line and any skipped shape to `log` as it goes.
KernelBenchResult run_kernel_bench(const KernelBenchConfig& cfg, std::FILE* log = stdout);

// The two Markdown tables oscar-bench prints (experiments/regenerate.sh writes them into RESULTS.md).
std::string kernel_bench_markdown(const KernelBenchResult& r);
// Every number as JSON.
std::string kernel_bench_json(const KernelBenchResult& r);

// oscar-bench: checks that `json_path`'s folder exists (when a path is given), runs the benchmark, prints
// the device line and the Markdown tables to `out`, then writes the JSON (under its name only when complete).
void kernel_bench(const KernelBenchConfig& cfg, const std::string& json_path, std::FILE* out = stdout);

}  // namespace oscar
