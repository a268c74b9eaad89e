// kernel_rotations.cpp: the kernels' rotations of a recipe (see kernel_rotations.h): built through
// layer_rotations (the caches' path), saved and loaded as "oscar-kernel-rotations" HDF5 files.
#include "oscar/09_cache/kernel_rotations.h"

#include <H5Cpp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

#include "oscar/01_core/error.h"
#include "oscar/01_core/file_io.h"
#include "oscar/01_core/h5_attrs.h"
#include "oscar/01_core/output_files.h"
#include "oscar/03_dump/layer_source.h"
#include "oscar/07_quantize/cache_sim.h"
#include "oscar/05_recipe/recipe_yaml.h"

namespace oscar {

namespace {

inline constexpr const char* kFormat = "oscar-kernel-rotations";
inline constexpr int kVersion = 1;
inline constexpr double kOrthoTol = 1e-4;  // float32 storage of a double-precision orthogonal matrix

std::string layer_group(int l) { return fmt::format("layer_{:03d}", l); }

KernelRotationKind kind_of(RotationKind k) {
  switch (k) {
    case RotationKind::None: return KernelRotationKind::None;
    case RotationKind::Hadamard: return KernelRotationKind::Hadamard;
    default: return KernelRotationKind::Matrix;
  }
}

std::optional<KernelRotationKind> parse_kind(const std::string& s) {
  if (s == "none") return KernelRotationKind::None;
  if (s == "hadamard") return KernelRotationKind::Hadamard;
  if (s == "matrix") return KernelRotationKind::Matrix;
  return std::nullopt;
}

// The matrices of one tensor of a layer, `n` of them: one per KV head, or one shared rotation repeated.
std::vector<float> stack(const std::vector<std::unique_ptr<Rotation>>& rots, int n, int d) {
  std::vector<float> out(static_cast<size_t>(n) * d * d);
  for (int h = 0; h < n; ++h) {
    const Rotation& r = *rots[rots.size() == 1 ? 0 : static_cast<size_t>(h)];
    const Eigen::MatrixXd R = r.matrix();
    float* m = out.data() + static_cast<size_t>(h) * d * d;
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j) m[static_cast<size_t>(i) * d + j] = static_cast<float>(R(i, j));
  }
  return out;
}

// max |R^T R - I| of a float32 row-major d x d matrix, in double.
double orthogonality_error(const float* m, int d) {
  using MapRMf = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
  const Eigen::MatrixXd R = MapRMf(m, d, d).cast<double>();
  return (R.transpose() * R - Eigen::MatrixXd::Identity(d, d)).cwiseAbs().maxCoeff();
}

void put_stack(H5::Group& g, H5::DataSet& ds, const char* name, const std::vector<float>& v, int n, int d) {
  const hsize_t dims[3] = {static_cast<hsize_t>(n), static_cast<hsize_t>(d), static_cast<hsize_t>(d)};
  ds = g.createDataSet(name, H5::PredType::IEEE_F32LE, H5::DataSpace(3, dims));
  ds.write(v.data(), H5::PredType::NATIVE_FLOAT);
  ds.close();
}

}  // namespace

const char* kernel_rotation_kind_name(KernelRotationKind k) {
  switch (k) {
    case KernelRotationKind::None: return "none";
    case KernelRotationKind::Hadamard: return "hadamard";
    case KernelRotationKind::Matrix: return "matrix";
  }
  return "?";
}

KernelRotations kernel_rotations(const Recipe& r, int n_layers, int head_dim, int n_kv_heads,
                                 const CovarianceRotations* calib, const std::string& where) {
  if (head_dim <= 0) fail("{}: head_dim {} must be positive", where, head_dim);
  if (r.calibrated() && !calib)
    fail("recipe {} needs covariance rotations fitted on a calibration dump; pass --calib DUMP.h5 (a dump of the same model "
         "on other text)",
         r.name);
  KernelRotations k;
  k.recipe = r.name;
  k.n_layers = n_layers;
  k.head_dim = head_dim;
  k.n_kv_heads = n_kv_heads;
  const KernelRotationKind kk = kind_of(r.key_rotation.kind), vk = kind_of(r.value_rotation.kind);
  const KernelRotationKind kind = kk == vk ? kk : KernelRotationKind::Matrix;  // the kernels take one kind for both
  k.key_kind = k.value_kind = kind;
  k.per_kv_head = kind == KernelRotationKind::Matrix && r.calibrated_per_kv_head();
  if (calib && r.calibrated()) {
    k.calibration = calib->calibration_path;
    k.calibration_token_ids = calib->calibration.token_ids;
  }
  // Every recipe goes through layer_rotations, which refuses what cannot apply to head_dim (Hadamard, the
  // bit-reversal permutation of a covariance order on a non-power of two): checked on layer 0 for every kind.
  const int check_layers = kind == KernelRotationKind::Matrix ? n_layers : 1;
  if (kind == KernelRotationKind::Matrix && n_layers <= 0)
    fail("{}: recipe {}'s rotations are dense matrices, one set per layer, but the layer count is not known; give --layers "
         "(the model's number of layers) or --calib",
         where, r.name);
  if (k.per_kv_head && n_kv_heads <= 0) fail("{}: recipe {} has one rotation per KV head but n_kv_heads is not known", where, r.name);
  for (int l = 0; l < check_layers; ++l) {
    LayerRotations rot;
    try {
      rot = layer_rotations(r, head_dim, l, calib);
      if (k.per_kv_head) rot.check_heads(n_kv_heads);
    } catch (const Error& e) {
      fail("{}: recipe {}: {}", where, r.name, e.what());
    }
    if (kind != KernelRotationKind::Matrix) break;
    k.key.push_back(stack(rot.keys, k.matrices(), head_dim));
    k.value.push_back(stack(rot.values, k.matrices(), head_dim));
  }
  return k;
}

namespace {

// Without a calibration dump: the shapes come from the request (--head-dim, --layers, --kv-heads).
KernelRotations rotations_without_calibration(const Recipe& r, const KernelRotationRequest& req) {
  if (r.calibrated())
    fail("recipe {} needs covariance rotations fitted on a calibration dump; pass --calib DUMP.h5 (a dump of the same model "
         "on other text, from oscar-dump or experiments/hf_dump.py)",
         r.name);
  if (req.head_dim <= 0)
    fail("recipe {} needs the model's head_dim; pass --head-dim (e.g. 128) or --calib DUMP.h5 (a dump of the model)", r.name);
  // Dense matrices (random orthogonal ones, keys and values) for every layer: bounded before any is drawn.
  const bool dense = kind_of(r.key_rotation.kind) == KernelRotationKind::Matrix ||
                     kind_of(r.value_rotation.kind) == KernelRotationKind::Matrix;
  const uint64_t bytes = !dense ? 0 : 2ull * static_cast<uint64_t>(std::max(req.layers, 1)) * static_cast<uint64_t>(req.head_dim) *
                         static_cast<uint64_t>(req.head_dim) * sizeof(float);
  if (bytes > (uint64_t{4} << 30))
    fail("--layers {} --head-dim {}: the rotations would take {:.1f} GB (at most 4 GB are written); check the model's "
         "shape",
         req.layers, req.head_dim, static_cast<double>(bytes) / 1e9);
  if (!is_standard_stream(req.out)) check_output_file(req.out, bytes);  // and room for them
  return kernel_rotations(r, req.layers, req.head_dim, req.kv_heads, nullptr, fmt::format("--head-dim {}", req.head_dim));
}

// From a calibration dump: its shapes, and for a calibrated recipe the fit on its layers.
KernelRotations rotations_from_calibration(const Recipe& r, const KernelRotationRequest& req, const DumpLayerSource& cal) {
  const DumpInfo& I = cal.info();
  const std::string& name = cal.reader().path();
  auto same = [&](const char* flag, const char* what, int given, int dump) {
    if (given > 0 && given != dump)
      fail("{}: the dump has {} {} but {} {} was given; drop {} (the dump states it) or pass a dump of that model", name, what, dump,
           flag, given, flag);
  };
  same("--head-dim", "head_dim", req.head_dim, I.head_dim);
  same("--layers", "n_layers", req.layers, I.n_layers);
  same("--kv-heads", "n_kv_heads", req.kv_heads, I.n_kv_heads);
  std::optional<CovarianceRotations> calib;
  if (r.calibrated()) calib.emplace(fit_covariance_rotations(cal, req.progress, r.calibrated_per_kv_head()));
  KernelRotations k = kernel_rotations(r, I.n_layers, I.head_dim, I.n_kv_heads, calib ? &*calib : nullptr, name);
  k.model_name = I.model_name;
  k.checkpoint_sha256 = I.checkpoint_sha256;
  return k;
}

// The calibration dump: a file, or with `-` its HDF5 file image on standard input.
std::unique_ptr<DumpReader> open_calibration(const std::string& calib) {
  if (is_standard_stream(calib)) return std::make_unique<DumpReader>(read_stream(stdin, "standard input"), "standard input");
  std::error_code ec;
  if (!std::filesystem::exists(calib, ec))
    fail("{}: no such file; give the calibration dump (written by oscar-dump or experiments/hf_dump.py) or fix the path", calib);
  return std::make_unique<DumpReader>(calib);
}

}  // namespace

KernelRotations run_kernel_rotations(const KernelRotationRequest& req) {
  if (req.out.empty()) fail("--out is empty; name the rotations file to write (e.g. rot.h5), or - for standard output");
  const bool to_stdout = is_standard_stream(req.out);
  if (!to_stdout) {
    check_output_file(req.out);  // before any work: a missing folder or an unwritable place fails at once
    check_not_input(req.out, {is_standard_stream(req.calib) ? std::string() : req.calib, req.recipe.ends_with(".yaml") ? req.recipe : std::string()});
  }
  const RecipeFile rf = req.recipe.ends_with(".yaml") ? load_recipe_file(req.recipe) : load_preset(req.recipe);
  const KernelRotations k = req.calib.empty() ? rotations_without_calibration(rf.recipe, req)
                                              : rotations_from_calibration(rf.recipe, req, DumpLayerSource(open_calibration(req.calib)));
  if (to_stdout) write_stream(stdout, kernel_rotations_image(k), "standard output");  // its HDF5 file image
  else save_kernel_rotations(k, req.out);
  return k;
}

namespace {

void check_consistent(const KernelRotations& k, const std::string& path) {
  const bool matrix = k.key_kind == KernelRotationKind::Matrix;
  if (k.key_kind != k.value_kind || k.head_dim <= 0 || (matrix && (k.n_layers <= 0 || k.matrices() <= 0)) ||
      (matrix && (k.key.size() != static_cast<size_t>(k.n_layers) || k.value.size() != k.key.size())))
    fail("internal: saving {}: inconsistent kernel rotations (kinds {}/{}, n_layers {}, head_dim {}, {} layers of matrices)", path,
         kernel_rotation_kind_name(k.key_kind), kernel_rotation_kind_name(k.value_kind), k.n_layers, k.head_dim, k.key.size());
  const size_t per_layer = static_cast<size_t>(k.matrices()) * k.head_dim * k.head_dim;
  for (size_t l = 0; l < k.key.size(); ++l)
    if (k.key[l].size() != per_layer || k.value[l].size() != per_layer)
      fail("internal: saving {}: layer {} holds the wrong number of matrix entries", path, l);
}

// The file's content (save_kernel_rotations' format) into an open HDF5 file; HDF5 failures are the caller's.
void write_contents(H5::H5File& f, const KernelRotations& k) {
  std::optional<H5::Group> g;
  H5::DataSet ds;
  h5::put_identity(f, {kFormat, "version", kVersion, k.model_name, k.checkpoint_sha256, true});
  h5::put_str(f, "recipe", k.recipe);
  h5::put_i64s(f, {{"n_layers", k.n_layers}, {"head_dim", k.head_dim}, {"n_kv_heads", k.n_kv_heads}, {"per_kv_head", k.per_kv_head ? 1 : 0}});
  h5::put_str(f, "key_kind", kernel_rotation_kind_name(k.key_kind));
  h5::put_str(f, "value_kind", kernel_rotation_kind_name(k.value_kind));
  h5::put_str(f, "calibration", k.calibration);
  if (!k.calibration_token_ids.empty()) {
    const hsize_t n = k.calibration_token_ids.size();
    ds = f.createDataSet("calibration_token_ids", H5::PredType::STD_I32LE, H5::DataSpace(1, &n));
    ds.write(k.calibration_token_ids.data(), H5::PredType::NATIVE_INT);
    ds.close();
  }
  for (size_t l = 0; l < k.key.size(); ++l) {
    g.emplace(f.createGroup(layer_group(static_cast<int>(l))));
    put_stack(*g, ds, "key_rotation", k.key[l], k.matrices(), k.head_dim);
    put_stack(*g, ds, "value_rotation", k.value[l], k.matrices(), k.head_dim);
    g->close();
  }
}

}  // namespace

void save_kernel_rotations(const KernelRotations& k, const std::string& path) {
  check_consistent(k, path);
  h5::OutputFile out(path);  // HDF5 failures: one write error naming `path`; the temporary is removed
  try {
    write_contents(out.file(), k);
  } catch (const H5::Exception& e) {
    out.fail(e);
  }
  out.commit();
}

std::vector<char> kernel_rotations_image(const KernelRotations& k) {
  check_consistent(k, "standard output");
  h5::silence();
  try {
    H5::H5File f = h5::create_in_memory();
    write_contents(f, k);
    std::vector<char> image = h5::image_of(f);
    f.close();
    return image;
  } catch (const H5::Exception& e) {
    fail("standard output: could not build the rotations file in memory (HDF5: {}); write it to a file instead of -", e.getDetailMsg());
  }
}

namespace {

const char* const kRedo = "write it again with oscar-rotate";

// The root attributes: format, version, recipe, shapes and kinds, checked against each other.
KernelRotations read_root(const H5::H5File& f, const std::string& path) {
  const h5::AttrReader R{f, path, std::string("this is not an oscar-rotate kernel rotations file (") + kRedo + ")"};
  const std::string format = R.str("format");
  if (format != kFormat) fail("{}: attribute format='{}', expected '{}'; {}", path, format, kFormat, kRedo);
  const long long version = R.i64("version");
  if (version != kVersion) fail("{}: kernel rotations version {} is not supported (this build reads {}); {}", path, version, kVersion, kRedo);
  KernelRotations k;
  k.recipe = R.str("recipe");
  k.calibration = R.str("calibration");
  if (f.attrExists("model_name")) k.model_name = R.str("model_name");
  if (f.attrExists("checkpoint_sha256")) k.checkpoint_sha256 = R.str("checkpoint_sha256");
  const long long L = R.i64("n_layers"), d = R.i64("head_dim"), nkv = R.i64("n_kv_heads"), per = R.i64("per_kv_head");
  if (L < 0 || L > 100000 || d <= 0 || d > 65536 || nkv < 0 || nkv > 65536 || (per != 0 && per != 1))
    fail("{}: attributes n_layers={} head_dim={} n_kv_heads={} per_kv_head={} are out of range; the file is corrupt: {}", path, L, d,
         nkv, per, kRedo);
  k.n_layers = static_cast<int>(L);
  k.head_dim = static_cast<int>(d);
  k.n_kv_heads = static_cast<int>(nkv);
  k.per_kv_head = per == 1;
  const std::string ks = R.str("key_kind"), vs = R.str("value_kind");
  const auto kk = parse_kind(ks), vk = parse_kind(vs);
  if (!kk || !vk) fail("{}: key_kind='{}' value_kind='{}', expected none, hadamard or matrix; {}", path, ks, vs, kRedo);
  if (*kk != *vk) fail("{}: key_kind '{}' differs from value_kind '{}' (the kernels take one kind); {}", path, ks, vs, kRedo);
  k.key_kind = *kk;
  k.value_kind = *vk;
  const bool matrix = *kk == KernelRotationKind::Matrix;
  if (k.per_kv_head && (!matrix || k.n_kv_heads == 0))
    fail("{}: per_kv_head=1 needs kind matrix and n_kv_heads > 0 (kind {}, n_kv_heads {}); the file is corrupt: {}", path, ks,
         k.n_kv_heads, kRedo);
  if (matrix && k.n_layers == 0) fail("{}: kind matrix but n_layers=0; the file is corrupt: {}", path, kRedo);
  return k;
}

std::vector<int> read_token_ids(const H5::H5File& f, const std::string& path) {
  if (!f.nameExists("calibration_token_ids")) return {};
  const H5::DataSet ids = f.openDataSet("calibration_token_ids");
  const H5::DataSpace sp = ids.getSpace();
  if (ids.getTypeClass() != H5T_INTEGER || sp.getSimpleExtentNdims() != 1)
    fail("{}: /calibration_token_ids must be a 1-D integer dataset; the file is corrupt: {}", path, kRedo);
  std::vector<int> out(sp.getSimpleExtentNpoints());
  if (!out.empty()) ids.read(out.data(), H5::PredType::NATIVE_INT);
  return out;
}

// One layer's stack of n matrices of one tensor, checked for shape, finiteness and orthogonality.
std::vector<float> read_stack(const H5::Group& g, const std::string& gname, const char* name, int n, int d, bool per_kv_head,
                              const std::string& path) {
  if (!g.nameExists(name)) fail("{}: dataset /{}/{} is missing; the file is incomplete: {}", path, gname, name, kRedo);
  const H5::DataSet ds = g.openDataSet(name);
  const H5::DataSpace sp = ds.getSpace();
  hsize_t dims[3] = {0, 0, 0};
  const int nd = sp.getSimpleExtentNdims();
  if (nd == 3) sp.getSimpleExtentDims(dims);
  if (ds.getTypeClass() != H5T_FLOAT || nd != 3 || dims[0] != static_cast<hsize_t>(n) || dims[1] != static_cast<hsize_t>(d) ||
      dims[2] != static_cast<hsize_t>(d))
    fail("{}: /{}/{} is not a float32 [{}][{}][{}] dataset (n = {}; head_dim = {}); the file is corrupt: {}", path, gname, name, n, d, d,
         per_kv_head ? "n_kv_heads" : "1", d, kRedo);
  std::vector<float> m(static_cast<size_t>(n) * d * d);
  ds.read(m.data(), H5::PredType::NATIVE_FLOAT);
  for (int h = 0; h < n; ++h) {
    const float* R0 = m.data() + static_cast<size_t>(h) * d * d;
    for (long i = 0; i < static_cast<long>(d) * d; ++i)
      if (!std::isfinite(R0[i])) fail("{}: /{}/{} holds non-finite values; {}", path, gname, name, kRedo);
    const double err = orthogonality_error(R0, d);
    if (!(err < kOrthoTol))
      fail("{}: /{}/{}[{}] is not orthogonal (max |R^T R - I| = {:.3g}, allowed {:g}); the file is corrupt: {}", path, gname, name, h,
           err, kOrthoTol, kRedo);
  }
  return m;
}

}  // namespace

KernelRotations load_kernel_rotations(const std::string& path) {
  h5::silence();
  {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) fail("{}: no such file; write it with oscar-rotate or fix the path", path);
    if (std::filesystem::is_directory(path, ec)) fail("{}: is a directory, expected an oscar-rotate HDF5 file", path);
  }
  if (H5::H5File::isHdf5(path.c_str()) <= 0)
    fail("{}: not an HDF5 file, or truncated or corrupt (no valid HDF5 signature); {}", path, kRedo);
  try {
    const H5::H5File f(path, H5F_ACC_RDONLY);
    h5::refuse_links(f, path, kRedo);
    KernelRotations k = read_root(f, path);
    k.calibration_token_ids = read_token_ids(f, path);
    if (k.key_kind != KernelRotationKind::Matrix) return k;
    for (int l = 0; l < k.n_layers; ++l) {
      const std::string gname = layer_group(l);
      if (!f.nameExists(gname)) fail("{}: group /{} is missing (n_layers={}); the file is incomplete: {}", path, gname, k.n_layers, kRedo);
      const H5::Group g = f.openGroup(gname);
      k.key.push_back(read_stack(g, gname, "key_rotation", k.matrices(), k.head_dim, k.per_kv_head, path));
      k.value.push_back(read_stack(g, gname, "value_rotation", k.matrices(), k.head_dim, k.per_kv_head, path));
    }
    return k;
  } catch (const H5::Exception& e) {
    fail("{}: HDF5 error while reading the kernel rotations ({}); it is truncated or corrupt: {}", path, e.getDetailMsg(), kRedo);
  }
}

}  // namespace oscar
