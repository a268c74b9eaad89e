// oscar-eval: the model decodes with each recipe's quantized cache (on the CPU, or with --gpu through the
// CUDA kernels); loss, KL and top-1 agreement vs full precision, a recall test and greedy generation.
// Every option and the --out folder are checked before any decoding; the tables print only once the
// outputs are written.
#include <optional>

#include "app_main.h"
#include "oscar/11_eval/eval.h"
#include "oscar/13_report/eval_tables.h"

int main(int argc, char** argv) {
  CLI::App app{"oscar-eval: end-to-end fidelity of quantized-cache recipes on held-out text"};
  oscar::cli::show_defaults(app);
  oscar::EvalRequest r;
  std::vector<std::string> recipes{"fp16", "naive", "kivi", "quarot", "turboquant", "oscar-omni", "oscar-cov"};
  std::string budget = "3@32K";
  bool quiet = false;
  app.add_option("--model", r.model, "llama2.c checkpoint, or a GGUF file (FILE.gguf: the tokenizer comes from the file)")->required();
  app.add_option("--tokenizer", r.tokenizer, "the llama2.c checkpoint's tokenizer.bin (not with a GGUF)");
  app.add_option("--text", r.text, "text, one passage or verse a line (plain or .gz)")->required()->check(oscar::cli::not_a_folder());
  app.add_option("--offset", r.offset, "first line of the evaluated passage (negative: counted from the end)");
  std::string tokens = "1024", calib_tokens = "1024", calib_offset = "after";
  app.add_option("--tokens", tokens, "evaluated passage length, BOS included (at most the model's context), or all (up to the context)")
      ->check(oscar::cli::tokens_or_all());
  app.add_option("--calib-text", r.calib_text,
                 "other text for the calibration passage, the recall test's filler and the greedy prompt's context (default: --text)")
      ->check(oscar::cli::not_a_folder());
  app.add_option("--calib-offset", calib_offset,
                 "first line of that text (negative: from the end); after: the line after the evaluated passage (0 with --calib-text)");
  app.add_option("--calib-tokens", calib_tokens, "calibration passage length (at most the model's context), or all")
      ->check(oscar::cli::tokens_or_all());
  app.add_option("--calib-dump", r.calib_dump,
                 "fit the calibrated recipes' rotations on this dump of the same model (oscar-dump, hf_dump.py) instead of a passage")
      ->check(oscar::cli::not_a_folder());
  app.add_option("--recipes", recipes, "comma-separated preset names or recipe YAML files (oscar-sweep --list-presets lists the presets)")
      ->delimiter(',');
  app.add_option("--bits", r.bits, "comma-separated bit widths (fp16 runs once)")->delimiter(',');
  auto* recall = app.add_option("--recall", r.recall_distances, "comma-separated recall-test distances in tokens, e.g. 256,512,1024")
                     ->delimiter(',');
  auto* span = app.add_option("--recall-span", r.recall_span, "tokens of the repeated passage (with --recall)");
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
  app.add_option("--tasks", r.tasks,
                 "long-context task file (oscar-tasks' JSONL): accuracy per recipe and task with Wilson intervals into tasks.md, "
                 "tasks.csv, answers.jsonl instead of the passage's evaluation (--text, --calib-offset still choose the calibration)")
      ->check(oscar::cli::not_a_folder());
  app.add_flag("--quiet", quiet, "no progress bar");
  return oscar::run_app("oscar-eval", app, argc, argv, [&] {
    r.progress = !quiet;
    r.budget = oscar::parse_budget(budget);
    r.tokens = app.count("--tokens") ? oscar::cli::parse_tokens(tokens) : 0;
    r.calib_tokens = app.count("--calib-tokens") ? oscar::cli::parse_tokens(calib_tokens) : 0;
    if (calib_offset == "after") r.calib_offset = oscar::kCalibAfterEval;
    else r.calib_offset = oscar::cli::parse_long("--calib-offset", calib_offset);
    if (span->count() > 0 && recall->count() == 0)
      oscar::fail("--recall-span is given without --recall; add --recall D1,D2,... (distances in tokens) or drop --recall-span");
    if (app.count("--out") > 0 && r.out.empty()) oscar::fail("--out is empty; name the output folder");
    for (const auto& name : recipes)
      r.recipes.push_back(name.ends_with(".yaml") ? oscar::load_recipe_file(name) : oscar::load_preset(name));
    std::optional<oscar::OutputLock> lock;  // a second oscar-eval into this folder fails at once
    if (!r.out.empty()) oscar::check_output_folder(r.out), lock.emplace(r.out, "oscar-eval");
    const oscar::EvalResult res = oscar::run_eval(r);
    if (!r.out.empty()) oscar::write_eval_outputs(r, res, r.out);  // before printing: a failure prints no table
    fmt::print("{}", oscar::eval_markdown(r, res));
    return 0;
  });
}
