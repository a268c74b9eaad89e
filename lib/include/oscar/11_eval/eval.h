// eval.h: oscar-eval's work: the model (a llama2.c checkpoint with its tokenizer, or a GGUF file with the
// tokenizer of its metadata: LoadedModel) decodes with each recipe's quantized cache (QuantizedKvCache,
// token by token as a server would) and is compared with full precision: next-token loss and
// perplexity on held-out text, KL(full || quantized) of the next-token distributions, top-1 agreement;
// a recall test (a passage, unrelated text of growing length, the passage again: the loss on the
// repeat); and greedy generation from a fixed prompt. Calibrated recipes take their rotations from a
// calibration passage of the same text run through the model in memory (ModelLayerSource); a passage
// that is the evaluated data by content is refused. With `gpu`, every quantized recipe attends on the GPU
// instead (GpuKvCache); a recipe the kernels do not implement, or no CUDA device, stops the run before any
// work. fp16 (no quantizer) stays on the CPU. Every option and the output folder are checked before any
// decoding (eval_plan.h); each error names the option to change. The steps, in their order: eval_steps.h; the
// outputs: report/eval_tables.h.
#pragma once
#include "oscar/11_eval/eval_types.h"

namespace oscar {

// Validates everything (options, files, passages, recipes, calibration, output folder: plan_eval), then decodes.
EvalResult run_eval(const EvalRequest& req);

}  // namespace oscar
