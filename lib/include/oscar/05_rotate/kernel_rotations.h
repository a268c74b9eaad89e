// kernel_rotations.h: the rotations a recipe's CUDA kernels take (oscar_kv.h's oscar_rotation: kind NONE, HADAMARD,
// or MATRIX with dense float32 R_K / R_V [n][head_dim][head_dim], k' = k R_K), built by lib's one path
// (layer_rotations in cache_sim.h, what oscar-eval's and oscar-sweep's caches use, over fit_covariance_rotations for
// calibrated recipes), and their HDF5 file (format "oscar-kernel-rotations", version 1), written atomically.
// Contract: key_kind == value_kind (the kernels take one kind); a matrix layer holds n = n_kv_heads matrices per
// tensor when per_kv_head, else 1; every matrix is orthogonal.
#pragma once
#include <string>
#include <vector>

#include "oscar/05_rotate/rotation.h"
#include "oscar/06_quantize/recipe.h"

namespace oscar {

enum class KernelRotationKind { None, Hadamard, Matrix };
const char* kernel_rotation_kind_name(KernelRotationKind k);  // "none", "hadamard", "matrix"

struct KernelRotations {
  std::string recipe;               // the recipe's name
  std::string calibration = "none";  // the calibration dump's path, or "none" (the rotations do not depend on data)
  std::string model_name, checkpoint_sha256;  // of the dump that gave the shapes ("" when none was given)
  // n_layers / n_kv_heads: 0 when not known (a Hadamard or identity recipe given only --head-dim).
  int n_layers = 0, head_dim = 0, n_kv_heads = 0;
  bool per_kv_head = false;  // Matrix only: one matrix per KV head (covariance_scope: kv-head)
  KernelRotationKind key_kind = KernelRotationKind::None, value_kind = KernelRotationKind::None;
  std::vector<int> calibration_token_ids;  // the calibration passage (BOS first); empty when calibration is "none"
  // Per layer (Matrix only, else empty): float32 row-major [matrices()][head_dim][head_dim].
  std::vector<std::vector<float>> key, value;
  int matrices() const { return per_kv_head ? n_kv_heads : 1; }
};

// The kernels' rotations of recipe `r` on a model of these shapes. Each layer's rotations come from
// layer_rotations(r, head_dim, layer, calib); `calib` is required (and must hold per-KV-head fits for a kv-head
// recipe) when r.calibrated(). Kinds: both None -> none, both Hadamard -> hadamard; anything else (a covariance,
// random or randomized-Hadamard rotation on either tensor, or two different kinds) -> matrix on both tensors, the
// dense matrices of lib's Rotation objects, a shared one repeated for each KV head when the other is per KV head.
// Matrix kinds need n_layers >= 1 (and n_kv_heads >= 1 when per KV head). Throws Error naming `where` (what gave
// the shapes) on a recipe that cannot apply to head_dim (Hadamard on a non-power of two).
KernelRotations kernel_rotations(const Recipe& r, int n_layers, int head_dim, int n_kv_heads,
                                 const CovarianceRotations* calib, const std::string& where);

// What oscar-rotate asks for.
struct KernelRotationRequest {
  std::string calib;   // calibration dump (HDF5 dump format); "" when none; "-": its file image on standard input
  std::string recipe;  // preset name, or a recipe YAML file (NAME.yaml)
  std::string out;     // the rotations file to write; "-": its file image to standard output
  int head_dim = 0;    // without --calib: the model's head_dim; with it, 0 or the dump's
  int layers = 0;      // without --calib: the model's layer count (needed for matrix kinds); with it, 0 or the dump's
  int kv_heads = 0;    // without --calib: the model's KV head count (0: not stated); with it, 0 or the dump's
  bool progress = false;
};
// Checks the output location, loads the recipe, reads the calibration dump layer by layer (fit_covariance_rotations,
// per KV head when the recipe asks) when the recipe is calibrated (a dump given to another recipe only states the
// shapes and model), builds the rotations and saves them to req.out. Returns what was written.
KernelRotations run_kernel_rotations(const KernelRotationRequest& req);

// HDF5, atomic (temporary + rename). Root attributes: format = "oscar-kernel-rotations", version = 1, recipe,
// n_layers, head_dim, n_kv_heads, per_kv_head (0/1), key_kind, value_kind, calibration, and model_name /
// checkpoint_sha256 when known; dataset /calibration_token_ids (int32) when known; per layer when the kinds are
// matrix: /layer_NNN/key_rotation and /layer_NNN/value_rotation, float32 [n][head_dim][head_dim].
void save_kernel_rotations(const KernelRotations& k, const std::string& path);
// The same file as an HDF5 file image in memory (what `--out -` writes to standard output).
std::vector<char> kernel_rotations_image(const KernelRotations& k);
// Validates format, version, attributes, kinds, shapes, finiteness and orthogonality (1e-4); throws Error naming
// `path` and what to do on any problem.
KernelRotations load_kernel_rotations(const std::string& path);

}  // namespace oscar
