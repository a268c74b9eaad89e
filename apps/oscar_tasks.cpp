// oscar-tasks: writes long-context retrieval tasks (lib 11_eval/long_tasks.h: passkey, single needle, multi-key,
// variable tracking) fitted to token lengths of a model's tokenizer, as JSONL any tool can run.

#include "app_main.h"
#include "oscar/11_eval/long_tasks.h"

int main(int argc, char** argv) {
  CLI::App app{"oscar-tasks: long-context retrieval tasks for a model's tokenizer, as JSONL"};
  oscar::cli::show_defaults(app);
  std::string model, tokenizer, out;
  std::vector<std::string> tasks = {"passkey", "niah_single", "niah_multikey", "variable_tracking"};
  std::vector<int> lengths;
  std::vector<double> depths = {0.1, 0.5, 0.9};
  int samples = 5;
  uint64_t seed = 20261125;
  app.add_option("--model", model, "a GGUF file (its tokenizer), or a llama2.c checkpoint with --tokenizer (split parts NAME.part00.. "
                 "accepted)")->required()->check(oscar::cli::not_a_folder());
  app.add_option("--tokenizer", tokenizer, "the llama2.c checkpoint's tokenizer.bin (not for GGUF)")->check(CLI::ExistingFile);
  app.add_option("--out", out, "the JSONL file to write")->required();
  app.add_option("--tasks", tasks, "any of passkey niah_single niah_multikey variable_tracking");
  app.add_option("--lengths", lengths, "prompt lengths in tokens, up to the model's context (default: 1024 doubling up to it)");
  app.add_option("--depths", depths, "needle depths, fractions of the haystack");
  app.add_option("--samples", samples, "samples per task, length and depth")->check(oscar::cli::whole_number_in(1, 1000));
  app.add_option("--seed", seed, "random seed");
  return oscar::run_app("oscar-tasks", app, argc, argv, [&] {
    oscar::check_output_file(out);
    oscar::check_not_input(out, {model, tokenizer});
    oscar::TaskSpec spec;
    for (const auto& t : tasks) spec.tasks.push_back(oscar::long_task_from_name(t));
    const oscar::ModelTokens m = oscar::model_tokens(model, tokenizer);
    spec.lengths = lengths.empty() ? oscar::default_task_lengths(m.context_length) : lengths;
    spec.context = m.context_length;
    spec.model = model;
    spec.depths = depths;
    spec.samples = samples;
    spec.seed = seed;
    auto all = oscar::generate_long_tasks(spec, m.count);
    oscar::add_prompt_ids(all, m.encode);  // the ids too: other tools run the same tokens
    oscar::write_tasks_jsonl(out, all);
    fmt::print("{}: {} tasks ({} x {} lengths x {} depths x {} samples) for {}'s tokenizer\n", out, all.size(), spec.tasks.size(),
               spec.lengths.size(), spec.depths.size(), samples, m.name);
    return 0;
  });
}
