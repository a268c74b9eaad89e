// covariance_rotation.cpp: OSCAR covariance-aware rotations: per-layer key/value covariances fitted on a
// calibration LayerSource (dump or in-memory forward pass), their descending eigenbases, the U/H/P
// compositions, HDF5 save/load (atomic), and the content-based calibration checks.
#include <H5Cpp.h>

#include <Eigen/Eigenvalues>
#include <algorithm>
#include <filesystem>
#include <optional>

#include "oscar/03_dump/dump.h"
#include "oscar/01_core/error.h"
#include "oscar/01_core/h5_attrs.h"
#include "oscar/01_core/file_io.h"
#include "oscar/01_core/progress.h"
#include "oscar/06_rotate/rotation.h"

namespace oscar {

namespace {

inline constexpr const char* kRotFormat = "oscar-kv-rotations";
inline constexpr int kRotVersion = 1;
const char* const kOrders[] = {"U", "UP", "UPH", "UHP", "HUP"};

using MapRMf = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

std::string layer_group(int l) { return fmt::format("layer_{:03d}", l); }
std::string head_group(int h) { return fmt::format("kv_head_{:03d}", h); }

Eigen::MatrixXd head_matrix(const HeadTensor& t, int h) {
  return MapRMf(t.head(h), t.tokens, t.head_dim).cast<double>();
}

// ---- covariances of one layer ----
// Over the KV heads [h0, h1): the layer's when [0, n_kv), one KV head's when [h, h + 1). One code path for both, so
// a layer of one KV head gets the same bits from either scope.
Eigen::MatrixXd key_covariance(const LayerDump& L, int h0, int h1, int group) {
  const int d = L.q.head_dim;
  const double n = static_cast<double>(group) * L.q.tokens;
  Eigen::MatrixXd C = Eigen::MatrixXd::Zero(d, d);
  for (int h = h0; h < h1; ++h) {
    Eigen::MatrixXd Ch = Eigen::MatrixXd::Zero(d, d);
    for (int g = 0; g < group; ++g) {
      const Eigen::MatrixXd Q = head_matrix(L.q, h * group + g);
      Ch.noalias() += Q.transpose() * Q;
    }
    C += Ch / n;
  }
  C /= (h1 - h0);
  return 0.5 * (C + C.transpose());
}

// The weights k C_K k^T are normalized by their mean, so the layer's logit scaling (dump v2's `scaling`) cancels:
// they are a score proxy, not attention probabilities, and need no window, soft-cap or sinks.
Eigen::MatrixXd value_covariance(const LayerDump& L, const Eigen::MatrixXd& CK, int h0, int h1, const std::string& path) {
  const int d = L.v.head_dim, T = L.v.tokens;
  Eigen::MatrixXd C = Eigen::MatrixXd::Zero(d, d);
  for (int h = h0; h < h1; ++h) {
    const Eigen::MatrixXd K = head_matrix(L.k, h), V = head_matrix(L.v, h);
    Eigen::VectorXd w = (K * CK).cwiseProduct(K).rowwise().sum();
    const double mean = w.mean();
    if (!(mean > 0))
      fail("{}: layer {} KV head {}: every key is orthogonal to the queries (mean k C_K k^T = {}), so the value "
           "weights are undefined; calibrate on a longer or different passage",
           path, L.layer, h, mean);
    w /= mean;
    C.noalias() += (V.array().colwise() * w.array()).matrix().transpose() * V / static_cast<double>(T);
  }
  C /= (h1 - h0);
  return 0.5 * (C + C.transpose());
}

CovarianceFit fit_of(const Eigen::MatrixXd& CK, const Eigen::MatrixXd& CV) {
  CovarianceFit f;
  f.key_cov = CK;
  f.value_cov = CV;
  eigen_descending(CK, f.key_eigenvalues, f.key_eigenvectors);
  eigen_descending(CV, f.value_eigenvalues, f.value_eigenvectors);
  return f;
}

// ---- HDF5 helpers ----
// Eigen matrices are column-major; the file stores row-major [rows, cols] (C order).
// `ds` belongs to the caller, so that a failing write or close is caught while it is alive (h5::OutputFile).
void put_matrix(H5::Group& g, H5::DataSet& ds, const char* name, const Eigen::MatrixXd& m) {
  const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rm = m;
  hsize_t dims[2] = {static_cast<hsize_t>(m.rows()), static_cast<hsize_t>(m.cols())};
  ds = g.createDataSet(name, H5::PredType::IEEE_F64LE, H5::DataSpace(2, dims));
  ds.write(rm.data(), H5::PredType::NATIVE_DOUBLE);
  ds.close();
}
void put_vector(H5::Group& g, H5::DataSet& ds, const char* name, const Eigen::VectorXd& v) {
  hsize_t n = static_cast<hsize_t>(v.size());
  ds = g.createDataSet(name, H5::PredType::IEEE_F64LE, H5::DataSpace(1, &n));
  ds.write(v.data(), H5::PredType::NATIVE_DOUBLE);
  ds.close();
}

struct Reader : h5::AttrReader {
  H5::DataSet dataset(const H5::Group& g, const std::string& gname, const char* name, int rank, int d) const {
    if (!g.nameExists(name))
      fail("{}: dataset /{}/{} is missing; the rotations file is incomplete: re-run the calibration", path, gname,
           name);
    H5::DataSet ds = g.openDataSet(name);
    if (ds.getTypeClass() != H5T_FLOAT) fail("{}: /{}/{} is not a floating-point dataset", path, gname, name);
    H5::DataSpace sp = ds.getSpace();
    hsize_t dims[2] = {0, 0};
    const int nd = sp.getSimpleExtentNdims();
    if (nd == rank && nd <= 2) sp.getSimpleExtentDims(dims);
    const bool ok = nd == rank && dims[0] == static_cast<hsize_t>(d) && (rank == 1 || dims[1] == static_cast<hsize_t>(d));
    if (!ok)
      fail("{}: /{}/{} has {} dimensions {}, expected {} (head_dim={}); the file is corrupt or was edited: re-run "
           "the calibration",
           path, gname, name, nd, nd == 2 ? fmt::format("[{}, {}]", dims[0], dims[1]) : fmt::format("[{}]", dims[0]),
           rank == 2 ? fmt::format("[{}, {}]", d, d) : fmt::format("[{}]", d), d);
    return ds;
  }
  Eigen::MatrixXd matrix(const H5::Group& g, const std::string& gname, const char* name, int d) const {
    H5::DataSet ds = dataset(g, gname, name, 2, d);
    Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rm(d, d);
    ds.read(rm.data(), H5::PredType::NATIVE_DOUBLE);
    if (!rm.allFinite()) fail("{}: /{}/{} holds non-finite values; re-run the calibration", path, gname, name);
    return rm;
  }
  Eigen::VectorXd vector(const H5::Group& g, const std::string& gname, const char* name, int d) const {
    H5::DataSet ds = dataset(g, gname, name, 1, d);
    Eigen::VectorXd v(d);
    ds.read(v.data(), H5::PredType::NATIVE_DOUBLE);
    if (!v.allFinite()) fail("{}: /{}/{} holds non-finite values; re-run the calibration", path, gname, name);
    return v;
  }
};

void check_fit(const CovarianceFit& f, int d, const std::string& path, int l, int h) {
  for (const Eigen::MatrixXd* m : {&f.key_cov, &f.value_cov, &f.key_eigenvectors, &f.value_eigenvectors})
    if (m->rows() != d || m->cols() != d)
      fail("internal: saving {}: layer {} KV head {} holds a {}x{} matrix, head_dim {}", path, l, h, m->rows(), m->cols(), d);
  if (f.key_eigenvalues.size() != d || f.value_eigenvalues.size() != d)
    fail("internal: saving {}: layer {} KV head {} eigenvalue vectors are not of length head_dim {}", path, l, h, d);
}

void check_consistent(const CovarianceRotations& c, const std::string& path) {
  const size_t L = static_cast<size_t>(c.n_layers);
  if (c.n_layers <= 0 || c.head_dim <= 0)
    fail("internal: saving {} with n_layers={} head_dim={}", path, c.n_layers, c.head_dim);
  if (c.key_cov.size() != L || c.value_cov.size() != L || c.key_eigenvalues.size() != L ||
      c.value_eigenvalues.size() != L || c.key_eigenvectors.size() != L || c.value_eigenvectors.size() != L)
    fail("internal: saving {}: per-layer arrays do not all hold n_layers={} entries", path, c.n_layers);
  const int d = c.head_dim;
  for (size_t l = 0; l < L; ++l) {
    for (const Eigen::MatrixXd* m : {&c.key_cov[l], &c.value_cov[l], &c.key_eigenvectors[l], &c.value_eigenvectors[l]})
      if (m->rows() != d || m->cols() != d) fail("internal: saving {}: layer {} holds a {}x{} matrix, head_dim {}", path, l, m->rows(), m->cols(), d);
    if (c.key_eigenvalues[l].size() != d || c.value_eigenvalues[l].size() != d)
      fail("internal: saving {}: layer {} eigenvalue vectors are not of length head_dim {}", path, l, d);
  }
  if (!c.per_kv_head()) return;
  if (c.heads.size() != L || c.n_kv_heads <= 0)
    fail("internal: saving {}: per-KV-head fits for {} layers of n_layers={}, n_kv_heads={}", path, c.heads.size(), c.n_layers,
         c.n_kv_heads);
  for (size_t l = 0; l < L; ++l) {
    if (c.heads[l].size() != static_cast<size_t>(c.n_kv_heads))
      fail("internal: saving {}: layer {} holds {} per-KV-head fits, n_kv_heads={}", path, l, c.heads[l].size(), c.n_kv_heads);
    for (int h = 0; h < c.n_kv_heads; ++h) check_fit(c.heads[l][h], d, path, static_cast<int>(l), h);
  }
}

}  // namespace

void eigen_descending(const Eigen::MatrixXd& C, Eigen::VectorXd& values, Eigen::MatrixXd& vectors) {
  if (C.rows() != C.cols() || C.rows() == 0) fail("eigen_descending: matrix is {}x{}, expected square", C.rows(), C.cols());
  if (!C.allFinite()) fail("eigen_descending: the covariance matrix holds non-finite values");
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(C);
  if (es.info() != Eigen::Success) fail("eigen_descending: the eigensolver did not converge on a {}x{} matrix", C.rows(), C.cols());
  const Eigen::Index d = C.rows();
  values.resize(d);
  vectors.resize(d, d);
  for (Eigen::Index j = 0; j < d; ++j) {  // Eigen sorts ascending
    values(j) = es.eigenvalues()(d - 1 - j);
    Eigen::VectorXd v = es.eigenvectors().col(d - 1 - j);
    Eigen::Index imax = 0;
    v.cwiseAbs().maxCoeff(&imax);
    if (v(imax) < 0) v = -v;
    vectors.col(j) = v;
  }
}

CovarianceRotations fit_covariance_rotations(const LayerSource& calibration, bool progress, bool per_kv_head) {
  const DumpInfo& I = calibration.info();
  const std::string& where = calibration.origin().where;
  if (I.n_kv_heads <= 0 || I.n_heads % I.n_kv_heads != 0)
    fail("{}: n_heads={} is not a multiple of n_kv_heads={}", where, I.n_heads, I.n_kv_heads);
  const int group = I.n_heads / I.n_kv_heads;
  CovarianceRotations c;
  c.calibration_path = where;
  c.model_name = I.model_name;
  c.checkpoint_sha256 = I.checkpoint_sha256;
  c.n_layers = I.n_layers;
  c.head_dim = I.head_dim;
  c.n_kv_heads = I.n_kv_heads;
  c.calibration = calibration.origin();
  Progress bar(per_kv_head ? "fitting covariance rotations (per layer and per KV head)" : "fitting covariance rotations",
               I.n_layers, progress);
  for (int l = 0; l < I.n_layers; ++l) {
    const LayerDump L = calibration.layer(l, {"q", "k", "v"});
    const Eigen::MatrixXd CK = key_covariance(L, 0, I.n_kv_heads, group);
    CovarianceFit f = fit_of(CK, value_covariance(L, CK, 0, I.n_kv_heads, where));
    c.key_cov.push_back(std::move(f.key_cov));
    c.value_cov.push_back(std::move(f.value_cov));
    c.key_eigenvalues.push_back(std::move(f.key_eigenvalues));
    c.value_eigenvalues.push_back(std::move(f.value_eigenvalues));
    c.key_eigenvectors.push_back(std::move(f.key_eigenvectors));
    c.value_eigenvectors.push_back(std::move(f.value_eigenvectors));
    if (per_kv_head) {
      std::vector<CovarianceFit>& heads = c.heads.emplace_back();
      for (int h = 0; h < I.n_kv_heads; ++h) {
        const Eigen::MatrixXd CKh = key_covariance(L, h, h + 1, group);
        heads.push_back(fit_of(CKh, value_covariance(L, CKh, h, h + 1, where)));
      }
    }
    bar.advance();
  }
  bar.done();
  return c;
}

Eigen::MatrixXd covariance_rotation_matrix(const Eigen::MatrixXd& U, const std::string& order) {
  if (std::find(std::begin(kOrders), std::end(kOrders), order) == std::end(kOrders))
    fail("unknown covariance rotation order '{}'; valid orders: UHP (OSCAR), U, UP, UPH, HUP", order);
  if (U.rows() != U.cols() || U.rows() == 0)
    fail("covariance eigenvectors are {}x{}, expected a square head_dim x head_dim matrix", U.rows(), U.cols());
  const int d = static_cast<int>(U.rows());
  const double err = (U.transpose() * U - Eigen::MatrixXd::Identity(d, d)).cwiseAbs().maxCoeff();
  if (!(err < 1e-6))
    fail("covariance eigenvectors are not orthonormal (max |U^T U - I| = {:.3g}); the calibration file is corrupt: "
         "re-run the calibration",
         err);
  if (order == "U") return U;
  const bool needs_h = order.find('H') != std::string::npos;
  const Eigen::MatrixXd H = needs_h ? make_hadamard(d)->matrix() : Eigen::MatrixXd();
  const Eigen::MatrixXd P = bit_reversal_permutation(d);
  if (order == "UP") return U * P;
  if (order == "UPH") return U * P * H;
  if (order == "UHP") return U * H * P;
  return H * U * P;  // HUP
}

void save_covariance_rotations(const CovarianceRotations& c, const std::string& path) {
  check_consistent(c, path);
  h5::OutputFile out(path);  // HDF5 failures: one write error naming `path`; the temporary is removed
  std::optional<H5::Group> g;
  H5::DataSet ds;
  try {
    H5::H5File& f = out.file();
    h5::put_identity(f, {kRotFormat, "format_version", kRotVersion, c.model_name, c.checkpoint_sha256});
    h5::put_str(f, "calibration_path", c.calibration_path);
    h5::put_i64s(f, {{"n_layers", c.n_layers}, {"head_dim", c.head_dim}});
    if (c.n_kv_heads > 0) h5::put_i64(f, "n_kv_heads", c.n_kv_heads);
    h5::put_i64(f, "per_kv_head", c.per_kv_head() ? 1 : 0);
    if (!c.calibration.text_sha256.empty()) {
      h5::put_str(f, "calibration_text_sha256", c.calibration.text_sha256);
      h5::put_i64(f, "calibration_first_line", c.calibration.first_line);
      h5::put_i64(f, "calibration_last_line", c.calibration.last_line);
    }
    if (!c.calibration.token_ids.empty()) {
      hsize_t n = c.calibration.token_ids.size();
      f.createDataSet("calibration_token_ids", H5::PredType::STD_I32LE, H5::DataSpace(1, &n))
          .write(c.calibration.token_ids.data(), H5::PredType::NATIVE_INT);
    }
    for (int l = 0; l < c.n_layers; ++l) {
      g.emplace(f.createGroup(layer_group(l)));
      put_matrix(*g, ds, "key_cov", c.key_cov[l]);
      put_matrix(*g, ds, "value_cov", c.value_cov[l]);
      put_vector(*g, ds, "key_eigenvalues", c.key_eigenvalues[l]);
      put_vector(*g, ds, "value_eigenvalues", c.value_eigenvalues[l]);
      put_matrix(*g, ds, "key_eigenvectors", c.key_eigenvectors[l]);
      put_matrix(*g, ds, "value_eigenvectors", c.value_eigenvectors[l]);
      if (c.per_kv_head())
        for (int h = 0; h < c.n_kv_heads; ++h) {
          const CovarianceFit& hf = c.heads[l][h];
          H5::Group hg = g->createGroup(head_group(h));
          put_matrix(hg, ds, "key_cov", hf.key_cov);
          put_matrix(hg, ds, "value_cov", hf.value_cov);
          put_vector(hg, ds, "key_eigenvalues", hf.key_eigenvalues);
          put_vector(hg, ds, "value_eigenvalues", hf.value_eigenvalues);
          put_matrix(hg, ds, "key_eigenvectors", hf.key_eigenvectors);
          put_matrix(hg, ds, "value_eigenvectors", hf.value_eigenvectors);
          hg.close();
        }
      g->close();
    }
  } catch (const H5::Exception& e) {
    out.fail(e);
  }
  out.commit();
}

CovarianceRotations load_covariance_rotations(const std::string& path) {
  h5::silence();
  {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      fail("{}: no such file; fit the covariance rotations first (calibration) or fix the path", path);
    if (std::filesystem::is_directory(path, ec)) fail("{}: is a directory, expected an HDF5 rotations file", path);
  }
  if (H5::H5File::isHdf5(path.c_str()) <= 0)
    fail("{}: not an HDF5 file, or truncated or corrupt (no valid HDF5 signature); re-run the calibration", path);
  CovarianceRotations c;
  try {
    const H5::H5File f(path, H5F_ACC_RDONLY);
    h5::refuse_links(f, path, "re-run the calibration");
    const Reader R{{f, path, "this is not an oscar-kv rotations file (re-run the calibration)"}};
    const std::string format = R.str("format");
    if (format != kRotFormat) fail("{}: attribute format='{}', expected '{}'", path, format, kRotFormat);
    const long long version = R.i64("format_version");
    if (version != kRotVersion)
      fail("{}: rotations format version {} is not supported (this build reads {})", path, version, kRotVersion);
    c.model_name = R.str("model_name");
    c.checkpoint_sha256 = R.str("checkpoint_sha256");
    c.calibration_path = R.str("calibration_path");
    const long long L = R.i64("n_layers"), d = R.i64("head_dim");
    if (L <= 0 || d <= 0 || L > 100000 || d > 65536)
      fail("{}: attributes n_layers={} head_dim={} are out of range", path, L, d);
    c.n_layers = static_cast<int>(L);
    c.head_dim = static_cast<int>(d);
    // Optional (files written before per-KV-head fits lack both): the KV head count and whether they are stored.
    if (f.attrExists("n_kv_heads")) {
      const long long n = R.i64("n_kv_heads");
      if (n <= 0 || n > 65536) fail("{}: attribute n_kv_heads={} is out of range; the file is corrupt: re-run the calibration", path, n);
      c.n_kv_heads = static_cast<int>(n);
    }
    bool per_head = false;
    if (f.attrExists("per_kv_head")) {
      const long long p = R.i64("per_kv_head");
      if (p != 0 && p != 1) fail("{}: attribute per_kv_head={} must be 0 or 1; the file is corrupt: re-run the calibration", path, p);
      per_head = p == 1;
      if (per_head && c.n_kv_heads == 0)
        fail("{}: attribute per_kv_head=1 but n_kv_heads is missing; the file is corrupt: re-run the calibration", path);
    }
    // The calibration passage by content (optional: files written before it was recorded lack it).
    c.calibration.where = c.calibration_path;
    c.calibration.checkpoint_sha256 = c.checkpoint_sha256;
    c.calibration.model_name = c.model_name;
    if (f.attrExists("calibration_text_sha256")) {
      c.calibration.text_sha256 = R.str("calibration_text_sha256");
      c.calibration.first_line = static_cast<long>(R.i64("calibration_first_line"));
      c.calibration.last_line = static_cast<long>(R.i64("calibration_last_line"));
    }
    if (f.nameExists("calibration_token_ids")) {
      const H5::DataSet ids = f.openDataSet("calibration_token_ids");
      const H5::DataSpace sp = ids.getSpace();
      if (ids.getTypeClass() != H5T_INTEGER || sp.getSimpleExtentNdims() != 1)
        fail("{}: /calibration_token_ids must be a 1-D integer dataset; the file is corrupt: re-run the calibration", path);
      c.calibration.token_ids.resize(sp.getSimpleExtentNpoints());
      if (!c.calibration.token_ids.empty()) ids.read(c.calibration.token_ids.data(), H5::PredType::NATIVE_INT);
    }
    for (int l = 0; l < c.n_layers; ++l) {
      const std::string gname = layer_group(l);
      if (!f.nameExists(gname))
        fail("{}: group /{} is missing (n_layers={}); the rotations file is incomplete: re-run the calibration", path,
             gname, c.n_layers);
      const H5::Group g = f.openGroup(gname);
      c.key_cov.push_back(R.matrix(g, gname, "key_cov", c.head_dim));
      c.value_cov.push_back(R.matrix(g, gname, "value_cov", c.head_dim));
      c.key_eigenvalues.push_back(R.vector(g, gname, "key_eigenvalues", c.head_dim));
      c.value_eigenvalues.push_back(R.vector(g, gname, "value_eigenvalues", c.head_dim));
      c.key_eigenvectors.push_back(R.matrix(g, gname, "key_eigenvectors", c.head_dim));
      c.value_eigenvectors.push_back(R.matrix(g, gname, "value_eigenvectors", c.head_dim));
      if (!per_head) continue;
      std::vector<CovarianceFit>& heads = c.heads.emplace_back();
      for (int h = 0; h < c.n_kv_heads; ++h) {
        const std::string hname = gname + "/" + head_group(h);
        if (!g.nameExists(head_group(h)))
          fail("{}: group /{} is missing (per_kv_head=1, n_kv_heads={}); the rotations file is incomplete: re-run the calibration",
               path, hname, c.n_kv_heads);
        const H5::Group hg = g.openGroup(head_group(h));
        CovarianceFit& hf = heads.emplace_back();
        hf.key_cov = R.matrix(hg, hname, "key_cov", c.head_dim);
        hf.value_cov = R.matrix(hg, hname, "value_cov", c.head_dim);
        hf.key_eigenvalues = R.vector(hg, hname, "key_eigenvalues", c.head_dim);
        hf.value_eigenvalues = R.vector(hg, hname, "value_eigenvalues", c.head_dim);
        hf.key_eigenvectors = R.matrix(hg, hname, "key_eigenvectors", c.head_dim);
        hf.value_eigenvectors = R.matrix(hg, hname, "value_eigenvectors", c.head_dim);
      }
    }
  } catch (const H5::Exception& e) {
    fail("{}: HDF5 error while reading the rotations file ({}); it is truncated or corrupt: re-run the calibration",
         path, e.getDetailMsg());
  }
  return c;
}

namespace {

// One side of a calibration check: who it is and its shape (-1: not known, not compared).
struct Side {
  const std::string& where;
  const std::string& sha256;
  const std::string& model_name;
  int n_layers, head_dim, n_heads, n_kv_heads;
};

void check_pair(const Side& cal, const PassageOrigin& cal_origin, const Side& ev, const PassageOrigin& ev_origin) {
  const bool by_sha = !cal.sha256.empty() && !ev.sha256.empty();
  if (by_sha ? cal.sha256 != ev.sha256 : cal.model_name != ev.model_name)
    fail("the calibration {} comes from model {} (checkpoint sha256 {}) but the evaluated {} from model {} (sha256 {}); "
         "calibrate on a passage of the same model",
         cal.where, cal.model_name, cal.sha256.empty() ? "unknown" : cal.sha256.substr(0, 12), ev.where, ev.model_name,
         ev.sha256.empty() ? "unknown" : ev.sha256.substr(0, 12));
  auto differs = [](int a, int b) { return a >= 0 && b >= 0 && a != b; };
  if (differs(cal.n_layers, ev.n_layers) || differs(cal.head_dim, ev.head_dim) || differs(cal.n_heads, ev.n_heads) ||
      differs(cal.n_kv_heads, ev.n_kv_heads))
    fail("the calibration {} has {} layers and head_dim {} (n_heads {}, n_kv_heads {}) but the evaluated {} has {} layers and "
         "head_dim {} (n_heads {}, n_kv_heads {}); calibrate on a passage of the same model",
         cal.where, cal.n_layers, cal.head_dim, cal.n_heads, cal.n_kv_heads, ev.where, ev.n_layers, ev.head_dim, ev.n_heads,
         ev.n_kv_heads);
  if (const std::string why = same_data_reason(cal_origin, ev_origin); !why.empty())
    fail("the calibration {} and the evaluated {} are the same data: {}; calibrate on other text of the same model (e.g. "
         "Genesis)", cal.where, ev.where, why);
}

}  // namespace

void check_calibration_source(const LayerSource& calibration, const DumpInfo& eval, const PassageOrigin& eval_origin) {
  check_calibration_source(calibration.info(), calibration.origin(), eval, eval_origin);
}

void check_calibration_source(const DumpInfo& C, const PassageOrigin& o, const DumpInfo& eval, const PassageOrigin& eval_origin) {
  check_pair({o.where, C.checkpoint_sha256, C.model_name, C.n_layers, C.head_dim, C.n_heads, C.n_kv_heads}, o,
             {eval_origin.where, eval.checkpoint_sha256, eval.model_name, eval.n_layers, eval.head_dim, eval.n_heads, eval.n_kv_heads},
             eval_origin);
}

void check_calibration_matches(const CovarianceRotations& c, const DumpInfo& eval, const PassageOrigin& eval_origin) {
  check_pair({c.calibration_path, c.checkpoint_sha256, c.model_name, c.n_layers, c.head_dim, -1, c.n_kv_heads > 0 ? c.n_kv_heads : -1},
             c.calibration,
             {eval_origin.where, eval.checkpoint_sha256, eval.model_name, eval.n_layers, eval.head_dim, eval.n_heads, eval.n_kv_heads},
             eval_origin);
}

}  // namespace oscar
