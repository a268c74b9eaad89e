// oscar-bench: decode-attention and prefill-quantize throughput of the oscar-cov and oscar-omni INT2/INT4
// caches and of our BF16 baseline, on Llama-3-8B attention shapes by default (32 query / 8 KV heads,
// head_dim 128; --head-dim 64 or 256). Prints Markdown tables; --json FILE writes every number. The work: lib 12_bench.
#include "app_main.h"
#include "oscar/14_bench/kernel_bench.h"

int main(int argc, char** argv) {
  CLI::App app{"oscar-bench: decode attention (INT2/INT4 oscar-cov and oscar-omni vs BF16) and prefill-quantize throughput"};
  oscar::cli::show_defaults(app);
  oscar::KernelBenchConfig cfg;
  std::string json;
  app.add_option("--batch", cfg.batches, "batch sizes, space-separated (e.g. --batch 1 8 32)");
  app.add_option("--ctx", cfg.ctxs, "context lengths in tokens, space-separated");
  app.add_option("--q-heads", cfg.q_heads, "query heads");
  app.add_option("--kv-heads", cfg.kv_heads, "KV heads");
  app.add_option("--head-dim", cfg.head_dim, "head_dim (64, 128 or 256; formats without a kernel for it are left out)");
  app.add_option("--reps", cfg.reps, "timed repeats (median reported)");
  app.add_option("--warmup", cfg.warmup, "warm-up runs");
  app.add_option("--json", json, "write the results as JSON to this file");
  return oscar::run_app("oscar-bench", app, argc, argv, [&] {
    oscar::kernel_bench(cfg, json);
    return 0;
  });
}
