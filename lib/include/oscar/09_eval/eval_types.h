// eval_types.h: oscar-eval's request (what to evaluate, with the command-line option behind each field) and
// its results (one row per recipe, recall and greedy rows). Plain data shared by eval, metrics and tables.
#pragma once
#include <string>
#include <vector>

#include "oscar/06_quantize/recipe_yaml.h"

namespace oscar {

struct EvalRequest {
  std::string model;                   // --model: a llama2.c checkpoint, or a *.gguf file (tokenizer from its metadata)
  std::string tokenizer;               // --tokenizer: the checkpoint's tokenizer.bin (none with a GGUF)
  std::string text;                    // --text
  long offset = -404;                  // --offset: evaluation passage (held-out Revelation by default)
  int tokens = 0;                      // --tokens; 0: min(1024, the model's context)
  long calib_offset = 0;               // --calib-offset: calibration passage (Genesis), also the recall filler
  int calib_tokens = 0;                // --calib-tokens; 0: min(1024, the model's context)
  std::vector<RecipeFile> recipes;     // --recipes
  std::vector<int> bits{2};            // --bits
  std::vector<int> recall_distances;   // --recall; empty: no recall test
  int recall_span = 64;                // --recall-span: tokens of the repeated passage
  std::string prompt;                  // --prompt: greedy generation (needs generate > 0)
  int generate = 0;                    // --generate
  std::string out;                     // --out: checked before any work when set (written by write_eval_outputs)
  bool progress = true;
  bool gpu = false;  // --gpu: quantized recipes attend through the CUDA kernels (GpuKvCache)
  bool clamp_groups = false;  // --clamp-groups: per-token groups wider than the model's head_dim become head_dim
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

}  // namespace oscar
