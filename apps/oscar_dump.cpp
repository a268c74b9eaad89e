// oscar-dump: runs a llama2.c checkpoint or a GGUF model over a passage of a text and writes its Q/K/V (dump format v2).
#include "app_main.h"
#include "oscar/03_dump/dump_passage.h"

int main(int argc, char** argv) {
  CLI::App app{"oscar-dump: dump a passage's queries, keys and values (before and after RoPE) to HDF5"};
  oscar::cli::show_defaults(app);
  oscar::DumpRequest r;
  std::string tokens = "512";
  app.add_option("--model", r.model, "llama2.c checkpoint (float32 .bin, or oscar-kv's float16 form), or a GGUF file (llama, qwen2, qwen3, gemma3)")->required()->check(oscar::cli::not_a_folder());
  app.add_option("--tokenizer", r.tokenizer, "llama2.c tokenizer.bin (not with a GGUF file, which carries its tokenizer)")->check(oscar::cli::not_a_folder());
  app.add_option("--text", r.text, "text file, one line per verse/paragraph (plain or .gz)")->required()->check(oscar::cli::not_a_folder());
  app.add_option("--offset", r.offset, "first line of the passage (negative: counted from the end)")->default_val(0);
  app.add_option("--tokens", tokens, "passage length in tokens, BOS included, or all (the rest of the text, up to the model's context)")
      ->check(oscar::cli::tokens_or_all());
  app.add_option("--out", r.out, "output HDF5 file (written atomically)")->required();
  app.add_option("--dtype", r.dtype,
                 "storage dtype: float16 (half the size; values keep 11 significant bits, a relative rounding of at most 2^-11, "
                 "far below any 2-4-bit quantizer's error) or float32 (exact)")
      ->check(CLI::IsMember({"float32", "float16"}));
  app.add_flag("--allow-high-loss", r.allow_high_loss,
               "keep a dump whose mean loss is above ln(vocab) (worse than uniform: a tokenizer of another model?)");
  bool quiet = false;
  app.add_flag("--quiet", quiet, "no progress bar");
  return oscar::run_app("oscar-dump", app, argc, argv, [&] {
    r.progress = !quiet;
    r.tokens = oscar::cli::parse_tokens(tokens);
    const auto s = oscar::dump_passage(r);
    fmt::print("{}: {} tokens from line {}{}: mean next-token loss {:.4f} nats over {} predictions ({:.1f} s) -> {}\n", s.model_name,
               s.tokens, s.first_line,
               !s.cut ? " (the text's end)"
                      : (r.tokens == oscar::kAllTokens ? fmt::format(" (cut at the model's context of {} tokens)", s.context)
                                                       : fmt::format(" (cut at --tokens {}; the text goes on: --tokens all takes up to "
                                                                     "the model's context of {})",
                                                                     s.tokens, s.context)),
               s.mean_loss, s.tokens - 1, s.seconds, r.out);
    return 0;
  });
}
