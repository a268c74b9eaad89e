// oscar-rotate: writes the rotation matrices a recipe's CUDA kernels take (oscar_kv.h's oscar_rotation) to an HDF5
// file, for decoding through the kernels from Python: covariance rotations fitted on a calibration dump by lib's
// one fit (what oscar-eval and oscar-sweep use), or the calibration-free ones (Hadamard, seeded random).
#include "app_main.h"
#include "oscar/05_rotate/kernel_rotations.h"

int main(int argc, char** argv) {
  CLI::App app{"oscar-rotate: the rotations a recipe's CUDA kernels need (R_K, R_V per layer), as an HDF5 file"};
  oscar::cli::show_defaults(app);
  oscar::KernelRotationRequest r;
  bool quiet = false;
  app.add_option("--calib", r.calib, "calibration dump (oscar-dump or experiments/hf_dump.py) of the model, on other text than "
                                     "the evaluated one; needed by calibrated recipes (oscar-cov, oscar-cov-head); - reads the dump's file image from "
                                     "standard input")
      ->check(oscar::cli::not_a_folder());
  app.add_option("--recipe", r.recipe, "preset name (oscar-cov, oscar-cov-head, oscar-omni, ...) or a recipe YAML file")->required();
  app.add_option("--out", r.out, "the rotations file to write (HDF5; written atomically); - writes its file image to standard output")->required();
  app.add_option("--head-dim", r.head_dim, "the model's head_dim (without --calib; with it, must match the dump)")
      ->check(oscar::cli::whole_number_in(1, 8192))
      ->default_str("from --calib");
  app.add_option("--layers", r.layers, "the model's layer count (without --calib, for recipes with dense matrices)")
      ->check(oscar::cli::whole_number_in(1, 4096))
      ->default_str("from --calib");
  app.add_option("--kv-heads", r.kv_heads, "the model's KV head count (without --calib; recorded only)")
      ->check(oscar::cli::whole_number_in(1, 4096))
      ->default_str("from --calib");
  app.add_flag("--quiet", quiet, "no progress bar");
  return oscar::run_app("oscar-rotate", app, argc, argv, [&] {
    r.progress = !quiet;
    const oscar::KernelRotations k = oscar::run_kernel_rotations(r);
    if (!quiet)
      fmt::print(r.out == "-" ? stderr : stdout, "{}: recipe {}, {} / {}{}, {} layers, head_dim {}, calibration {}\n", r.out, k.recipe,
                 oscar::kernel_rotation_kind_name(k.key_kind), oscar::kernel_rotation_kind_name(k.value_kind),
                 k.per_kv_head ? fmt::format(" per KV head ({})", k.n_kv_heads) : "", k.n_layers, k.head_dim, k.calibration);
    return 0;
  });
}
