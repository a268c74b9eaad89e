// test_kernel_bench.cpp: the kernel benchmark's output (lib 12_bench) keeps the format that
// experiments/regenerate.sh writes into RESULTS.md, its JSON parses with every number, and bad
// configurations or a missing GPU are one clear error.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "oscar/12_bench/kernel_bench.h"
#include "oscar_kernels.h"

using namespace oscar;

namespace {

KernelBenchResult sample() {
  KernelBenchResult r;
  r.device = "NVIDIA H100 80GB HBM3";
  r.head_dim = 128;
  r.q_heads = 32;
  r.kv_heads = 8;
  r.copy_tbps = 2.98437;
  r.decode.push_back({1, 32768, "bf16 (ours)", 68.04, 134217728, 1.97262, 0.66098, 1.0, 9.43});
  r.decode.push_back({1, 32768, "int2 oscar-cov", 31.46, 20185088, 0.64163, 0.21499, 2.16275, 7.06});
  r.prefill.push_back({8, 131072, "int4 oscar-omni", 7040.56, 4294967296.0, 1342439424.0});
  return r;
}

// The tables exactly as oscar-bench printed them with printf before the move.
std::string printf_tables(const KernelBenchResult& r) {
  std::string s;
  char line[512];
  s += "\n### Prefill quantize (K+V, rotations of the whole cache)\n\n| batch | ctx | format | us | GB read | GB written | TB/s (r+w) | "
       "vs copy |\n|---|---|---|---|---|---|---|---|\n";
  for (const auto& p : r.prefill) {
    std::snprintf(line, sizeof line, "| %d | %d | %s | %.1f | %.3f | %.3f | %.2f | %.0f%% |\n", p.batch, p.ctx, p.format.c_str(), p.us,
                  p.read / 1e9, p.written / 1e9, p.tbps(), 100.0 * p.tbps() / r.copy_tbps);
    s += line;
  }
  std::snprintf(line, sizeof line, "\n### Decode attention (%d q heads / %d KV heads, head_dim %d; copy %.3f TB/s)\n\n", r.q_heads,
                r.kv_heads, r.head_dim, r.copy_tbps);
  s += line;
  s += "| batch | ctx | kernel | us | MB read | TB/s read | vs copy | speed-up vs our bf16 | host us / call |\n"
       "|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& d : r.decode) {
    std::snprintf(line, sizeof line, "| %d | %d | %s | %.1f | %.1f | %.3f | %.0f%% | %.2fx | %.1f |\n", d.batch, d.ctx, d.kernel.c_str(),
                  d.us, d.bytes / 1e6, d.tbps, 100 * d.frac_copy, d.speedup_bf16, d.host_us);
    s += line;
  }
  return s;
}

}  // namespace

TEST_CASE("kernel benchmark tables keep oscar-bench's format", "[bench]") {
  const KernelBenchResult r = sample();
  const std::string md = kernel_bench_markdown(r);
  CHECK(md == printf_tables(r));
  CHECK_THAT(md, Catch::Contains("| 1 | 32768 | int2 oscar-cov | 31.5 | 20.2 | 0.642 | 21% | 2.16x | 7.1 |"));
  CHECK_THAT(md, Catch::Contains("| 8 | 131072 | int4 oscar-omni | 7040.6 | 4.295 | 1.342 | 0.80 | 27% |"));
}

TEST_CASE("kernel benchmark JSON carries every number", "[bench]") {
  const KernelBenchResult r = sample();
  const auto j = nlohmann::json::parse(kernel_bench_json(r));
  CHECK(j["device"] == r.device);
  CHECK(j["copy_tbps_read_plus_write"].get<double>() == Approx(2.9844));
  REQUIRE(j["decode"].size() == 2);
  CHECK(j["decode"][1]["kernel"] == "int2 oscar-cov");
  CHECK(j["decode"][1]["bytes_read"].get<double>() == 20185088);
  CHECK(j["decode"][1]["speedup_vs_bf16"].get<double>() == Approx(2.16275).epsilon(1e-4));
  CHECK(j["decode"][1]["host_us"].get<double>() == Approx(7.06));
  REQUIRE(j["prefill"].size() == 1);
  CHECK(j["prefill"][0]["bytes_written"].get<double>() == 1342439424.0);
  CHECK(j["prefill"][0]["tbps"].get<double>() == Approx(r.prefill[0].tbps()).epsilon(1e-4));
}

TEST_CASE("kernel benchmark rejects bad shapes before touching the GPU", "[bench]") {
  KernelBenchConfig c;
  c.reps = 0;
  CHECK_THROWS_WITH(run_kernel_bench(c), Catch::Contains("--reps 0"));
  c = {};
  c.ctxs = {4096, -1};
  CHECK_THROWS_WITH(run_kernel_bench(c), Catch::Contains("--ctx -1"));
  c = {};
  c.q_heads = 12;
  CHECK_THROWS_WITH(run_kernel_bench(c), Catch::Contains("multiple of the KV heads"));
  c = {};
  c.head_dim = 96;
  CHECK_THROWS_WITH(run_kernel_bench(c), Catch::Contains("--head-dim 96") && Catch::Contains("64, 128 or 256"));
  c = {};
  c.q_heads = 136;  // 17 per KV head
  CHECK_THROWS_WITH(run_kernel_bench(c), Catch::Contains("at most 16"));
}

TEST_CASE("kernel benchmark without a GPU: one error, no JSON file", "[bench]") {
  if (oscar_device_count() > 0) return;  // with a GPU it would run the benchmark
  const std::string json = std::string(OSCAR_BUILD_DIR) + "/test_kernel_bench_nogpu.json";
  std::remove(json.c_str());
  CHECK_THROWS_WITH(kernel_bench({}, json), Catch::StartsWith("no CUDA device is visible"));
  CHECK_FALSE(std::filesystem::exists(json));
  std::ofstream(json + ".file") << "x";
  CHECK_THROWS_WITH(kernel_bench({}, json + ".file/x.json"), Catch::Contains("no CUDA device") || Catch::Contains("not a folder"));
}
