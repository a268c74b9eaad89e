// gguf_model.cpp: GgufModel: the tensor map of the GGUF architectures (architecture.h) (names, shapes, types)
// checked and turned into ModelWeights views; small vectors converted to float32; the file's sha256
// streamed lazily.
#include "oscar/02_model/forward/gguf_model.h"

#include <cmath>
#include <openssl/evp.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "oscar/01_core/error.h"

namespace oscar {

struct GgufModel::Impl {
  GgufFile file;
  GgufModelConfig gc;
  std::string path, name;
  std::vector<std::vector<float>> vectors;  // norm weights, biases, RoPE factors as float32
  std::unique_ptr<Model> model;
  mutable std::string sha;

  explicit Impl(GgufFile f) : file(std::move(f)) {}

  const GgufTensor& need(const std::string& tensor) const {
    if (!file.has_tensor(tensor))
      fail("{}: tensor '{}' is missing, which a {} model needs; the file is incomplete or not a {} model", path, tensor,
           gc.architecture, gc.architecture);
    const GgufTensor& t = file.tensor(tensor);
    if (!ggml_type_dequantizable(t.type))
      fail("{}: tensor '{}' is stored as {} (ggml type {}), which oscar-kv cannot dequantize; supported types: {}; use "
           "a file quantized to one of them (e.g. Q8_0, Q4_K_M)",
           path, tensor, t.type_name(), t.type, ggml_dequantizable_types());
    return t;
  }

  // A [rows, cols] weight matrix: ggml dims {cols, rows}.
  WeightMatrix matrix(const std::string& tensor, int64_t rows, int64_t cols) const {
    const GgufTensor& t = need(tensor);
    if (t.dims != std::vector<int64_t>{cols, rows})
      fail("{}: tensor '{}' has shape {} (ggml order), expected {}x{} from the metadata ({} model, embedding {}, {} "
           "heads / {} KV heads of {}, feed-forward {}); the file is inconsistent",
           path, tensor, t.shape_string(), cols, rows, gc.architecture, gc.dim, gc.n_heads, gc.n_kv_heads, gc.head_dim,
           gc.ffn_dim);
    return WeightMatrix::gguf(t);
  }

  // A vector of `n` values, converted to float32 and kept.
  const float* vector(const std::string& tensor, int64_t n) {
    const GgufTensor& t = need(tensor);
    if (t.dims != std::vector<int64_t>{n})
      fail("{}: tensor '{}' has shape {}, expected a vector of {} values from the metadata; the file is inconsistent",
           path, tensor, t.shape_string(), n);
    std::vector<float>& v = vectors.emplace_back(static_cast<size_t>(n));
    dequantize_rows(t, 0, 1, v.data());
    for (int64_t i = 0; i < n; ++i)  // a norm weight or bias is small: checked whole before it is trusted
      if (!std::isfinite(v[static_cast<size_t>(i)]))
        fail("{}: tensor '{}' holds a non-finite value ({}) at index {}; the file is damaged: check its sha256 or fetch "
             "it again",
             path, tensor, v[static_cast<size_t>(i)], i);
    return v.data();
  }

  // Block l's tensors, by the names of its unit (architecture.h).
  ModelLayer layer(const ModelConfig& c, const BlockUnitFacts& unit, int l) {
    const BlockTensorNames& n = unit.tensors;
    const int64_t d = c.dim, qd = c.q_dim(), kvd = c.kv_dim(), hid = c.hidden_dim, hd = c.head_dim();
    const auto mat = [&](std::string_view name, int64_t rows, int64_t cols) { return matrix(block_tensor(l, name), rows, cols); };
    const auto vec = [&](std::string_view name, int64_t size) { return vector(block_tensor(l, name), size); };
    ModelLayer L;
    L.rms_att = vec(n.attn_norm, d);
    L.wq = mat(n.q, qd, d);
    L.wk = mat(n.k, kvd, d);
    L.wv = mat(n.v, kvd, d);
    if (c.qkv_bias) L.bq = vec(n.q_bias, qd), L.bk = vec(n.k_bias, kvd), L.bv = vec(n.v_bias, kvd);
    if (c.qk_norm) L.q_norm = vec(n.q_norm, hd), L.k_norm = vec(n.k_norm, hd);
    L.wo = mat(n.o, d, qd);
    L.rms_ffn = vec(n.ffn_norm, d);
    L.w1 = mat(n.gate, hid, d);
    L.w2 = mat(n.down, d, hid);
    L.w3 = mat(n.up, hid, d);
    if (unit.post_norms()) L.post_att_norm = vec(n.post_attn_norm, d), L.post_ffn_norm = vec(n.post_ffn_norm, d);
    return L;
  }
};

ModelConfig model_config_from_gguf(const GgufModelConfig& g) {
  ModelConfig c;
  c.dim = g.dim;
  c.hidden_dim = g.ffn_dim;
  c.n_layers = g.n_layers;
  c.n_heads = g.n_heads;
  c.n_kv_heads = g.n_kv_heads;
  c.vocab_size = g.vocab_size;
  c.seq_len = g.context_length;
  c.shared_classifier = g.tied_output;
  c.architecture = g.architecture;
  c.head_dim_explicit = g.head_dim;
  c.rope_theta = g.rope_base;
  c.rope_convention = g.rope_convention;
  c.rope_dims = g.rope_dims;
  c.rms_eps = g.rms_eps;
  c.qk_norm = g.qk_norm;
  c.qkv_bias = g.qkv_bias;
  c.layer_windows = g.layer_windows;
  c.rope_theta_local = g.rope_base_local;
  c.attention_scale = g.attention_scale;
  return c;
}

GgufModel::GgufModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GgufModel::GgufModel(GgufModel&&) noexcept = default;
GgufModel& GgufModel::operator=(GgufModel&&) noexcept = default;
GgufModel::~GgufModel() = default;

GgufModel GgufModel::load(const std::string& path) {
  auto m = std::make_unique<Impl>(GgufFile::open(path));
  m->path = path;
  std::string name = std::filesystem::path(path).filename().string();
  if (name.size() > 5 && name.ends_with(".gguf")) name.resize(name.size() - 5);
  m->name = name;
  m->gc = read_model_config(m->file);
  const GgufModelConfig& g = m->gc;
  const std::string a = g.architecture + ".";
  if (m->file.has(a + "rope.scaling.type")) {
    const std::string type = m->file.get_string(a + "rope.scaling.type");
    const double factor = m->file.has(a + "rope.scaling.factor") ? m->file.get_f64(a + "rope.scaling.factor") : 1.0;
    if (type != "none" && factor != 1.0)
      fail("{}: RoPE scaling '{}' (factor {}) is not supported by oscar-kv's forward pass; use a model without RoPE "
           "scaling",
           path, type, factor);
  }
  const ArchitectureFacts& facts = architecture_facts(g.architecture);
  const BlockTensorNames& tn = facts.block().tensors;
  if (facts.qk_norm && !g.qk_norm)
    fail("{}: a {} model needs tensor '{}', which is missing; the file is incomplete", path, g.architecture,
         block_tensor(0, tn.q_norm));
  if (!facts.qk_norm && g.qk_norm)
    fail("{}: tensor '{}' (q/k norm) is present in a {} model, which has none; the file is inconsistent", path,
         block_tensor(0, tn.q_norm), g.architecture);
  if (!facts.qkv_bias && g.qkv_bias)
    fail("{}: tensor '{}' is present in a {} model, which oscar-kv runs without q/k/v biases; the file is inconsistent",
         path, block_tensor(0, tn.q_bias), g.architecture);

  const ModelConfig c = model_config_from_gguf(g);
  const int64_t d = c.dim, V = c.vocab_size;
  const ModelTensorNames& names = kModelTensors;
  ModelWeights w;
  w.token_embedding = m->matrix(std::string(names.token_embd), V, d);
  w.classifier = g.tied_output ? w.token_embedding : m->matrix(std::string(names.output), V, d);
  w.rms_final = m->vector(std::string(names.output_norm), d);
  if (m->file.has_tensor(std::string(names.rope_freqs))) w.rope_freq_factors = m->vector(std::string(names.rope_freqs), c.rotary_dims() / 2);
  for (int l = 0; l < c.n_layers; ++l) w.layers.push_back(m->layer(c, facts.block(), l));
  if (m->file.has_tensor(block_tensor(c.n_layers, facts.block().tensors.attn_norm)))
    fail("{}: tensors of block {} exist but the metadata says {} blocks; the file is inconsistent", path, c.n_layers,
         c.n_layers);
  m->model = std::make_unique<Model>(c, std::move(w));
  return GgufModel(std::move(m));
}

const Model& GgufModel::model() const { return *impl_->model; }
const GgufModelConfig& GgufModel::gguf_config() const { return impl_->gc; }
const GgufFile& GgufModel::file() const { return impl_->file; }
const std::string& GgufModel::path() const { return impl_->path; }
const std::string& GgufModel::name() const { return impl_->name; }

const std::string& GgufModel::sha256() const {
  if (!impl_->sha.empty()) return impl_->sha;
  std::ifstream in(impl_->path, std::ios::binary);
  if (!in) fail("{}: cannot be read to compute its sha256; check that the file still exists", impl_->path);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) fail("sha256: OpenSSL digest failed");
  std::vector<char> buf(size_t{1} << 22);
  uint64_t total = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = in.gcount();
    if (got > 0 && EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(got)) != 1) fail("sha256: OpenSSL digest failed");
    total += static_cast<uint64_t>(got);
  }
  if (total != impl_->file.file_size())
    fail("{}: read {} bytes for its sha256 but the file had {} when opened; it changed while in use", impl_->path, total,
         impl_->file.file_size());
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx.get(), md, &len) != 1) fail("sha256: OpenSSL digest failed");
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  impl_->sha = hex;
  return impl_->sha;
}

std::string GgufModel::storage() const {
  std::map<std::string, int> count;
  std::vector<std::string> order;
  for (const auto& t : impl_->file.tensors())
    if (count[t.type_name()]++ == 0) order.push_back(t.type_name());
  std::string s = "gguf";
  for (size_t i = 0; i < order.size(); ++i)
    s += fmt::format("{} {} ({} tensor{})", i ? "," : "", order[i], count[order[i]], count[order[i]] == 1 ? "" : "s");
  return s;
}

}  // namespace oscar
