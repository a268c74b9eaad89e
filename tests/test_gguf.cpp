// test_gguf.cpp: the GGUF reader and dequantizers against tests/fixtures/dequant.gguf, whose expected
// values gguf-py computed (tests/fixtures/make_gguf_fixture.py, dequant_expected.bin); the metadata
// accessors; read_model_config; and every bad input (built here by a small independent GGUF writer or
// by damaging the fixture), each a one-line oscar::Error naming the file and the problem.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <map>

#include "oscar/01_core/error.h"
#include "oscar/01_core/file_io.h"
#include "gguf_checks.h"
#include "test_data.h"

using namespace oscar;
using Catch::Matchers::Contains;

namespace {

std::string fixture() { return std::string(OSCAR_DATA_DIR) + "/../tests/fixtures/dequant.gguf"; }
std::string expected_file() { return std::string(OSCAR_DATA_DIR) + "/../tests/fixtures/dequant_expected.bin"; }

struct Expected {
  std::string name;
  uint32_t type = 0;
  std::vector<int64_t> dims;
  std::vector<float> values;
};

// Reads dequant_expected.bin (layout in make_gguf_fixture.py's docstring).
std::vector<Expected> read_expected() {
  const std::vector<uint8_t> b = read_file_bytes(expected_file());
  size_t pos = 0;
  auto take = [&](void* dst, size_t n) {
    REQUIRE(pos + n <= b.size());
    std::memcpy(dst, b.data() + pos, n);
    pos += n;
  };
  char magic[8];
  take(magic, 8);
  REQUIRE(std::string(magic, 8) == "OSCDQEX1");
  uint32_t count = 0;
  take(&count, 4);
  std::vector<Expected> out(count);
  for (auto& e : out) {
    uint32_t len = 0, nd = 0;
    take(&len, 4);
    e.name.resize(len);
    take(e.name.data(), len);
    take(&e.type, 4);
    take(&nd, 4);
    e.dims.resize(nd);
    take(e.dims.data(), 8 * nd);
    uint64_t n = 0;
    take(&n, 8);
    e.values.resize(n);
    take(e.values.data(), 4 * n);
  }
  REQUIRE(pos == b.size());
  return out;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// A minimal GGUF writer for the bad inputs and the architecture tests, written from the format
// description (independent of the reader under test).
struct Builder {
  uint32_t version = 3;
  uint64_t alignment = 32;
  std::vector<uint8_t> kv;
  uint64_t n_kv = 0;
  struct T {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> dims;
    std::vector<uint8_t> data;
    uint64_t offset_override = UINT64_MAX;
  };
  std::vector<T> tensors;

  template <class V>
  static void put(std::vector<uint8_t>& o, V v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    o.insert(o.end(), p, p + sizeof v);
  }
  static void put_str(std::vector<uint8_t>& o, const std::string& s) {
    put<uint64_t>(o, s.size());
    o.insert(o.end(), s.begin(), s.end());
  }
  void key(const std::string& k, uint32_t type) {
    put_str(kv, k);
    put<uint32_t>(kv, type);
    ++n_kv;
  }
  Builder& u32(const std::string& k, uint32_t v) { key(k, 4); put(kv, v); return *this; }
  Builder& f32(const std::string& k, float v) { key(k, 6); put(kv, v); return *this; }
  Builder& str(const std::string& k, const std::string& v) { key(k, 8); put_str(kv, v); return *this; }
  Builder& strs(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9);
    put<uint32_t>(kv, 8);
    put<uint64_t>(kv, v.size());
    for (const auto& s : v) put_str(kv, s);
    return *this;
  }
  Builder& u32s(const std::string& k, const std::vector<uint32_t>& v) {
    key(k, 9);
    put<uint32_t>(kv, 4);
    put<uint64_t>(kv, v.size());
    for (uint32_t x : v) put(kv, x);
    return *this;
  }
  Builder& tensor(const std::string& name, uint32_t type, std::vector<uint64_t> dims, size_t n_bytes) {
    std::vector<uint8_t> d(n_bytes);
    for (size_t i = 0; i < n_bytes; ++i) d[i] = static_cast<uint8_t>(i * 7 + 1);
    tensors.push_back({name, type, std::move(dims), std::move(d)});
    return *this;
  }
  Builder& f32_tensor(const std::string& name, std::vector<uint64_t> dims) {
    uint64_t n = 1;
    for (auto d : dims) n *= d;
    std::vector<uint8_t> d(n * 4);
    for (uint64_t i = 0; i < n; ++i) {
      const float v = 0.01f * static_cast<float>(i % 97);
      std::memcpy(&d[4 * i], &v, 4);
    }
    tensors.push_back({name, 0, std::move(dims), std::move(d)});
    return *this;
  }
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> o = {'G', 'G', 'U', 'F'};
    put<uint32_t>(o, version);
    put<uint64_t>(o, tensors.size());
    put<uint64_t>(o, n_kv);
    o.insert(o.end(), kv.begin(), kv.end());
    std::vector<uint64_t> offs;
    uint64_t off = 0;
    for (const auto& t : tensors) {
      offs.push_back(off);
      off = (off + t.data.size() + alignment - 1) / alignment * alignment;
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& t = tensors[i];
      put_str(o, t.name);
      put<uint32_t>(o, static_cast<uint32_t>(t.dims.size()));
      for (auto d : t.dims) put<uint64_t>(o, d);
      put<uint32_t>(o, t.type);
      put<uint64_t>(o, t.offset_override != UINT64_MAX ? t.offset_override : offs[i]);
    }
    while (o.size() % alignment) o.push_back(0);
    const size_t data_start = o.size();
    for (size_t i = 0; i < tensors.size(); ++i) {
      o.resize(data_start + offs[i], 0);
      o.insert(o.end(), tensors[i].data.begin(), tensors[i].data.end());
    }
    return o;
  }
};

// A toy model of `arch` with the metadata read_model_config needs and F32 tensors; dim 16, 2 layers.
Builder toy(const std::string& arch) {
  Builder b;
  b.str("general.architecture", arch)
      .u32(arch + ".block_count", 2)
      .u32(arch + ".context_length", 4096)
      .u32(arch + ".embedding_length", 16)
      .u32(arch + ".feed_forward_length", 48)
      .u32(arch + ".attention.head_count", 4)
      .u32(arch + ".attention.head_count_kv", 2)
      .f32(arch + ".rope.freq_base", 1000000.0f)
      .f32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f)
      .str("tokenizer.ggml.model", "gpt2")
      .strs("tokenizer.ggml.tokens", {"a", "b", "c", "ab", "abc"})
      .strs("tokenizer.ggml.merges", {"a b", "ab c"});
  b.f32_tensor("token_embd.weight", {16, 5});
  return b;
}

std::vector<uint8_t> fixture_bytes() { return read_file_bytes(fixture()); }

}  // namespace

TEST_CASE("gguf: every type dequantizes bit-exactly as gguf-py does", "[gguf][dequant]") {
  const GgufFile f = GgufFile::open(fixture());
  const auto expected = read_expected();
  REQUIRE(expected.size() == 12);
  std::map<std::string, int> seen_types;
  for (const auto& e : expected) {
    INFO("tensor " << e.name);
    const GgufTensor& t = f.tensor(e.name);
    REQUIRE(t.type == e.type);
    REQUIRE(t.dims == e.dims);
    REQUIRE(t.n_elements() == static_cast<int64_t>(e.values.size()));
    ++seen_types[t.type_name()];
    // All rows at once: every value's bits equal gguf-py's (NaN included). Exact equality holds because
    // each value is computed by the same operations in the same order as ggml's reference and lib/ is
    // compiled with -ffp-contract=off (no fused multiply-add).
    std::vector<float> got(e.values.size(), -12345.f);
    dequantize_rows(t, 0, t.n_rows(), got.data());
    size_t mismatches = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (bits(got[i]) != bits(e.values[i]) && mismatches++ == 0) first = i;
    INFO("first mismatch at " << first << ": got " << got[first] << ", gguf-py " << e.values[first]);
    CHECK(mismatches == 0);
    // A sub-range of rows, and bfloat16 output (the float32 result rounded to nearest even).
    const int64_t len = t.row_length();
    std::vector<float> one(len);
    dequantize_rows(t, t.n_rows() - 1, 1, one.data());
    CHECK(std::memcmp(one.data(), &e.values[(t.n_rows() - 1) * len], 4 * len) == 0);
    std::vector<uint16_t> b16(e.values.size());
    dequantize_rows_bf16(t, 0, t.n_rows(), b16.data());
    size_t bf_mismatch = 0;
    for (size_t i = 0; i < b16.size(); ++i) bf_mismatch += b16[i] != fp32_to_bf16(e.values[i]);
    CHECK(bf_mismatch == 0);
  }
  for (const char* ty : {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"})
    CHECK(seen_types[ty] >= 1);
  // The fixture's special values survive: F16 +-0, +-inf, NaN, 65504, the smallest subnormal.
  std::vector<float> h(f.tensor("dq.F16").n_elements());
  dequantize_rows(f.tensor("dq.F16"), 0, f.tensor("dq.F16").n_rows(), h.data());
  CHECK(bits(h[1]) == 0x80000000u);
  CHECK(std::isinf(h[2]));
  CHECK(std::isnan(h[4]));
  CHECK(h[5] == 65504.f);
  CHECK(h[7] == std::ldexp(1.f, -24));
}

TEST_CASE("gguf: fp16/bf16 conversions", "[gguf][dequant]") {
  // Every half bit pattern against the hardware-independent definition: (-1)^s * 2^(e-15) * (1 + m/1024).
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    const float got = fp16_to_fp32(static_cast<uint16_t>(h));
    if (e == 31) {
      if (m == 0) REQUIRE((std::isinf(got) && std::signbit(got) == (s == 1)));
      else REQUIRE(std::isnan(got));
      continue;
    }
    const double mag = e == 0 ? std::ldexp(static_cast<double>(m), -24) : std::ldexp(1.0 + m / 1024.0, static_cast<int>(e) - 15);
    REQUIRE(static_cast<double>(got) == (s ? -mag : mag));
    REQUIRE(std::signbit(got) == (s == 1));
  }
  CHECK(fp32_to_bf16(1.0f) == 0x3F80);
  CHECK(fp32_to_bf16(std::bit_cast<float>(0x3F808000u)) == 0x3F80);  // tie to even (down)
  CHECK(fp32_to_bf16(std::bit_cast<float>(0x3F818000u)) == 0x3F82);  // tie to even (up)
  CHECK(fp32_to_bf16(std::bit_cast<float>(0x3F808001u)) == 0x3F81);
  CHECK(std::isnan(bf16_to_fp32(fp32_to_bf16(std::nanf("")))));
  CHECK(ggml_row_bytes(12, 512) == 288);
  CHECK(ggml_row_bytes(8, 576) == 612);
  CHECK_THROWS_WITH(ggml_row_bytes(12, 100), Contains("multiple of 256"));
  CHECK_THROWS_WITH(dequantize(GgmlType::Q2_K, nullptr, nullptr, 256),
                    Contains("Q2_K (10) cannot be dequantized") && Contains("supported types: F32"));
}

TEST_CASE("gguf: header, alignment and metadata accessors", "[gguf][metadata]") {
  const GgufFile f = GgufFile::open(fixture());
  CHECK(f.version() == 3);
  CHECK(f.alignment() == 64);
  CHECK(f.data_offset() % 64 == 0);
  CHECK(f.tensors().size() == 12);
  CHECK(f.keys().size() == 42);
  CHECK(f.keys().front() == "general.architecture");
  CHECK(f.get_string("general.architecture") == "llama");
  CHECK(f.get_u32("test.u8") == 250);
  CHECK(f.get_i32("test.i8") == -120);
  CHECK(f.get_u32("test.u16") == 65000);
  CHECK(f.get_i32("test.i16") == -32000);
  CHECK(f.get_u32("test.u32") == 4000000000u);
  CHECK(f.get_i32("test.i32") == -2000000000);
  CHECK(f.get_f32("test.f32") == 3.25f);
  CHECK(f.get_bool("test.bool"));
  CHECK(f.get_string("test.string") == "h\xc3\xa9llo \xe2\x9c\x93");
  CHECK(f.get_u64("test.u64") == (uint64_t{1} << 63) + 5);
  CHECK(f.get_i64("test.i64") == -(int64_t{1} << 62) - 7);
  CHECK(f.get_f64("test.f64") == -1.5e300);
  CHECK(f.value_type("test.u16") == GgufValueType::U16);
  CHECK(f.value_type("test.arr.f64") == GgufValueType::ARRAY);
  CHECK(f.array_type("test.arr.f64") == GgufValueType::F64);
  CHECK(f.get_i64_array("test.arr.u8") == std::vector<int64_t>{1, 2, 255});
  CHECK(f.get_i32_array("test.arr.i8") == std::vector<int32_t>{-128, 0, 127});
  CHECK(f.get_i32_array("test.arr.u16") == std::vector<int32_t>{0, 65535});
  CHECK(f.get_i32_array("test.arr.i16") == std::vector<int32_t>{-32768, 32767});
  CHECK(f.get_i64_array("test.arr.u32") == std::vector<int64_t>{7, 4294967295LL});
  CHECK(f.get_i32_array("test.arr.i32") == std::vector<int32_t>{-5, 6, 2147483647});
  CHECK(f.get_f32_array("test.arr.f32") == std::vector<float>{0.5f, -2.25f, 1e-3f});
  CHECK(f.get_bool_array("test.arr.bool") == std::vector<uint8_t>{1, 0, 1});
  CHECK(f.get_string_array("test.arr.string") == std::vector<std::string>{"", "x", "\xc3\xbc" "ber"});
  CHECK(f.get_i64_array("test.arr.i64") == std::vector<int64_t>{INT64_MIN, INT64_MAX});
  CHECK(f.get_f32_array("test.arr.f64") == std::vector<float>{0.1f, -0.0f});
  CHECK(f.array_size("test.arr.nested") == 2);
  CHECK(f.array_type("test.arr.nested") == GgufValueType::ARRAY);
  CHECK(f.value_string("test.arr.i32") == "array of 3 int32 [-5, 6, 2147483647]");
  CHECK(f.get_string_array("tokenizer.ggml.tokens") == std::vector<std::string>{"a", "b", "ab", "<s>"});

  // Errors name the key and the file.
  CHECK_THROWS_WITH(f.get_u32("llama.nope"), Contains(fixture()) && Contains("metadata key 'llama.nope' is missing"));
  CHECK_THROWS_WITH(f.get_string("test.u32"), Contains("'test.u32' holds a value of type uint32, expected a string"));
  CHECK_THROWS_WITH(f.get_u32("test.u64"), Contains("'test.u64' = 9223372036854775813 does not fit a uint32"));
  CHECK_THROWS_WITH(f.get_u32("test.i8"), Contains("does not fit a uint32"));
  CHECK_THROWS_WITH(f.get_i64_array("test.arr.u64"), Contains("element 0 = 18446744073709551615 does not fit an int64"));
  CHECK_THROWS_WITH(f.get_f32_array("test.arr.string"), Contains("holds a value of type array of string, expected an array of floats"));
  CHECK_THROWS_WITH(f.get_bool("test.arr.bool"), Contains("expected a bool"));
  CHECK_THROWS_WITH(f.get_string_array("test.arr.nested"), Contains("array of array"));
  CHECK_THROWS_WITH(f.tensor("output.weight"), Contains(fixture()) && Contains("tensor 'output.weight' is missing"));
  CHECK_THROWS_WITH(dequantize_rows(f.tensor("dq.Q4_K"), 2, 2, nullptr), Contains(fixture()) && Contains("rows 2..4 requested, it has 3 rows"));
}

TEST_CASE("gguf: read_model_config", "[gguf][config]") {
  SECTION("the fixture's llama metadata") {
    const GgufFile f = GgufFile::open(fixture());
    test::check_config(read_model_config(f), {.architecture = "llama", .name = "oscar-kv dequantization fixture",
                                              .n_layers = 2, .dim = 256, .ffn_dim = 512, .n_heads = 4, .n_kv_heads = 2,
                                              .head_dim = 64, .rope_dims = 64, .rope_base = 500000.0,
                                              .rope_convention = "adjacent-pairs", .rms_eps = 1e-5, .context_length = 512,
                                              .vocab_size = 4, .tied_output = true, .tokenizer_model = "gpt2"});
  }
  SECTION("qwen3: key_length, qk-norm, untied output, half-split RoPE") {
    Builder b = toy("qwen3");
    b.u32("qwen3.attention.key_length", 8).str("qwen3.rope.scaling.type", "yarn").f32("qwen3.rope.scaling.factor", 4.0f);
    b.f32_tensor("rope_freqs.weight", {4});
    b.f32_tensor("blk.0.attn_q_norm.weight", {8}).f32_tensor("output.weight", {16, 5});
    const GgufFile f = GgufFile::open(test::scratch_file("qwen3.gguf", b.bytes()));
    CHECK(f.alignment() == 32);
    const GgufModelConfig c = read_model_config(f);
    CHECK(c.architecture == "qwen3");
    CHECK(c.head_dim == 8);  // key_length, not 16 / 4
    CHECK(c.rope_dims == 8);
    CHECK(c.rope_base == 1000000.0);
    CHECK(c.rope_convention == "half-split");
    CHECK(c.rms_eps == Approx(1e-6));
    CHECK(c.qk_norm);
    CHECK_FALSE(c.tied_output);
    CHECK(c.vocab_size == 5);
    CHECK(c.context_length == 4096);
    CHECK(c.rope_scaling == "yarn");
    CHECK(c.rope_scaling_factor == 4.0);
    CHECK(c.rope_freq_factors);
  }
  SECTION("qwen2: q/k/v biases, head_dim from the width") {
    Builder b = toy("qwen2");
    b.f32_tensor("blk.0.attn_q.bias", {16});
    const GgufModelConfig c = read_model_config(GgufFile::open(test::scratch_file("qwen2.gguf", b.bytes())));
    CHECK(c.head_dim == 4);
    CHECK(c.qkv_bias);
    CHECK_FALSE(c.qk_norm);
    CHECK(c.rope_convention == "half-split");
  }
  SECTION("unsupported architecture") {
    const auto p = test::scratch_file("mamba.gguf", toy("mamba").bytes());
    CHECK_THROWS_WITH(read_model_config(GgufFile::open(p)),
                      Contains(p) && Contains("architecture 'mamba' is not supported (supported: llama, qwen2, qwen3, gemma3)"));
  }
  SECTION("missing tokenizer metadata") {
    Builder b;
    b.str("general.architecture", "llama")
        .u32("llama.block_count", 1).u32("llama.context_length", 64).u32("llama.embedding_length", 16)
        .u32("llama.feed_forward_length", 32).u32("llama.attention.head_count", 2)
        .f32("llama.attention.layer_norm_rms_epsilon", 1e-5f).str("tokenizer.ggml.model", "llama");
    b.f32_tensor("token_embd.weight", {16, 3});
    const auto p = test::scratch_file("notok.gguf", b.bytes());
    CHECK_THROWS_WITH(read_model_config(GgufFile::open(p)),
                      Contains(p) && Contains("tokenizer metadata 'tokenizer.ggml.tokens' is missing"));
    Builder g = toy("llama");
    g.kv.clear();
    g.n_kv = 0;
    g.str("general.architecture", "llama").u32("llama.block_count", 1).u32("llama.context_length", 64)
        .u32("llama.embedding_length", 16).u32("llama.feed_forward_length", 32).u32("llama.attention.head_count", 2)
        .f32("llama.attention.layer_norm_rms_epsilon", 1e-5f).str("tokenizer.ggml.model", "gpt2")
        .strs("tokenizer.ggml.tokens", {"a", "b", "c", "d", "e"});
    const auto q = test::scratch_file("nomerges.gguf", g.bytes());
    CHECK_THROWS_WITH(read_model_config(GgufFile::open(q)), Contains("'tokenizer.ggml.merges' is missing"));
  }
  SECTION("vocabulary disagrees with token_embd.weight") {
    Builder b = toy("llama");
    b.strs("tokenizer.ggml.tokens", {"a"});  // a second key of that name
    CHECK_THROWS_WITH(GgufFile::open(test::scratch_file("dupkey.gguf", b.bytes())), Contains("appears twice"));
    Builder c = toy("llama");
    c.tensors[0].dims = {16, 6};
    c.tensors[0].data.resize(16 * 6 * 4);
    CHECK_THROWS_WITH(read_model_config(GgufFile::open(test::scratch_file("vocab.gguf", c.bytes()))),
                      Contains("lists 5 tokens but token_embd.weight has 6 rows"));
  }
  SECTION("a tensor of a type oscar-kv cannot dequantize (Q2_K)") {
    Builder b = toy("llama");
    b.tensor("blk.0.attn_q.weight", 10, {256, 2}, 2 * 84);
    const auto p = test::scratch_file("q2k.gguf", b.bytes());
    const GgufFile f = GgufFile::open(p);  // sizes are known, so the file opens
    CHECK(std::string(f.tensor("blk.0.attn_q.weight").type_name()) == "Q2_K");
    CHECK_THROWS_WITH(read_model_config(f), Contains(p) && Contains("'blk.0.attn_q.weight' is stored as Q2_K (ggml type 10)") &&
                                                Contains("supported types: F32, F16, BF16, Q8_0"));
    std::vector<float> out(512);
    CHECK_THROWS_WITH(dequantize_rows(f.tensor("blk.0.attn_q.weight"), 0, 1, out.data()),
                      Contains(p) && Contains("'blk.0.attn_q.weight' is stored as Q2_K"));
  }
}

TEST_CASE("gguf: bad inputs are one clear error each", "[gguf][bad]") {
  const std::vector<uint8_t> good = fixture_bytes();
  auto damaged = [&](const std::string& name, auto&& edit) {
    std::vector<uint8_t> b = good;
    edit(b);
    return test::scratch_file(name, b);
  };
  SECTION("missing file") {
    CHECK_THROWS_WITH(GgufFile::open("/nonexistent/m.gguf"), Contains("/nonexistent/m.gguf: cannot open"));
  }
  SECTION("wrong magic") {
    const auto p = damaged("magic.gguf", [](auto& b) { std::memcpy(b.data(), "GGML", 4); });
    CHECK_THROWS_WITH(GgufFile::open(p), Contains(p) && Contains("not a GGUF file (magic 'GGML', expected 'GGUF')"));
    const auto s = test::scratch_file("stories.bin", read_file_bytes(test::stories_model()));
    CHECK_THROWS_WITH(GgufFile::open(s), Contains("not a GGUF file (magic '@"));
  }
  SECTION("version 1 and 4; a big-endian file") {
    for (uint32_t v : {1u, 4u}) {
      const auto p = damaged("version.gguf", [&](auto& b) { std::memcpy(b.data() + 4, &v, 4); });
      CHECK_THROWS_WITH(GgufFile::open(p), Contains(p) && Contains(fmt::format("GGUF version {} is not supported (supported: 2 and 3", v)));
    }
    const auto p = damaged("bigendian.gguf", [](auto& b) { b[4] = 0; b[7] = 3; });
    CHECK_THROWS_WITH(GgufFile::open(p), Contains("this file is big-endian"));
    const auto v2 = damaged("v2.gguf", [](auto& b) { b[4] = 2; });
    CHECK(GgufFile::open(v2).version() == 2);
  }
  SECTION("truncated header") {
    const auto p = damaged("short.gguf", [](auto& b) { b.resize(10); });
    CHECK_THROWS_WITH(GgufFile::open(p), Contains(p) && Contains("truncated: 10 bytes, shorter than a GGUF header"));
    const auto q = damaged("cut-meta.gguf", [](auto& b) { b.resize(1000); });
    CHECK_THROWS_WITH(GgufFile::open(q), Contains(q) && Contains("truncated") && Contains("metadata key") &&
                                             Contains("the file has only 1000 bytes"));
    const auto r = damaged("cut-infos.gguf", [&](auto& b) { b.resize(GgufFile::open(fixture()).data_offset() - 80); });
    CHECK_THROWS_WITH(GgufFile::open(r), Contains("truncated") && Contains("tensor"));
  }
  SECTION("truncated tensor data") {
    const auto p = damaged("cut-data.gguf", [](auto& b) { b.resize(b.size() - 100); });
    CHECK_THROWS_WITH(GgufFile::open(p), Contains(p) && Contains("tensor 'token_embd.weight' (Q8_0 256x4, 1088 bytes") &&
                                             Contains("past the end of the file (17244 bytes)"));
  }
  SECTION("tensor data past the end of the file") {
    Builder b = toy("llama");
    b.tensors[0].offset_override = 1 << 20;
    const auto p = test::scratch_file("past-end.gguf", b.bytes());
    CHECK_THROWS_WITH(GgufFile::open(p), Contains(p) && Contains("tensor 'token_embd.weight' (F32 16x5, 320 bytes at data offset 1048576)") &&
                                             Contains("past the end of the file"));
  }
  SECTION("unknown tensor type") {
    Builder b = toy("llama");
    b.tensors[0].type = 99;
    const auto p = test::scratch_file("type99.gguf", b.bytes());
    CHECK_THROWS_WITH(GgufFile::open(p), Contains(p) && Contains("'token_embd.weight' has ggml type id 99") &&
                                             Contains("supported types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K"));
  }
  SECTION("implausible counts, dimensions, alignment, value types") {
    const auto p = damaged("count.gguf", [](auto& b) { b[15] = 0x10; });  // tensor count ~2^60
    CHECK_THROWS_WITH(GgufFile::open(p), Contains("more than a 17344-byte file can hold"));
    Builder a = toy("llama");
    a.u32("general.alignment", 48);
    CHECK_THROWS_WITH(GgufFile::open(test::scratch_file("align.gguf", a.bytes())), Contains("general.alignment = 48 is not a power of two"));
    Builder d = toy("llama");
    d.tensors[0].dims = {16, 5, 1, 1, 1};
    CHECK_THROWS_WITH(GgufFile::open(test::scratch_file("dims.gguf", d.bytes())), Contains("has 5 dimensions (1 to 4 supported)"));
    Builder r = toy("llama");
    r.tensor("odd", 12, {100, 2}, 288);
    CHECK_THROWS_WITH(GgufFile::open(test::scratch_file("rowlen.gguf", r.bytes())),
                      Contains("'odd' (Q4_K) has rows of 100 values, not a multiple of Q4_K's block size 256"));
    Builder v = toy("llama");
    v.key("weird", 13);
    CHECK_THROWS_WITH(GgufFile::open(test::scratch_file("vtype.gguf", v.bytes())), Contains("metadata key 'weird' has value type 13"));
  }
}

TEST_CASE("gguf: every truncation and random header damage is an oscar::Error or a valid file", "[gguf][bad]") {
  const std::vector<uint8_t> good = fixture_bytes();
  const uint64_t data_start = GgufFile::open(fixture()).data_offset();
  // Opens `bytes`; when it opens, reads everything a runner would. Anything but success or
  // oscar::Error (a crash, std::bad_alloc, std::length_error) fails the test.
  auto exercise = [](const std::string& p) -> int {
    try {
      const GgufFile f = GgufFile::open(p);
      for (const auto& k : f.keys()) (void)f.value_string(k);
      std::vector<float> buf;
      for (const auto& t : f.tensors()) {
        if (!ggml_type_dequantizable(t.type)) continue;
        buf.resize(static_cast<size_t>(t.n_elements()));
        dequantize_rows(t, 0, t.n_rows(), buf.data());
      }
      (void)read_model_config(f);
      return 0;
    } catch (const Error&) {
      return 1;
    }
  };
  const auto p = (test::scratch() / "damaged.gguf").string();
  int errors = 0, cases = 0;
  for (uint64_t n = 0; n < good.size(); n += (n < data_start + 64 ? 1 : 61)) {
    test::scratch_file("damaged.gguf", std::vector<uint8_t>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)));
    errors += exercise(p);
    ++cases;
  }
  CHECK(errors == cases);  // every proper prefix is refused
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int opened = 0;
  for (int i = 0; i < 1000; ++i) {
    std::vector<uint8_t> b = good;
    const int flips = 1 + static_cast<int>(next() % 3);
    for (int k = 0; k < flips; ++k) b[next() % data_start] = static_cast<uint8_t>(next());
    test::scratch_file("damaged.gguf", b);
    opened += exercise(p) == 0;
  }
  INFO(opened << " of 1000 damaged files were still valid");
  CHECK(opened < 1000);
}
