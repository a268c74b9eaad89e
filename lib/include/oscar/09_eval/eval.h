// eval.h: oscar-eval's work: the model decodes with each recipe's quantized cache (QuantizedKvCache,
// token by token as a server would) and is compared with full precision: next-token loss and
// perplexity on held-out text, KL(full || quantized) of the next-token distributions, top-1 agreement;
// a recall test (a passage, unrelated text of growing length, the passage again: the loss on the
// repeat); and greedy generation from a fixed prompt. Calibrated recipes take their rotations from a
// calibration passage of the same text (never the evaluated one). With `gpu`, every quantized recipe
// attends on the GPU instead (GpuKvCache: the CUDA decode kernels over their own quantized cache); a
// recipe the kernels do not implement, or no CUDA device, stops the run before any work. fp16 (no
// quantizer) stays on the CPU.
#pragma once
#include <string>
#include <vector>

#include "oscar/06_quantize/recipe_yaml.h"

namespace oscar {

struct EvalRequest {
  std::string model, tokenizer, text;
  long offset = -404;  // evaluation passage (held-out Revelation by default)
  int tokens = 1024;
  long calib_offset = 0;  // calibration passage (Genesis)
  int calib_tokens = 1024;
  std::vector<RecipeFile> recipes;
  std::vector<int> bits{2};
  std::vector<int> recall_distances;  // empty: no recall test
  int recall_span = 64;               // tokens of the repeated passage
  std::string prompt;                 // greedy generation (empty: skipped)
  int generate = 0;
  bool progress = true;
  bool gpu = false;  // quantized recipes attend through the CUDA kernels (GpuKvCache)
};

struct EvalRow {
  std::string recipe;
  int bits = 0;
  double loss = 0, ppl = 0, dloss = 0, kl = 0, top1 = 0, eff_bits = 0, eff_bits_128k = 0;
  bool gpu = false;  // attended on the GPU
};
struct RecallRow {
  std::string recipe;
  int distance = 0;
  double repeat_loss = 0, first_loss = 0;  // mean loss on the repeat, and on the first occurrence
  bool gpu = false;
};
struct GreedyRow {
  std::string recipe, text;
  int shared_prefix = 0;  // tokens equal to full precision's before the first divergence
  int generated = 0;
  bool gpu = false;
};

struct EvalResult {
  std::string model_name, passage;
  int tokens = 0;
  std::vector<EvalRow> rows;
  std::vector<RecallRow> recall;
  std::vector<GreedyRow> greedy;
};

EvalResult run_eval(const EvalRequest& req);
// A row's recipe as the tables show it: "NAME (gpu)" when it attended on the GPU.
std::string eval_label(const std::string& recipe, bool gpu);
std::string eval_markdown(const EvalRequest& req, const EvalResult& r);
// OUT/eval.csv, eval.md, recall.csv, recall.png (when a recall test ran); all or nothing.
void write_eval_outputs(const EvalRequest& req, const EvalResult& r, const std::string& out_dir);

}  // namespace oscar
