// oscar-eval: the model decodes with each recipe's quantized cache (on the CPU, or with --gpu through the
// CUDA kernels); loss, KL and top-1 agreement vs full precision, a recall test and greedy generation.
// Every option and the --out folder are checked before any decoding; the tables print only once the
// outputs are written.
#include "app_main.h"
#include "oscar/09_eval/eval.h"

int main(int argc, char** argv) {
  CLI::App app{"oscar-eval: end-to-end fidelity of quantized-cache recipes on held-out text"};
  oscar::cli::show_defaults(app);
  oscar::EvalRequest r;
  std::vector<std::string> recipes{"fp16", "naive", "kivi", "quarot", "turboquant", "oscar-omni", "oscar-cov"};
  std::string budget = "3@32K";
  bool quiet = false;
  app.add_option("--model", r.model, "llama2.c checkpoint, or a GGUF file (FILE.gguf: the tokenizer comes from the file)")->required();
  app.add_option("--tokenizer", r.tokenizer, "the llama2.c checkpoint's tokenizer.bin (not with a GGUF)");
  app.add_option("--text", r.text, "text, one verse a line (plain or .gz)")->required();
  app.add_option("--offset", r.offset, "first line of the evaluated passage (negative: from the end)")->default_val(-404);
  app.add_option("--tokens", r.tokens, "evaluated passage length, BOS included (default: 1024, or the model's context if shorter)");
  app.add_option("--calib-offset", r.calib_offset, "first line of the calibration passage (and of the recall test's filler)")->default_val(0);
  app.add_option("--calib-tokens", r.calib_tokens, "calibration passage length (default: 1024, or the model's context if shorter)");
  app.add_option("--recipes", recipes, "preset names or recipe YAML files")->delimiter(',');
  app.add_option("--bits", r.bits, "bit widths (fp16 runs once)")->delimiter(',')->default_str("2");
  auto* recall = app.add_option("--recall", r.recall_distances, "recall-test distances in tokens, e.g. 256,512,1024,1536")->delimiter(',');
  auto* span = app.add_option("--recall-span", r.recall_span, "tokens of the repeated passage (with --recall)")->default_val(64);
  app.add_option("--prompt", r.prompt, "prompt for greedy generation (with --generate)");
  app.add_option("--generate", r.generate, "tokens to generate greedily from --prompt");
  app.add_option("--generate-context", r.generate_context,
                 "tokens of other text (from --calib-offset) before the prompt; -1: enough that every recipe holds at least half of its "
                 "cache in low bits when generation starts");
  app.add_option("--budget", budget, "the verdict's bit budget: effective bits per element, at a context length (BITS or BITS@CONTEXT)");
  app.add_option("--metric", r.metric, "the verdict's metric: kl (next-token distributions) or dloss (loss increase)");
  app.add_option("--out", r.out, "folder for eval.csv, eval.md, eval.json, recall.csv, recall.png (checked before any work)");
  app.add_flag("--clamp-groups", r.clamp_groups, "per-token groups wider than the model's head_dim become head_dim (small models)");
  app.add_flag("--gpu", r.gpu, "quantized recipes attend through the CUDA decode kernels (oscar-cov and oscar-omni at 2 or 4 bits on the head_dims their kernels take; fp16 stays on the CPU)");
  app.add_flag("--quiet", quiet, "no progress bar");
  return oscar::run_app("oscar-eval", app, argc, argv, [&] {
    r.progress = !quiet;
    r.budget = oscar::parse_budget(budget);
    if (span->count() > 0 && recall->count() == 0)
      oscar::fail("--recall-span is given without --recall; add --recall D1,D2,... (distances in tokens) or drop --recall-span");
    if (app.count("--out") > 0 && r.out.empty()) oscar::fail("--out is empty; name the output folder");
    oscar::validate_eval_options(r);  // before loading recipe files or the model
    for (const auto& name : recipes)
      r.recipes.push_back(name.ends_with(".yaml") ? oscar::load_recipe_file(name) : oscar::load_preset(name));
    const oscar::EvalResult res = oscar::run_eval(r);
    if (!r.out.empty()) oscar::write_eval_outputs(r, res, r.out);  // before printing: a failure prints no table
    fmt::print("{}", oscar::eval_markdown(r, res));
    return 0;
  });
}
