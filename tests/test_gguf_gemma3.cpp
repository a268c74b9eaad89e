// test_gguf_gemma3.cpp: the GGUF reader on a second real pretrained model, Gemma 3 270M (Q4_K_M: Q5_0, Q4_K, Q6_K,
// Q8_0 and F32 tensors), fetched by data/fetch_gemma3.sh into the git-ignored data/models/, against the facts of
// ../shared/data/README.md and sha256s of whole dequantized tensors computed with gguf-py (gguf 0.19.0,
// gguf.quants.dequantize, float32 little-endian). When the file is absent the test prints "SKIPPED: Gemma 3 ..." and
// CTest reports it as skipped (SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt).
#include <catch2/catch.hpp>

#include <map>

#include "gguf_checks.h"
#include "test_data.h"

using namespace oscar;

TEST_CASE("Gemma 3 270M Q4_K_M GGUF: metadata", "[gguf][real]") {
  if (!test::present(test::gemma3_model())) return;
  const GgufFile f = GgufFile::open(oscar::test::gemma3_gguf());
  CHECK(f.file_size() == 253113024u);
  CHECK(f.version() == 3);
  CHECK(f.get_string("general.architecture") == "gemma3");
  CHECK(f.get_u32("gemma3.block_count") == 18);
  CHECK(f.get_u32("gemma3.embedding_length") == 640);
  CHECK(f.get_u32("gemma3.feed_forward_length") == 2048);
  CHECK(f.get_u32("gemma3.attention.head_count") == 4);
  CHECK(f.get_u32("gemma3.attention.head_count_kv") == 1);
  CHECK(f.get_u32("gemma3.attention.key_length") == 256);
  CHECK(f.get_u32("gemma3.attention.value_length") == 256);
  CHECK(f.get_u32("gemma3.attention.sliding_window") == 512);
  CHECK(f.get_u32("gemma3.context_length") == 32768);
  CHECK(f.get_f32("gemma3.rope.freq_base") == 1e6f);
  CHECK(f.get_f32("gemma3.attention.layer_norm_rms_epsilon") == Approx(1e-6).epsilon(1e-6));
  CHECK(f.get_string("tokenizer.ggml.model") == "llama");  // SentencePiece scores, byte fallback
  CHECK(f.get_string("tokenizer.ggml.pre") == "default");
  CHECK(f.array_size("tokenizer.ggml.tokens") == 262144);
  CHECK(f.get_f32_array("tokenizer.ggml.scores").size() == 262144);
  CHECK(f.get_u32("tokenizer.ggml.bos_token_id") == 2);
  CHECK(f.get_u32("tokenizer.ggml.eos_token_id") == 1);
  CHECK(f.get_u32("tokenizer.ggml.unknown_token_id") == 3);
  CHECK(f.get_u32("tokenizer.ggml.padding_token_id") == 0);
  CHECK(f.get_bool("tokenizer.ggml.add_bos_token"));
  CHECK_FALSE(f.get_bool("tokenizer.ggml.add_space_prefix"));
  CHECK(f.get_string_array("tokenizer.ggml.tokens")[2] == "<bos>");

  CHECK(f.tensors().size() == 236);
  CHECK(test::tensor_types(f) == std::map<std::string, int>{{"F32", 109}, {"Q5_0", 81}, {"Q4_K", 27}, {"Q8_0", 10}, {"Q6_K", 9}});
  CHECK(f.tensor("token_embd.weight").dims == std::vector<int64_t>{640, 262144});  // tied output: no output.weight
  CHECK(f.tensor("blk.0.attn_q.weight").dims == std::vector<int64_t>{640, 1024});
  CHECK(f.tensor("blk.0.attn_k.weight").dims == std::vector<int64_t>{640, 256});
  CHECK(f.tensor("blk.0.attn_k_norm.weight").dims == std::vector<int64_t>{256});
  CHECK(f.tensor("blk.17.post_ffw_norm.weight").dims == std::vector<int64_t>{640});
}

TEST_CASE("Gemma 3 270M Q4_K_M GGUF: dequantized tensors equal gguf-py's", "[gguf][real]") {
  if (!test::present(test::gemma3_model())) return;
  const GgufFile f = GgufFile::open(oscar::test::gemma3_gguf());
  const std::map<std::string, std::string> expect = {  // one tensor of every type, whole, as gguf-py dequantizes it
      {"token_embd.weight", "bd4ba37a5aaccf133dce5c5f9283a7a923f5a330f4259f8d18d499ae2b88ca5c"},         // Q8_0
      {"blk.0.attn_q.weight", "dcfe4d9c73346fc4ab47895d7e33339fedbf3d89a3bd1b12c94a81120ba2faab"},       // Q5_0
      {"blk.0.attn_k.weight", "e9148680cf79c2265aa182d501323da97bf5f038a92e860172e2f071e5f1ae24"},       // Q5_0
      {"blk.5.attn_v.weight", "3e8f2c0136195c3528e042e122a68cf79312b604d9e35a39b3d72bc1a5a6c5c7"},       // Q5_0
      {"blk.17.ffn_gate.weight", "46e6fcf781b29ce08941e4ffeaf3b6e6594c2598c900168db35163ba8dc2da4b"},    // Q5_0
      {"blk.0.attn_output.weight", "84421b360695121d4fa8c5b47aa4b9729eb814b9608b4856a3af07a1736cf47f"},  // Q4_K
      {"blk.0.ffn_down.weight", "b718ca6bf05ad89435100bb9da1f6a6300a627c3396bc3bdb91809ca7dcdb4d8"},     // Q6_K
      {"blk.0.attn_q_norm.weight", "4714c814ec299114bdf61265e7aba3ee0bfcdf6f6f00f1ece85d1ac02d60dd1e"},  // F32
      {"output_norm.weight", "7c6f10fe176e85ae705758390d5cbe15b79d090656ebbb4f9789c073041139d8"},        // F32
  };
  test::check_sha256s(f, expect);
  CHECK(test::dequantize_all(f).non_finite == 0);  // every tensor dequantizes to finite values
}
