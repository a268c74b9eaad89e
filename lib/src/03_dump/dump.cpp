// dump.cpp: HDF5 reading (v1, v2) and writing (v2) of KV dumps (see dump.h and README).
#include "oscar/03_dump/dump.h"

#include <H5Cpp.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <regex>

#include "oscar/01_core/error.h"
#include "oscar/01_core/file_io.h"
#include "oscar/01_core/h5_attrs.h"
#include "oscar/01_core/isolated.h"
#include "oscar/float_formats.h"

namespace oscar {

namespace {

const char* const kTensors[] = {"q", "q_pre", "k", "k_pre", "v"};
bool is_pre(const std::string& t) { return t == "q_pre" || t == "k_pre"; }

std::string layer_group(int l) { return fmt::format("layer_{:03d}", l); }

constexpr const char* kRedo = "re-create the dump with oscar-dump or experiments/hf_dump.py";

H5::FloatType float16_type() {
  H5::FloatType t(H5::PredType::IEEE_F32LE);
  t.setFields(15, 10, 5, 0, 10);
  t.setSize(2);
  t.setEbias(15);
  return t;
}

void check_finite(const float* p, size_t n, const std::string& path, int layer, const std::string& tensor, int tokens,
                  int head_dim) {
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(p[i])) {
      const size_t per_head = static_cast<size_t>(tokens) * head_dim;
      fail("{}: layer {} dataset '{}' holds a non-finite value ({}) at head {}, token {}, channel {}; the activations "
           "are corrupt or the model overflowed: re-dump in float32 or exclude this passage",
           path, layer, tensor, p[i], i / per_head, (i % per_head) / head_dim, i % head_dim);
    }
  }
}

// The HDF5 library (Debian's build is not thread-safe) is entered by one reader thread at a time;
// decoding float16 and checking values run outside this lock, on the caller's thread.
std::mutex& h5_read_lock() {
  static std::mutex m;
  return m;
}

// Per-layer attribute readers (h5::AttrReader's checks): errors name the file, the layer group and the attribute.
struct LayerAttrs {
  const H5::Group& g;
  const std::string& path;
  std::string group;
  h5::AttrReader reader() const {
    return h5::AttrReader{g, path, "re-create the dump", "/" + group + " attribute"};
  }
  void require(const char* name) const {
    if (!g.attrExists(name))
      fail("{}: /{} lacks attribute '{}', which dump format v2 requires on every layer; the producer wrote an "
           "incomplete v2 file: re-create the dump with oscar-dump or experiments/hf_dump.py",
           path, group, name);
  }
  std::string str(const char* name) const { return require(name), reader().str(name); }
  long long i64(const char* name) const { return require(name), reader().i64(name); }
  long long i64_in(const char* name, long long lo, long long hi) const { return require(name), reader().i64_in(name, lo, hi); }
  double f64(const char* name) const { return require(name), reader().f64(name); }
};

// Index of the first half-precision NaN or Inf in p[0..n), or n.
size_t first_nonfinite_half(const uint16_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if ((p[i] & 0x7C00u) == 0x7C00u) return i;
  return n;
}

}  // namespace

LayerAttention DumpInfo::attention(int l) const {
  if (l < 0 || l >= n_layers) fail("internal: layer {} out of range (n_layers={})", l, n_layers);
  if (layers.empty()) return LayerAttention::standard(head_dim, rope_convention, rope_theta);
  if (static_cast<int>(layers.size()) != n_layers)
    fail("internal: {} per-layer attention entries for {} layers", layers.size(), n_layers);
  return layers[l];
}

void set_model_fields(DumpInfo& info, const ModelConfig& cfg) {
  info.n_layers = cfg.n_layers;
  info.n_heads = cfg.n_heads;
  info.n_kv_heads = cfg.n_kv_heads;
  info.head_dim = cfg.head_dim();
  info.rope_convention = cfg.rope_convention;
  info.rope_theta = cfg.rope_theta;
  info.architecture = cfg.architecture;
  info.has_pre_rope = true;
  const nlohmann::json j = {{"architecture", cfg.architecture}, {"dim", cfg.dim}, {"hidden_dim", cfg.hidden_dim},
                            {"n_layers", cfg.n_layers}, {"n_heads", cfg.n_heads}, {"n_kv_heads", cfg.n_kv_heads},
                            {"vocab_size", cfg.vocab_size}, {"seq_len", cfg.seq_len},
                            {"shared_classifier", cfg.shared_classifier}, {"head_dim", cfg.head_dim()},
                            {"rope_theta", cfg.rope_theta}, {"rope_convention", cfg.rope_convention},
                            {"rope_dims", cfg.rotary_dims()}, {"rms_eps", cfg.rms_eps}, {"qk_norm", cfg.qk_norm},
                            {"qkv_bias", cfg.qkv_bias}, {"layer_windows", cfg.layer_windows},
                            {"rope_theta_local", cfg.rope_theta_local}, {"attention_scale", cfg.scale()}};
  info.config_json = j.dump();
  info.layers.clear();
  for (int l = 0; l < cfg.n_layers; ++l) {  // each layer's window, RoPE base and scale (gemma3's local layers)
    LayerAttention a = LayerAttention::standard(cfg.head_dim(), cfg.rope_convention, cfg.rope_theta_of(l));
    a.rotary_dim = cfg.rotary_dims();
    a.sliding_window = cfg.window(l);
    if (cfg.attention_scale > 0) a.scaling = cfg.attention_scale;
    info.layers.push_back(std::move(a));
  }
}

// ================= writer =================
// Through h5::OutputFile: HDF5 failures become write errors naming the final file, the temporary is removed.
// HDF5 objects are declared before each `try` and closed explicitly inside it (see h5_attrs.h).
struct DumpWriter::Impl {
  h5::OutputFile out;
  DumpInfo info;
  std::vector<char> written;
  explicit Impl(const std::string& p) : out(p) {}
};

namespace {
// Bytes a dump takes at least: every tensor of every layer, and the token ids.
std::uint64_t dump_bytes(const DumpInfo& I) {
  const std::uint64_t per = static_cast<std::uint64_t>(I.token_count) * I.head_dim * (I.storage_dtype == "float16" ? 2 : 4);
  const std::uint64_t copies = I.has_pre_rope ? 2 : 1;  // q, k (and q_pre, k_pre)
  return static_cast<std::uint64_t>(I.n_layers) * (copies * (I.n_heads + I.n_kv_heads) + I.n_kv_heads) * per + 4ull * I.token_count;
}
}  // namespace

DumpWriter::DumpWriter(const std::string& path, const DumpInfo& info, const std::vector<int>& token_ids,
                       const std::vector<std::string>& token_text) {
  h5::silence();
  if (info.storage_dtype != "float32" && info.storage_dtype != "float16")
    fail("{}: storage dtype '{}' is not supported (use float32 or float16)", path, info.storage_dtype);
  if (static_cast<long>(token_ids.size()) != info.token_count)
    fail("internal: {} token ids for a dump of {} tokens", token_ids.size(), info.token_count);
  if (!info.layers.empty() && static_cast<int>(info.layers.size()) != info.n_layers)
    fail("internal: {} per-layer attention entries for a dump of {} layers", info.layers.size(), info.n_layers);
  for (int l = 0; l < static_cast<int>(info.layers.size()); ++l) {
    const std::string why = attention_problem(info.layers[l], info.n_heads, info.head_dim);
    if (!why.empty()) fail("{}: layer {}: {}; the model's attention description is wrong", path, l, why);
  }
  if (!info.config_json.empty()) {
    const nlohmann::json j = nlohmann::json::parse(info.config_json, nullptr, false);
    if (j.is_discarded() || !j.is_object()) fail("{}: internal: config_json is not a JSON object", path);
  }
  check_output_file(path, dump_bytes(info));  // the folder, and room for the whole dump, before any layer
  impl_ = std::make_unique<Impl>(path);
  impl_->info = info;
  impl_->written.assign(info.n_layers, 0);
  H5::DataSet ids, tt;
  try {
    H5::H5File& f = impl_->out.file();
    h5::put_identity(f, {kDumpFormat, "format_version", kDumpVersion, info.model_name, info.checkpoint_sha256});
    h5::put_i64s(f, {{"n_layers", info.n_layers}, {"n_heads", info.n_heads}, {"n_kv_heads", info.n_kv_heads}, {"head_dim", info.head_dim}});
    h5::put_str(f, "rope_convention", info.rope_convention);
    h5::put_f64(f, "rope_theta", info.rope_theta);
    h5::put_str(f, "text_source", info.text_source);
    h5::put_i64(f, "token_count", info.token_count);
    h5::put_str(f, "storage_dtype", info.storage_dtype);
    h5::put_str(f, "architecture", info.architecture);
    h5::put_str(f, "config_json", info.config_json.empty() ? std::string("{}") : info.config_json);
    h5::put_i64(f, "has_pre_rope", info.has_pre_rope ? 1 : 0);
    if (std::isfinite(info.mean_next_token_loss)) h5::put_f64(f, "mean_next_token_loss", info.mean_next_token_loss);
    if (!info.producer.empty()) h5::put_str(f, "producer", info.producer);
    hsize_t n = token_ids.size();
    ids = f.createDataSet("token_ids", H5::PredType::STD_I32LE, H5::DataSpace(1, &n));
    if (n) ids.write(token_ids.data(), H5::PredType::NATIVE_INT);
    ids.close();
    if (!token_text.empty()) {
      H5::StrType st(H5::PredType::C_S1, H5T_VARIABLE);
      st.setCset(H5T_CSET_UTF8);
      std::vector<const char*> ptrs;
      for (const auto& s : token_text) ptrs.push_back(s.c_str());
      hsize_t m = ptrs.size();
      tt = f.createDataSet("token_text", st, H5::DataSpace(1, &m));
      tt.write(ptrs.data(), st);
      tt.close();
    }
  } catch (const H5::Exception& e) {
    impl_->out.fail(e);
  }
}

DumpWriter::~DumpWriter() = default;  // Impl abandons an unfinished file; nothing here throws

void DumpWriter::write_layer(const LayerQKV& a) {
  const DumpInfo& I = impl_->info;
  const std::string path = impl_->out.final_path();
  const int T = static_cast<int>(a.q.rows()), hd = I.head_dim;
  if (!impl_->out.open()) fail("internal: {} was already finished or abandoned", path);
  if (T != I.token_count) fail("internal: layer {} has {} tokens, the dump {}", a.layer, T, I.token_count);
  std::optional<H5::Group> g;
  H5::DataSet ds;
  try {
    g.emplace(impl_->out.file().createGroup(layer_group(a.layer)));
    const H5::DataType dtype = I.storage_dtype == "float16" ? H5::DataType(float16_type()) : H5::DataType(H5::PredType::IEEE_F32LE);
    struct Item {
      const char* name;
      const MatrixRM* m;
      int heads;
    } items[] = {{"q", &a.q, I.n_heads}, {"q_pre", &a.q_pre, I.n_heads}, {"k", &a.k, I.n_kv_heads},
                 {"k_pre", &a.k_pre, I.n_kv_heads}, {"v", &a.v, I.n_kv_heads}};
    std::vector<float> buf;
    for (const Item& it : items) {
      if (!I.has_pre_rope && is_pre(it.name)) continue;
      if (it.m->cols() != static_cast<Eigen::Index>(it.heads) * hd)
        fail("internal: layer {} tensor {} has {} columns, expected {}", a.layer, it.name, it.m->cols(), it.heads * hd);
      buf.resize(static_cast<size_t>(it.heads) * T * hd);
      for (int h = 0; h < it.heads; ++h)
        for (int t = 0; t < T; ++t)
          for (int c = 0; c < hd; ++c) buf[(static_cast<size_t>(h) * T + t) * hd + c] = (*it.m)(t, h * hd + c);
      check_finite(buf.data(), buf.size(), path, a.layer, it.name, T, hd);
      hsize_t dims[3] = {static_cast<hsize_t>(it.heads), static_cast<hsize_t>(T), static_cast<hsize_t>(hd)};
      hsize_t chunk[3] = {1, static_cast<hsize_t>(std::min(T, 1024)), static_cast<hsize_t>(hd)};
      H5::DSetCreatPropList plist;
      plist.setChunk(3, chunk);
      ds = g->createDataSet(it.name, dtype, H5::DataSpace(3, dims), plist);
      ds.write(buf.data(), H5::PredType::NATIVE_FLOAT);
      ds.close();  // writes the cached chunks: a full disk shows here, not in a destructor
    }
    const LayerAttention att = I.attention(a.layer);
    h5::put_f64(*g, "scaling", att.scaling);
    h5::put_i64(*g, "sliding_window", att.sliding_window);
    h5::put_f64(*g, "softcap", att.softcap);
    h5::put_str(*g, "rope_convention", att.rope_convention);
    h5::put_i64(*g, "rotary_dim", att.rotary_dim);
    h5::put_f64(*g, "rope_theta", att.rope_theta);
    if (!att.sinks.empty()) {
      hsize_t n = att.sinks.size();
      ds = g->createDataSet("sinks", H5::PredType::IEEE_F32LE, H5::DataSpace(1, &n));
      ds.write(att.sinks.data(), H5::PredType::NATIVE_FLOAT);
      ds.close();
    }
    g->close();
  } catch (const H5::Exception& e) {
    impl_->out.fail(e);
  }
  impl_->written[a.layer] = 1;
}

void DumpWriter::set_mean_next_token_loss(double loss) {
  if (!impl_->out.open()) fail("internal: {} was already finished or abandoned", impl_->out.final_path());
  try {
    h5::put_f64(impl_->out.file(), "mean_next_token_loss", loss);
  } catch (const H5::Exception& e) {
    impl_->out.fail(e);
  }
}

void DumpWriter::finish() {
  for (int l = 0; l < impl_->info.n_layers; ++l)
    if (!impl_->written[l]) fail("internal: layer {} was never written to {}", l, impl_->out.final_path());
  if (!impl_->out.open()) fail("internal: {} was already finished or abandoned", impl_->out.final_path());
  impl_->out.commit();
}

// ================= reader =================
struct DumpReader::Impl {
  std::string path;
  std::unique_ptr<H5::H5File> file;
  DumpInfo info;
  std::vector<int> ids;
  std::vector<std::string> text;
  std::unique_ptr<std::atomic<bool>[]> layer_checked;  // every tensor of the layer checked for NaN/Inf

  // Opens and validates the dump's structure (the constructor's work): the file at `file_path`, or `image` (an HDF5 file
  // image) when given, which messages then call `file_path`. Its steps, in order:
  void open(const std::string& file_path, const std::vector<char>* image);
  void open_file(const std::string& file_path, const std::vector<char>* image);
  void read_root();       // the root attributes
  void read_root_v2();    // the attributes format v2 adds
  void check_root() const;
  void read_tokens();     // /token_ids and /token_text
  void check_layer_groups() const;  // exactly layer_000 .. layer_{n_layers-1}
  void read_layers();     // each layer's attention (v2) and its tensors' shapes and types
  LayerAttention read_layer_attention(const H5::Group& grp, const std::string& g) const;
  void check_layer_tensor(const H5::Group& grp, const std::string& g, const char* t) const;

  // Reads the whole dataset /layer/tensor into `out` (float32) or `half` (float16 bits, no conversion).
  void read_raw(int layer, const std::string& tensor, std::vector<float>* out, std::vector<uint16_t>* half) const {
    std::lock_guard<std::mutex> lock(h5_read_lock());
    try {
      H5::DataSet ds = file->openDataSet(layer_group(layer) + "/" + tensor);
      if (half) ds.read(half->data(), float16_type());
      else ds.read(out->data(), H5::PredType::NATIVE_FLOAT);
    } catch (const H5::Exception& e) {
      fail("{}: reading /{}/{} failed ({}); the file is truncated or corrupt: re-create the dump", path, layer_group(layer),
           tensor, e.getDetailMsg());
    }
  }
};

DumpReader::DumpReader(DumpReader&&) noexcept = default;
DumpReader::~DumpReader() = default;
const DumpInfo& DumpReader::info() const { return impl_->info; }
const std::string& DumpReader::path() const { return impl_->path; }
const std::vector<int>& DumpReader::token_ids() const { return impl_->ids; }
const std::vector<std::string>& DumpReader::token_text() const { return impl_->text; }

void DumpReader::no_pre_rope(const std::string& tensor) const {
  fail("{}: this dump has no pre-RoPE tensors (has_pre_rope=0: architecture '{}' has no separable pre-RoPE key, or its "
       "producer could not recover it), so '{}' cannot be read; use only q, k and v with this dump",
       impl_->path, impl_->info.architecture, tensor);
}

DumpReader::DumpReader(const std::string& path) : impl_(std::make_unique<Impl>()) {
  h5::silence();
  // The system's libhdf5 (1.10.8) crashes, hangs or exhausts memory on some crafted files: the structure is read in a
  // child process first, so that such a file ends in one error naming it (isolated.h).
  probe_in_child(path, "reading its structure with the HDF5 library (" H5_VERS_INFO ")",
                 "re-create the dump with oscar-dump or experiments/hf_dump.py, and never open untrusted dumps elsewhere",
                 [&] { Impl().open(path, nullptr); });
  impl_->open(path, nullptr);
}

DumpReader::DumpReader(const std::vector<char>& image, const std::string& name) : impl_(std::make_unique<Impl>()) {
  h5::silence();
  probe_in_child(name, "reading its structure with the HDF5 library (" H5_VERS_INFO ")",
                 "re-create the dump with oscar-dump or experiments/hf_dump.py, and never open untrusted dumps elsewhere",
                 [&] { Impl().open(name, &image); });
  impl_->open(name, &image);
}

void DumpReader::Impl::open_file(const std::string& file_path, const std::vector<char>* image) {
  if (image) {
    if (!h5::is_image(*image))
      fail("{}: not an HDF5 file, or truncated or corrupt (no valid HDF5 signature); re-create the dump", path);
  } else {
    std::error_code ec;
    if (!std::filesystem::exists(file_path, ec)) fail("{}: no such file", path);
    if (std::filesystem::is_directory(file_path, ec)) fail("{}: is a directory, expected an HDF5 dump", path);
    if (H5::H5File::isHdf5(file_path.c_str()) <= 0)
      fail("{}: not an HDF5 file, or truncated or corrupt (no valid HDF5 signature); re-create the dump", path);
  }
  try {
    file = image ? std::make_unique<H5::H5File>(h5::open_image(*image)) : std::make_unique<H5::H5File>(file_path, H5F_ACC_RDONLY);
  } catch (const H5::Exception& e) {
    fail("{}: cannot open as HDF5 ({}); the file is truncated or corrupt: re-create the dump", path, e.getDetailMsg());
  }
}

void DumpReader::Impl::read_root() {
  const H5::H5File& f = *file;
  DumpInfo& I = info;
  const h5::AttrReader A{f, path, "this file does not follow the oscar-kv dump schema (see README, 'Dump format')"};
  const std::string format = A.str("format");
  if (format != kDumpFormat) fail("{}: attribute format='{}', expected '{}'", path, format, kDumpFormat);
  const long long version = A.i64("format_version");
  if (version != 1 && version != 2)
    fail("{}: dump format version {} is not supported (this build reads 1 and 2); re-create the dump with this "
         "build's oscar-dump, or use a newer oscar-kv",
         path, version);
  I.format_version = static_cast<int>(version);
  I.model_name = A.str("model_name");
  I.checkpoint_sha256 = A.str("checkpoint_sha256");
  // bounded before they size anything: no model has more (the tokens: 2^31 is far beyond any context)
  I.n_layers = static_cast<int>(A.i64_in("n_layers", 1, 4096));
  I.n_heads = static_cast<int>(A.i64_in("n_heads", 1, 4096));
  I.n_kv_heads = static_cast<int>(A.i64_in("n_kv_heads", 1, 4096));
  I.head_dim = static_cast<int>(A.i64_in("head_dim", 1, 8192));
  I.rope_convention = A.str("rope_convention");
  I.rope_theta = A.f64("rope_theta");
  I.text_source = A.str("text_source");
  I.token_count = static_cast<long>(A.i64_in("token_count", 1, std::numeric_limits<int>::max()));
  I.storage_dtype = A.str("storage_dtype");
  if (f.attrExists("mean_next_token_loss")) I.mean_next_token_loss = A.f64("mean_next_token_loss");
  if (f.attrExists("producer")) I.producer = A.str("producer");
  I.architecture = "llama";
  I.config_json.clear();
  I.has_pre_rope = true;
  I.layers.clear();
  if (version >= 2) read_root_v2();
}

void DumpReader::Impl::read_root_v2() {
  DumpInfo& I = info;
  const h5::AttrReader A{*file, path, "dump format v2 requires it: re-create the dump with oscar-dump or experiments/hf_dump.py"};
  I.architecture = A.str("architecture");
  if (I.architecture.empty()) fail("{}: root attribute architecture is empty; re-create the dump", path);
  I.config_json = A.str("config_json");
  const nlohmann::json j = nlohmann::json::parse(I.config_json, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    fail("{}: root attribute config_json is not a JSON object ('{}'); the producer wrote a broken configuration: "
         "re-create the dump",
         path, I.config_json.substr(0, 40));
  const long long pre = A.i64("has_pre_rope");
  if (pre != 0 && pre != 1) fail("{}: root attribute has_pre_rope={}, expected 0 or 1; re-create the dump", path, pre);
  I.has_pre_rope = pre == 1;
}

void DumpReader::Impl::check_root() const {
  const DumpInfo& I = info;
  if (I.n_layers <= 0 || I.n_heads <= 0 || I.n_kv_heads <= 0 || I.head_dim <= 0 || I.token_count <= 0)
    fail("{}: attributes n_layers={} n_heads={} n_kv_heads={} head_dim={} token_count={} must all be positive", path,
         I.n_layers, I.n_heads, I.n_kv_heads, I.head_dim, I.token_count);
  if (I.n_heads % I.n_kv_heads != 0)
    fail("{}: n_heads={} is not a multiple of n_kv_heads={}", path, I.n_heads, I.n_kv_heads);
  if (I.storage_dtype != "float32" && I.storage_dtype != "float16")
    fail("{}: storage_dtype='{}', expected float32 or float16", path, I.storage_dtype);
  const bool v2 = I.format_version >= 2;
  if (I.rope_convention != "adjacent-pairs" && I.rope_convention != "half-split" && !(v2 && I.rope_convention == "none"))
    fail("{}: rope_convention='{}', expected adjacent-pairs or half-split{}", path, I.rope_convention, v2 ? " or none" : "");
}

void DumpReader::Impl::read_tokens() {
  const H5::H5File& f = *file;
  const DumpInfo& I = info;
  if (!f.nameExists("token_ids")) fail("{}: dataset /token_ids is missing", path);
  H5::DataSet ids_ds = f.openDataSet("token_ids");
  if (ids_ds.getTypeClass() != H5T_INTEGER || ids_ds.getSpace().getSimpleExtentNdims() != 1 ||
      ids_ds.getSpace().getSimpleExtentNpoints() != I.token_count)
    fail("{}: /token_ids must be integer [token_count={}], found {} values", path, I.token_count,
         ids_ds.getSpace().getSimpleExtentNpoints());
  h5::check_dataset_storage(ids_ds, path, "token_ids", kRedo);
  ids.resize(I.token_count);
  ids_ds.read(ids.data(), H5::PredType::NATIVE_INT);
  if (!f.nameExists("token_text")) return;
  H5::DataSet tt = f.openDataSet("token_text");
  h5::check_dataset_storage(tt, path, "token_text", kRedo);
  if (tt.getTypeClass() != H5T_STRING || tt.getSpace().getSimpleExtentNpoints() != I.token_count)
    fail("{}: /token_text must hold {} strings", path, I.token_count);
  H5::StrType st = tt.getStrType();
  if (st.isVariableStr()) {
    std::vector<char*> ptrs(I.token_count, nullptr);
    H5::StrType mt(H5::PredType::C_S1, H5T_VARIABLE);
    tt.read(ptrs.data(), mt);
    for (char* p : ptrs) text.emplace_back(p ? p : "");
    H5Dvlen_reclaim(mt.getId(), tt.getSpace().getId(), H5P_DEFAULT, ptrs.data());
  } else {
    const size_t w = st.getSize();
    std::vector<char> buf(w * I.token_count);
    tt.read(buf.data(), st);
    for (long i = 0; i < I.token_count; ++i) {
      std::string s(buf.data() + i * w, w);
      s.resize(std::strlen(s.c_str()));
      text.push_back(s);
    }
  }
}

void DumpReader::Impl::check_layer_groups() const {
  const H5::H5File& f = *file;
  const int n_layers = info.n_layers;
  const std::regex layer_name("layer_[0-9]+");
  int groups = 0, highest = -1;
  for (hsize_t i = 0; i < f.getNumObjs(); ++i) {
    const std::string name = f.getObjnameByIdx(i);
    if (!std::regex_match(name, layer_name)) continue;
    ++groups;
    highest = std::max(highest, std::atoi(name.c_str() + 6));
  }
  if (groups > n_layers || highest >= n_layers)
    fail("{}: attribute n_layers={} but the file holds {} layer groups (up to /{}); the attributes and the data "
         "disagree: re-create the dump, or correct n_layers",
         path, n_layers, groups, layer_group(highest));
  for (int l = 0; l < n_layers; ++l)
    if (!f.nameExists(layer_group(l)))
      fail("{}: group /{} is missing: attribute n_layers={} but the file holds {} layer groups; the dump is "
           "incomplete: re-create it",
           path, layer_group(l), n_layers, groups);
}

LayerAttention DumpReader::Impl::read_layer_attention(const H5::Group& grp, const std::string& g) const {
  const LayerAttrs LA{grp, path, g};
  LayerAttention a;
  a.scaling = LA.f64("scaling");
  a.sliding_window = static_cast<long>(LA.i64("sliding_window"));
  a.softcap = LA.f64("softcap");
  a.rope_convention = LA.str("rope_convention");
  a.rotary_dim = static_cast<int>(LA.i64_in("rotary_dim", 0, 8192));
  a.rope_theta = LA.f64("rope_theta");
  if (grp.nameExists("sinks")) {
    H5::DataSet ds = grp.openDataSet("sinks");
    h5::check_dataset_storage(ds, path, g + "/sinks", kRedo);
    H5::DataSpace sp = ds.getSpace();
    if (ds.getTypeClass() != H5T_FLOAT || sp.getSimpleExtentNdims() != 1 || sp.getSimpleExtentNpoints() != info.n_heads)
      fail("{}: /{}/sinks must be a float vector [n_heads={}], found {} values in {} dimensions; re-create the dump", path, g,
           info.n_heads, sp.getSimpleExtentNpoints(), sp.getSimpleExtentNdims());
    a.sinks.resize(info.n_heads);
    ds.read(a.sinks.data(), H5::PredType::NATIVE_FLOAT);
  }
  const std::string why = attention_problem(a, info.n_heads, info.head_dim);
  if (!why.empty()) fail("{}: /{}: {}; the producer recorded the layer's attention wrongly: re-create the dump", path, g, why);
  return a;
}

void DumpReader::Impl::check_layer_tensor(const H5::Group& grp, const std::string& g, const char* t) const {
  const DumpInfo& I = info;
  if (!I.has_pre_rope && is_pre(t)) {
    if (grp.nameExists(t))
      fail("{}: /{}/{} is present but has_pre_rope=0 (then no layer holds q_pre or k_pre); the attributes and the "
           "data disagree: re-create the dump",
           path, g, t);
    return;
  }
  if (!grp.nameExists(t))
    fail("{}: dataset /{}/{} is missing{}", path, g, t,
         is_pre(t) && I.format_version >= 2 ? " although has_pre_rope=1; re-create the dump, or write has_pre_rope=0 with no "
                                              "q_pre/k_pre in any layer"
                                            : "");
  H5::DataSet ds = grp.openDataSet(t);
  const int heads = (t[0] == 'q') ? I.n_heads : I.n_kv_heads;
  H5::DataSpace sp = ds.getSpace();
  hsize_t dims[3] = {0, 0, 0};
  if (sp.getSimpleExtentNdims() != 3)
    fail("{}: /{}/{} has {} dimensions, expected 3 [heads, tokens, head_dim]", path, g, t, sp.getSimpleExtentNdims());
  sp.getSimpleExtentDims(dims);
  if (dims[0] != static_cast<hsize_t>(heads) || dims[1] != static_cast<hsize_t>(I.token_count) ||
      dims[2] != static_cast<hsize_t>(I.head_dim))
    fail("{}: /{}/{} has shape [{}, {}, {}], but the attributes imply [{}, {}, {}] (n_{}heads, token_count, "
         "head_dim)",
         path, g, t, dims[0], dims[1], dims[2], heads, I.token_count, I.head_dim, t[0] == 'q' ? "" : "kv_");
  if (ds.getTypeClass() != H5T_FLOAT) fail("{}: /{}/{} is not a floating-point dataset", path, g, t);
  h5::check_dataset_storage(ds, path, g + "/" + t, kRedo);
  const size_t bytes = ds.getFloatType().getSize();
  if (bytes != (I.storage_dtype == "float16" ? 2u : 4u))
    fail("{}: /{}/{} stores {}-byte floats but storage_dtype is '{}'", path, g, t, bytes, I.storage_dtype);
}

void DumpReader::Impl::read_layers() {
  layer_checked = std::make_unique<std::atomic<bool>[]>(info.n_layers);
  for (int l = 0; l < info.n_layers; ++l) {
    layer_checked[l] = false;
    const std::string g = layer_group(l);
    if (!file->nameExists(g)) fail("{}: group /{} is missing (n_layers={}); the dump is incomplete: re-create it", path, g, info.n_layers);
    const H5::Group grp = file->openGroup(g);
    if (info.format_version >= 2) info.layers.push_back(read_layer_attention(grp, g));
    for (const char* t : kTensors) check_layer_tensor(grp, g, t);
  }
}

void DumpReader::Impl::open(const std::string& file_path, const std::vector<char>* image) {
  h5::silence();
  path = file_path;
  open_file(file_path, image);
  try {
    h5::refuse_links(*file, path, kRedo);
    read_root();
    check_root();
    read_tokens();
    check_layer_groups();
    read_layers();
  } catch (const H5::Exception& e) {
    fail("{}: HDF5 error while reading the dump's structure ({}); the file may be truncated or corrupt", path,
         e.getDetailMsg());
  }
}

LayerDump DumpReader::read_layer(int layer, const std::vector<std::string>& tensors) const {
  const DumpInfo& I = impl_->info;
  if (layer < 0 || layer >= I.n_layers) fail("{}: layer {} out of range (n_layers={})", impl_->path, layer, I.n_layers);
  const bool f16 = I.storage_dtype == "float16";
  LayerDump d;
  d.layer = layer;
  std::vector<uint16_t> half;
  for (const std::string& t : tensors) {
    HeadTensor* dst = t == "q" ? &d.q : t == "q_pre" ? &d.q_pre : t == "k" ? &d.k : t == "k_pre" ? &d.k_pre : t == "v" ? &d.v : nullptr;
    if (!dst) fail("unknown dump tensor '{}' (expected q, q_pre, k, k_pre or v)", t);
    if (is_pre(t) && !I.has_pre_rope) no_pre_rope(t);
    dst->heads = t[0] == 'q' ? I.n_heads : I.n_kv_heads;
    dst->tokens = static_cast<int>(I.token_count);
    dst->head_dim = I.head_dim;
    dst->data.resize(static_cast<size_t>(dst->heads) * dst->tokens * dst->head_dim);
    if (f16) {  // raw half bits through HDF5 (no library conversion), decoded here
      half.resize(dst->data.size());
      impl_->read_raw(layer, t, nullptr, &half);
      for (size_t i = 0; i < half.size(); ++i) dst->data[i] = half_bits_to_float(half[i]);
    } else {
      impl_->read_raw(layer, t, &dst->data, nullptr);
    }
    check_finite(dst->data.data(), dst->data.size(), impl_->path, layer, t, dst->tokens, dst->head_dim);
  }
  // The layer's other tensors are checked too, once per reader, so that no NaN/Inf goes unnoticed in a
  // tensor a tool does not read (q_pre, k_pre).
  if (!impl_->layer_checked[layer].load()) {
    std::vector<float> buf;
    for (const char* t : kTensors) {
      if (std::find(tensors.begin(), tensors.end(), t) != tensors.end()) continue;
      if (is_pre(t) && !I.has_pre_rope) continue;
      const int heads = t[0] == 'q' ? I.n_heads : I.n_kv_heads;
      const size_t n = static_cast<size_t>(heads) * I.token_count * I.head_dim;
      if (f16) {
        half.resize(n);
        impl_->read_raw(layer, t, nullptr, &half);
        const size_t i = first_nonfinite_half(half.data(), n);
        if (i < n) {  // decode to name the position
          buf.resize(n);
          for (size_t k = 0; k < n; ++k) buf[k] = half_bits_to_float(half[k]);
          check_finite(buf.data(), n, impl_->path, layer, t, static_cast<int>(I.token_count), I.head_dim);
        }
      } else {
        buf.resize(n);
        impl_->read_raw(layer, t, &buf, nullptr);
        check_finite(buf.data(), n, impl_->path, layer, t, static_cast<int>(I.token_count), I.head_dim);
      }
    }
    impl_->layer_checked[layer] = true;
  }
  return d;
}

std::vector<float> DumpReader::read_head(int layer, const std::string& tensor, int head) const {
  const DumpInfo& I = impl_->info;
  const int heads = tensor[0] == 'q' ? I.n_heads : I.n_kv_heads;
  if (layer < 0 || layer >= I.n_layers || head < 0 || head >= heads)
    fail("{}: layer {} head {} out of range", impl_->path, layer, head);
  if (is_pre(tensor) && !I.has_pre_rope) no_pre_rope(tensor);
  std::vector<float> out(static_cast<size_t>(I.token_count) * I.head_dim);
  try {
    std::lock_guard<std::mutex> lock(h5_read_lock());
    H5::DataSet ds = impl_->file->openDataSet(layer_group(layer) + "/" + tensor);
    H5::DataSpace fs = ds.getSpace();
    hsize_t off[3] = {static_cast<hsize_t>(head), 0, 0};
    hsize_t cnt[3] = {1, static_cast<hsize_t>(I.token_count), static_cast<hsize_t>(I.head_dim)};
    fs.selectHyperslab(H5S_SELECT_SET, cnt, off);
    H5::DataSpace ms(3, cnt);
    ds.read(out.data(), H5::PredType::NATIVE_FLOAT, ms, fs);
  } catch (const H5::Exception& e) {
    fail("{}: reading head {} of /{}/{} failed ({}); the file is truncated or corrupt", impl_->path, head,
         layer_group(layer), tensor, e.getDetailMsg());
  }
  check_finite(out.data(), out.size(), impl_->path, layer, tensor, static_cast<int>(I.token_count), I.head_dim);
  return out;
}

}  // namespace oscar
