// oscar-pack: stores a float16-exact llama2.c checkpoint in oscar-kv's lossless float16 form, split
// into parts (OUT.part00, OUT.part01, ...) small enough for git.

#include "app_main.h"
#include "oscar/02_model/formats/checkpoint.h"
#include "oscar/01_core/file_io.h"

int main(int argc, char** argv) {
  CLI::App app{"oscar-pack: llama2.c float32 checkpoint -> lossless float16 parts"};
  oscar::cli::show_defaults(app);
  std::string in, out;
  long part_mib = 3;
  app.add_option("input", in, "llama2.c legacy float32 checkpoint")->required()->check(oscar::cli::not_a_folder());
  app.add_option("output", out, "output base name (parts are OUTPUT.part00, ...)")->required();
  app.add_option("--part-mib", part_mib, "size of each part in MiB")->default_val(3)->check(oscar::cli::whole_number_in(1, 1024));
  return oscar::run_app("oscar-pack", app, argc, argv, [&] {
    oscar::check_output_file(oscar::part_name(out, 0));
    oscar::check_not_input(oscar::part_name(out, 0), {in});
    oscar::check_not_input(out, {in});
    const oscar::Checkpoint ck = oscar::load_checkpoint(in);
    const auto bytes = oscar::encode_float16_checkpoint(ck);
    const size_t part = static_cast<size_t>(part_mib) << 20;
    oscar::OutputSet parts;  // every part, or none
    for (size_t i = 0, k = 0; i < bytes.size(); i += part, ++k)
      parts.add(oscar::part_name(out, static_cast<int>(k)))
          .write({reinterpret_cast<const char*>(bytes.data() + i), std::min(part, bytes.size() - i)});
    parts.commit();
    oscar::remove_parts_from(out, static_cast<int>((bytes.size() + part - 1) / part));  // an earlier, longer pack's
    const oscar::Checkpoint back = oscar::load_checkpoint(out);  // verifies the sha256 of the rebuilt float32
    fmt::print("{}: {} values, float32 sha256 {} -> {} bytes in float16 parts, verified\n", in, ck.values.size(), back.sha256,
               bytes.size());
    return 0;
  });
}
