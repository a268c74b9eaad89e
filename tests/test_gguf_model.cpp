// test_gguf_model.cpp: the GGUF forward pass on tiny random models of each architecture (llama with
// permuted Q/K and rope_freqs factors, qwen2 with q/k/v biases and partial half-split RoPE, qwen3 with
// q/k RMSNorm and an explicit head_dim), against logits and layer-0 q_pre/k_pre from an independent
// float64 numpy implementation (tests/fixtures/make_gguf_model_fixtures.py); the weight abstraction's
// block products against plain float32 products; load-time errors naming the tensor.
#include <catch2/catch.hpp>

#include <cmath>
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "oscar/01_core/error.h"
#include "oscar/01_core/file_io.h"
#include "oscar/02_model/architecture.h"
#include "oscar/02_model/forward/gguf_model.h"
#include "test_data.h"

using namespace oscar;

namespace {

std::string fixture(const std::string& name) { return std::string(OSCAR_DATA_DIR) + "/../tests/fixtures/" + name; }

struct Reference {
  std::vector<int> tokens;
  MatrixRM logits, q_pre, k_pre;
};

Reference read_reference(const std::string& path) {
  const auto raw = read_file_bytes(path);
  REQUIRE(raw.size() >= 24);
  REQUIRE(std::memcmp(raw.data(), "OSCTREF1", 8) == 0);
  int32_t h[4];
  std::memcpy(h, raw.data() + 8, 16);
  const int T = h[0], V = h[1], qd = h[2], kvd = h[3];
  REQUIRE(raw.size() == 24 + 4 * static_cast<size_t>(T) * (1 + V + qd + kvd));
  Reference r;
  const uint8_t* p = raw.data() + 24;
  r.tokens.resize(T);
  std::memcpy(r.tokens.data(), p, 4 * T);
  p += 4 * T;
  auto take = [&](int cols) {
    MatrixRM m(T, cols);
    std::memcpy(m.data(), p, 4 * static_cast<size_t>(T) * cols);
    p += 4 * static_cast<size_t>(T) * cols;
    return m;
  };
  r.logits = take(V);
  r.q_pre = take(qd);
  r.k_pre = take(kvd);
  return r;
}

// max |a - b| / max |b|
double rel_err(const MatrixRM& a, const MatrixRM& b) {
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  return (a - b).cwiseAbs().maxCoeff() / b.cwiseAbs().maxCoeff();
}

void check_architecture(const std::string& arch) {
  INFO(arch);
  const GgufModel g = GgufModel::load(fixture("tiny_" + arch + ".gguf"));
  const Model& m = g.model();
  const Reference ref = read_reference(fixture("tiny_" + arch + ".ref"));
  const int T = static_cast<int>(ref.tokens.size());

  // Whole sequence in one chunk (> 16 tokens: the many-token block path), with the layer-0 q_pre/k_pre.
  KvCache cache(m.config());
  MatrixRM q_pre0, k_pre0;
  const MatrixRM logits = m.forward(ref.tokens, cache, [&](const LayerQKV& a) {
    if (a.layer == 0) {
      q_pre0 = a.q_pre;
      k_pre0 = a.k_pre;
    }
  });
  const double e_logits = rel_err(logits, ref.logits), e_q = rel_err(q_pre0, ref.q_pre), e_k = rel_err(k_pre0, ref.k_pre);
  std::printf("tiny %s: relative error logits %.2e, layer-0 q_pre %.2e, k_pre %.2e\n", arch.c_str(), e_logits, e_q, e_k);
  CHECK(e_logits < 1e-4);
  CHECK(e_q < 1e-4);
  CHECK(e_k < 1e-4);

  // A prefix chunk, then one token at a time (decode path), then a short chunk.
  KvCache c2(m.config());
  MatrixRM stepped(T, m.config().vocab_size);
  const std::span<const int> toks(ref.tokens);
  stepped.topRows(17) = m.forward(toks.subspan(0, 17), c2);
  for (int t = 17; t < 21; ++t) stepped.row(t) = m.forward(toks.subspan(t, 1), c2);
  stepped.bottomRows(T - 21) = m.forward(toks.subspan(21), c2);
  CHECK(c2.length() == T);
  const double e_step = rel_err(stepped, ref.logits);
  std::printf("tiny %s: chunked + token-by-token relative error %.2e\n", arch.c_str(), e_step);
  CHECK(e_step < 1e-4);
}

}  // namespace

TEST_CASE("GGUF llama: permuted Q/K with adjacent-pair RoPE equals rotate_half on the original rows", "[gguf][model]") {
  check_architecture("llama");
  const GgufModel g = GgufModel::load(fixture("tiny_llama.gguf"));
  const ModelConfig& c = g.config();
  CHECK(c.architecture == "llama");
  CHECK(c.rope_convention == "adjacent-pairs");
  CHECK_FALSE(c.shared_classifier);
  CHECK(g.model().weights().rope_freq_factors != nullptr);
  CHECK(g.model().weights().classifier.type_name() == "F16");
  CHECK(g.model().weights().layers[0].w1.type_name() == "Q4_1");
  CHECK(g.name() == "tiny_llama");
  CHECK(g.sha256() == sha256_hex(read_file_bytes(fixture("tiny_llama.gguf")).data(), read_file_bytes(fixture("tiny_llama.gguf")).size()));
}

TEST_CASE("GGUF qwen2: q/k/v biases, partial half-split RoPE, tied output", "[gguf][model]") {
  check_architecture("qwen2");
  const GgufModel g = GgufModel::load(fixture("tiny_qwen2.gguf"));
  CHECK(g.config().qkv_bias);
  CHECK(g.config().rope_convention == "half-split");
  CHECK(g.config().rotary_dims() == 12);
  CHECK(g.config().shared_classifier);
  CHECK(g.model().weights().layers[1].wo.type_name() == "BF16");
}

TEST_CASE("GGUF qwen3: q/k RMSNorm before RoPE, explicit head_dim", "[gguf][model]") {
  check_architecture("qwen3");
  const GgufModel g = GgufModel::load(fixture("tiny_qwen3.gguf"));
  CHECK(g.config().qk_norm);
  CHECK(g.config().head_dim() == 32);
  CHECK(g.config().q_dim() == 128);
  CHECK(g.config().kv_dim() == 64);
  CHECK(g.config().dim == 64);
  CHECK(g.storage().find("Q8_0") != std::string::npos);
}

TEST_CASE("GGUF gemma3: sandwich norms, GeGLU, scaled embeddings, local layers with their window and RoPE base", "[gguf][model]") {
  check_architecture("gemma3");  // 24 tokens through a window of 8: the local layers' mask and cache trimming count
  const GgufModel g = GgufModel::load(fixture("tiny_gemma3.gguf"));
  const ModelConfig& c = g.config();
  CHECK(c.architecture == "gemma3");
  CHECK(c.qk_norm);
  CHECK(c.rope_convention == "half-split");
  CHECK(c.layer_windows == std::vector<int>{8, 8, 8, 8, 8, 0});
  CHECK(c.rope_theta_of(0) == 10000.0);
  CHECK(c.rope_theta_of(5) == 1e6);
  CHECK(g.model().weights().layers[0].post_att_norm != nullptr);
  // A local layer's cache keeps the positions a later query can see: 24 tokens one at a time leave at most 2 windows.
  KvCache cache(c);
  for (int t = 0; t < 24; ++t) {
    const int tok = t % 64;
    g.model().forward(std::span<const int>(&tok, 1), cache);
  }
  CHECK(cache.held_rows(5) == 24);
  CHECK(cache.held_rows(0) <= 2 * 8);
  CHECK(cache.first_position(0) + cache.held_rows(0) == 24);
  CHECK(cache.first_position(0) <= 24 - 8);
}

TEST_CASE("linear(): stored-type row blocks equal the float32 product of the dequantized matrix", "[gguf][model]") {
  const GgufFile f = GgufFile::open(fixture("tiny_qwen3.gguf"));
  for (const char* name : {"token_embd.weight", "blk.0.attn_output.weight", "blk.1.ffn_down.weight"}) {
    INFO(name);
    const GgufTensor& t = f.tensor(name);
    const WeightMatrix W = WeightMatrix::gguf(t);
    REQUIRE(W.f32_data() == nullptr);
    std::vector<float> dense(static_cast<size_t>(t.n_elements()));
    dequantize_rows(t, 0, t.n_rows(), dense.data());
    const WeightMatrix D = WeightMatrix::f32(dense.data(), W.rows(), W.cols());
    for (int n : {1, 3, 16, 17, 40}) {
      const MatrixRM x = MatrixRM::Random(n, W.cols());
      MatrixRM a, b;
      linear(x, W, a);
      linear(x, D, b);
      CHECK(a.rows() == n);
      CHECK(a.cols() == W.rows());
      CHECK(rel_err(a, b) < 1e-6);
      MatrixRM acc = MatrixRM::Ones(n, W.rows());
      linear_add(x, W, acc);
      CHECK(rel_err(acc, b.array() + 1.0f) < 1e-6);
    }
  }
}

namespace {

// Rewrites one tensor's ggml type id or first dimension in a copy of the fixture (the tensor infos follow
// the metadata; the name is found by its bytes). Returns the copy's path.
std::string patched(const std::string& tensor, int what, uint64_t value) {
  auto raw = read_file_bytes(fixture("tiny_qwen3.gguf"));
  const std::string needle = tensor;
  auto it = std::search(raw.begin(), raw.end(), needle.begin(), needle.end());
  REQUIRE(it != raw.end());
  uint8_t* p = &*it + needle.size();  // then: uint32 n_dims, int64 dims[n], uint32 type, uint64 offset
  uint32_t n_dims;
  std::memcpy(&n_dims, p, 4);
  if (what == 0) std::memcpy(p + 4 + 8 * n_dims, &value, 4);  // type
  else std::memcpy(p + 4, &value, 8);                          // dims[0]
  return test::scratch_file("patched_" + std::to_string(what) + ".gguf", raw);
}

}  // namespace

TEST_CASE("GGUF model load errors name the file and the tensor", "[gguf][model]") {
  // A shape that disagrees with the metadata (attn_k of 32 columns instead of 64: fewer bytes, still valid).
  const std::string bad_shape = patched("blk.1.attn_k.weight", 1, 32);
  CHECK_THROWS_WITH(GgufModel::load(bad_shape), Catch::Contains("blk.1.attn_k.weight") && Catch::Contains("shape") &&
                                                    Catch::Contains(bad_shape));
  // A type oscar-kv cannot dequantize (I8: fewer bytes than the F16 it replaces, so the layout stays valid).
  const std::string bad_type = patched("blk.0.ffn_up.weight", 0, 24);  // I8
  CHECK_THROWS_WITH(GgufModel::load(bad_type), Catch::Contains("blk.0.ffn_up.weight"));
  CHECK_THROWS_WITH(GgufModel::load(fixture("no_such.gguf")), Catch::Contains("no_such.gguf"));
}

TEST_CASE("llama2.c checkpoints keep their forward pass through the generalised model", "[model]") {
  const Checkpoint ck = load_checkpoint(test::stories_model());
  const Model m(ck);
  CHECK(m.config().head_dim() == 8);
  CHECK(m.config().rotary_dims() == 8);
  CHECK(&m.checkpoint() == &ck);
  CHECK(m.weights().classifier.f32_data() == ck.classifier);
  // Token by token equals one chunk (float32 weights: same path as before).
  const std::vector<int> toks = {1, 403, 407, 261, 378, 430, 13, 500, 17};
  KvCache a(m.config()), b(m.config());
  const MatrixRM whole = m.forward(toks, a);
  MatrixRM stepped(toks.size(), m.config().vocab_size);
  for (size_t t = 0; t < toks.size(); ++t) stepped.row(t) = m.forward(std::span<const int>(&toks[t], 1), b);
  CHECK(rel_err(stepped, whole) < 1e-5);
  const GgufModel g = GgufModel::load(fixture("tiny_llama.gguf"));
  CHECK_THROWS_WITH(g.model().checkpoint(), Catch::Contains("not built from a llama2.c checkpoint"));
}

TEST_CASE("dequantize_fast equals dequantize bit for bit on every type of the dequantization fixture", "[gguf][model]") {
  const GgufFile f = GgufFile::open(fixture("dequant.gguf"));
  int checked = 0;
  for (const GgufTensor& t : f.tensors()) {
    if (!ggml_type_dequantizable(t.type)) continue;
    INFO(t.name);
    std::vector<float> ref(static_cast<size_t>(t.n_elements())), fast(ref.size(), -7.f);
    dequantize_rows(t, 0, t.n_rows(), ref.data());
    for (int64_t r = 0; r < t.n_rows(); ++r)
      dequantize_fast(t.ggml_type(), t.data + r * t.row_bytes(), fast.data() + r * t.row_length(), t.row_length());
    size_t differ = 0;
    for (size_t i = 0; i < ref.size(); ++i)
      differ += !(std::isnan(ref[i]) ? std::isnan(fast[i]) : std::memcmp(&ref[i], &fast[i], 4) == 0);
    CHECK(differ == 0);
    ++checked;
  }
  CHECK(checked >= 12);
}

TEST_CASE("the architecture table: each row's block unit, the unit's tensor names, an unknown unit refused", "[gguf][model]") {
  const BlockUnitFacts& llama = architecture_facts("llama").block();
  const BlockUnitFacts& gemma = architecture_facts("gemma3").block();
  CHECK(llama.unit == BlockUnit::llama);
  CHECK(!llama.post_norms());
  CHECK(gemma.unit == BlockUnit::gemma3);
  CHECK(gemma.post_norms());
  CHECK(block_tensor(3, gemma.tensors.post_ffn_norm) == "blk.3.post_ffw_norm.weight");
  CHECK(block_tensor(0, llama.tensors.q_bias) == "blk.0.attn_q.bias");
  CHECK(architecture_facts("qwen3").block().unit == BlockUnit::llama);
  CHECK(architecture_facts("gemma3").ffn == FeedForward::geglu_tanh);
  CHECK(architecture_facts("llama").ffn == FeedForward::swiglu);
  CHECK_THROWS_WITH(block_unit_facts(static_cast<BlockUnit>(7)), Catch::Contains("block unit 7 is not in the unit table"));
  CHECK_THROWS_WITH(architecture_facts("mamba"), Catch::Contains("architecture 'mamba' is not supported"));
}
