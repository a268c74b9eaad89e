// test_gguf_smollm2.cpp: the GGUF reader on a real pretrained model, SmolLM2-135M-Instruct.Q4_1.gguf
// (fetched by data/fetch_smollm2.sh into the git-ignored data/models/), against the facts recorded in
// ../shared/data/README.md and against sha256s of whole dequantized tensors computed with gguf-py
// (gguf 0.19.0, gguf.quants.dequantize, float32 little-endian). When the file is absent the test prints
// "SKIPPED: SmolLM2 ..." and CTest reports it as skipped (SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt).
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "gguf_checks.h"
#include "test_data.h"

using namespace oscar;

namespace {

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

}  // namespace

TEST_CASE("SmolLM2-135M-Instruct Q4_1 GGUF: metadata and tensors", "[gguf][real]") {
  if (!test::present(test::smollm2_model())) return;
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

  test::check_config(read_model_config(f),
                     {.architecture = "llama", .name = "Smollm2 135M 8k Lc100K Mix1 Ep2", .n_layers = 30, .dim = 576,
                      .ffn_dim = 1536, .n_heads = 9, .n_kv_heads = 3, .head_dim = 64, .rope_dims = 64, .rope_base = 100000.0,
                      .rope_convention = "adjacent-pairs", .rms_eps = 1e-5, .context_length = 8192, .vocab_size = 49152,
                      .tied_output = true, .tokenizer_model = "gpt2"});
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

  CHECK(f.tensors().size() == 272);
  CHECK(test::tensor_types(f) == std::map<std::string, int>{{"Q4_1", 210}, {"F32", 61}, {"Q8_0", 1}});
  const GgufTensor& emb = f.tensor("token_embd.weight");
  CHECK(std::string(emb.type_name()) == "Q8_0");
  CHECK(emb.dims == std::vector<int64_t>{576, 49152});
  CHECK(f.tensor("blk.0.attn_k.weight").dims == std::vector<int64_t>{576, 192});
  CHECK(f.tensor("blk.29.ffn_down.weight").dims == std::vector<int64_t>{1536, 576});
}

TEST_CASE("SmolLM2-135M-Instruct Q4_1 GGUF: dequantized tensors equal gguf-py's", "[gguf][real]") {
  if (!test::present(test::smollm2_model())) return;
  const GgufFile f = GgufFile::open(oscar::test::smollm2_gguf());
  // sha256 of each whole tensor dequantized to float32 by gguf-py.
  const std::map<std::string, std::string> expect = {
      {"token_embd.weight", "3fd491c8066dd9dc1a2bf6796701526c82817d95c0ecabacdef3013c2b8bbbaa"},
      {"blk.0.attn_q.weight", "aa74111ad24c3624a20374d2026fd1f50bfe2520252e3c9aef4a666a28593cc8"},
      {"blk.29.ffn_down.weight", "c19605745425a11e704e305ce3d27b632c406195d39eb3377e9cfb140ac643d1"},
      {"output_norm.weight", "3b87f8e27335e67fc08f159cabfd2d18f205d6c5b225a6f978153552bf01d559"},
  };
  test::check_sha256s(f, expect);
  const auto emb = test::all_values(f.tensor("token_embd.weight"));
  CHECK(emb[0] == Approx(-0.10654449f));
  size_t non_finite = 0;
  for (float x : emb) non_finite += !std::isfinite(x);
  CHECK(non_finite == 0);

  // Every tensor dequantizes to finite values; timing of the whole model (135 M values).
  const auto t0 = std::chrono::steady_clock::now();
  const test::AllTensors all = test::dequantize_all(f);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(all.non_finite == 0);
  CHECK(all.values > 134000000);
  std::printf("SmolLM2: %lld values dequantized and checked in %.2f s\n", static_cast<long long>(all.values), s);
}
