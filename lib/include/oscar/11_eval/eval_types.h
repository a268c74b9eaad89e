// eval_types.h: oscar-eval's request (what to evaluate, with the command-line option behind each field) and
// its results (one row per recipe, recall and greedy rows). Plain data shared by eval, metrics and tables.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "oscar/01_core/stats.h"
#include "oscar/05_recipe/recipe_yaml.h"
#include "oscar/11_eval/task_eval.h"
#include "oscar/08_metrics/verdict.h"

namespace oscar {

// --calib-offset after: the calibration text starts at the line after the evaluated passage.
inline constexpr long kCalibAfterEval = -(1L << 62);

struct EvalRequest {
  std::string model;                   // --model: a llama2.c checkpoint, or a *.gguf file (tokenizer from its metadata)
  std::string tokenizer;               // --tokenizer: the checkpoint's tokenizer.bin (none with a GGUF)
  std::string text;                    // --text
  long offset = 0;                     // --offset: first line of the evaluated passage (negative: from the end)
  int tokens = 0;                      // --tokens; 0: min(1024, the model's context); kAllTokens: up to the context
  // --calib-text: the calibration passage's text, also the recall filler's and the greedy prompt's context (default
  // --text); --calib-offset: its first line (kCalibAfterEval: the line after the evaluated passage, in --text).
  std::string calib_text;
  long calib_offset = kCalibAfterEval;
  int calib_tokens = 0;                // --calib-tokens; 0: min(1024, the model's context); kAllTokens: up to the context
  std::string calib_dump;              // --calib-dump: calibration rotations fitted on this dump instead of a passage
  std::vector<RecipeFile> recipes;     // --recipes
  std::vector<int> bits{2};            // --bits
  std::vector<int> recall_distances;   // --recall; empty: no recall test
  int recall_span = 64;                // --recall-span: tokens of the repeated passage
  std::string prompt;                  // --prompt: greedy generation (needs generate > 0)
  int generate = 0;                    // --generate
  int generate_context = -1;           // --generate-context: tokens of other text before the prompt (-1: enough for every recipe)
  std::string out;                     // --out: checked before any work when set (written by write_eval_outputs)
  Budget budget;                       // --budget BITS[@CONTEXT]: the verdict's bit budget
  std::string metric = "kl";           // --metric kl | dloss: the verdict's metric
  bool progress = true;
  bool gpu = false;  // --gpu: quantized recipes attend through the CUDA kernels (GpuKvCache)
  bool clamp_groups = false;  // --clamp-groups: per-token groups wider than the model's head_dim become head_dim
  // --tasks: a task file (oscar-tasks' JSONL): long-context task accuracy per recipe instead of the passage's
  // evaluation (the passage options still choose the calibration passage).
  std::string tasks;
};

struct EvalRow {
  std::string recipe;
  int bits = 0;
  // Effective bits of the whole model's cache (model_cache_size: local layers in the window dtype) at the passage's
  // length, 128K and the budget's context; its bytes at the budget's context.
  double loss = 0, ppl = 0, dloss = 0, kl = 0, top1 = 0, eff_bits = 0, eff_bits_128k = 0, eff_bits_budget = 0;
  double kv_bytes_budget = 0;
  // The share of what the predictions' attention read that was in low bits (decoding_quantized_share); 0 for fp16.
  double quantized = 0;
  bool quantizes = false;  // the recipe quantizes at all (not fp16)
  Interval dloss_ci{NAN, NAN}, kl_ci{NAN, NAN}, top1_ci{NAN, NAN};  // 95%, block bootstrap over predicted positions
  std::vector<double> dloss_pos, kl_pos, top1_pos;  // per predicted position (top1: 1 when the argmax agrees)
  std::vector<int> argmax_ids;                      // per predicted position: the recipe's top-1 next token
  // Against the verdict's pick, by its metric (ranked rows only): the paired difference's 95% interval, and whether
  // it includes 0 (the two cannot be told apart on this passage).
  bool ranked = false;
  Interval vs_best{NAN, NAN};
  bool tied_with_best = false;
  bool gpu = false;  // attended on the GPU
};
struct RecallRow {
  std::string recipe;
  int distance = 0;
  double repeat_loss = 0, first_loss = 0;  // mean loss on the repeat, and on the first occurrence
  double quantized = 0;  // share of the first occurrence's K and V tokens in low bits while the repeat is read
  bool gpu = false;
};
struct GreedyRow {
  std::string recipe, text;
  int shared_prefix = 0;  // tokens equal to full precision's before the first divergence
  int generated = 0;
  double quantized = 0;   // share of the cache in low bits when generation starts
  bool gpu = false;
  std::vector<int> ids;   // the generated token ids
};

struct EvalResult {
  std::string model_name, passage;
  int tokens = 0;
  std::vector<EvalRow> rows;
  std::vector<RecallRow> recall;
  std::vector<GreedyRow> greedy;
  int layers = 0, local_layers = 0, local_window = 0;  // the model's layers, its sliding-window ones and their window
  double global_share_bf16 = 1;  // the global layers' share of a BF16 cache at the budget's context
  double bf16_bytes_budget = 0;  // a BF16 cache of every layer at the budget's context
  int recall_lead = 0;       // tokens of other text before the recalled passage (past every recipe's sink)
  int generate_context = 0;  // tokens of other text before the greedy prompt
  std::vector<int> passage_ids, greedy_context_ids;  // the evaluated passage (BOS first); what greedy generation starts from
  std::vector<int> ref_argmax_ids;                   // per predicted position: full precision's (fp32) top-1 next token
  Verdict verdict;
  VerdictMetric metric;
  std::vector<std::string> warnings;  // printed once each to stderr, kept in the outputs
  std::optional<TaskResults> tasks;   // with --tasks: the task cells (then no passage rows, recall or greedy)
};

// The verdict metrics oscar-eval takes (--metric): kl, dloss.
VerdictMetric eval_metric(const std::string& name);

}  // namespace oscar
