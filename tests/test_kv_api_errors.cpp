// test_kv_api_errors.cpp: the KV-cache C API (oscar_kv.h) rejects bad input with a status and a message
// before touching the GPU, so these checks run on CPU-only machines too: both formats, the paged oscar-cov cache, prefill, append,
// decode, and the BF16 baseline. Pointers are host addresses that are never dereferenced (every call
// here fails validation before a launch).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>

#include "oscar_kv.h"

namespace {

struct Fake {  // aligned, never-dereferenced stand-ins for device buffers
  alignas(256) unsigned char bytes[4096];
  void* at(size_t off) { return bytes + off; }
};

bool says(const oscar_error& e, const char* what) { return std::strstr(e.message, what) != nullptr; }

// The two contiguous formats behind one interface: a valid cache over fake memory (make) and the format's entry points.
template <class C, auto Prefill, auto Append, auto Decode, auto Capacity, auto Supported>
struct Api {
  using Cache = C;
  static constexpr auto prefill = Prefill;
  static constexpr auto append = Append;
  static constexpr auto decode = Decode;
  static constexpr auto capacity = Capacity;
  static constexpr auto supported = Supported;
};

struct CovApi : Api<oscar_cov_cache, oscar_cov_prefill, oscar_cov_append, oscar_cov_decode, oscar_cov_capacity, oscar_cov_shape_supported> {
  static constexpr const char* name = "oscar_cov";
  static constexpr int64_t kCapacity = 64 + 1000 + 256;
  static Cache make(Fake& f) {
    Cache c{};
    c.batch = 2; c.num_kv_heads = 2; c.head_dim = 128; c.bits = 2; c.sink = 64; c.recent = 256; c.body_capacity = 1000;
    c.clip_k = 0.96f; c.clip_v = 0.92f; c.clip_mode = OSCAR_CLIP_QUANTILE; c.rounding = OSCAR_ROUND_HALF_AWAY;
    void** p[8] = {&c.k_sink, &c.v_sink, &c.k_recent, &c.v_recent, &c.k_codes, &c.v_codes, &c.k_params, &c.v_params};
    for (int i = 0; i < 8; ++i) *p[i] = f.at(256 * i);
    return c;
  }
};

struct OmniApi
    : Api<oscar_omni_cache, oscar_omni_prefill, oscar_omni_append, oscar_omni_decode, oscar_omni_capacity, oscar_omni_shape_supported> {
  static constexpr const char* name = "oscar_omni";
  static constexpr int64_t kCapacity = 1024 + 127;
  static Cache make(Fake& f) {
    Cache c{};
    c.batch = 2; c.num_kv_heads = 2; c.head_dim = 128; c.bits = 2; c.body_capacity = 1024;
    void** p[7] = {&c.k_res, &c.v_res, &c.k_codes, &c.v_codes, &c.k_params, &c.v_params, &c.k_norms};
    for (int i = 0; i < 7; ++i) *p[i] = f.at(256 * i);
    return c;
  }
};

// Buffers of one call: k, v, lens, out, workspace (host addresses, aligned) and the workspace size of 8 query heads.
struct Io {
  Fake io;
  void* k = io.at(0);
  void* v = io.at(512);
  int32_t* lens = static_cast<int32_t*>(io.at(1024));
  float* out = static_cast<float*>(io.at(2048));
  void* ws = io.at(3072);
  const void* misaligned(size_t by) { return static_cast<char*>(io.at(0)) + by; }
};

// A cache with one fault (mutate) is refused by each of the format's three entry points with `status` and a message that
// names the entry point and holds `needle`.
template <class A, class Mutate>
void refused(const typename A::Cache& good, Mutate mutate, oscar_status status, const char* needle) {
  Io x;
  oscar_error err{};
  typename A::Cache bad = good;
  mutate(bad);
  const std::string name = A::name;
  CHECK(A::prefill(&bad, nullptr, x.k, x.v, x.lens, 10, nullptr, &err) == status);
  CHECK(says(err, (name + "_prefill: ").c_str()));
  CHECK(says(err, needle));
  CHECK(A::append(&bad, nullptr, x.k, x.v, x.lens, 10, nullptr, &err) == status);
  CHECK(says(err, (name + "_append: ").c_str()));
  CHECK(says(err, needle));
  CHECK(A::decode(&bad, nullptr, x.k, 8, x.lens, 100, 1.f, x.out, x.ws, 1 << 20, nullptr, &err) == status);
  CHECK(says(err, (name + "_decode: ").c_str()));
  CHECK(says(err, needle));
}

// What both formats check alike: the cache's shape, the arrival counters, k/v/lens, the lengths against the capacity, the
// decode's query heads, pointers and workspace, and every option; each message names the entry point.
template <class A>
void common_checks() {
  Fake f;
  Io x;
  oscar_error err{};
  const typename A::Cache c = A::make(f);
  const std::string name = A::name, pre = name + "_prefill: ", app = name + "_append: ", dec = name + "_decode: ";
  CHECK(A::capacity(&c) == A::kCapacity);
  const int32_t cap = int32_t(A::kCapacity);
  CHECK(A::prefill(nullptr, nullptr, x.k, x.v, x.lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, (pre + "cache is NULL").c_str()));
  using Cache = typename A::Cache;
  refused<A>(c, [](Cache& b) { b.bits = 3; }, OSCAR_ERR_UNSUPPORTED, "head_dim=128 bits=3 unsupported");
  refused<A>(c, [](Cache& b) { b.head_dim = 96; }, OSCAR_ERR_UNSUPPORTED, "compiled: head_dim 64, 128 or 256");
  refused<A>(c, [](Cache& b) { b.batch = 0; }, OSCAR_ERR_INVALID_ARGUMENT, "batch=0 num_kv_heads=2 must be positive");
  refused<A>(c, [](Cache& b) { b.num_kv_heads = -1; }, OSCAR_ERR_INVALID_ARGUMENT, "num_kv_heads=-1");
  refused<A>(c, [&](Cache& b) { b.arrivals = reinterpret_cast<uint32_t*>(static_cast<char*>(f.at(2048)) + 2); }, OSCAR_ERR_MISALIGNED,
             "cache->arrivals");
  refused<A>(c, [](Cache& b) { b.k_codes = nullptr; }, OSCAR_ERR_INVALID_ARGUMENT, "cache->k_codes is NULL");
  refused<A>(c, [](Cache& b) { b.v_codes = static_cast<char*>(b.v_codes) + 4; }, OSCAR_ERR_MISALIGNED, "cache->v_codes");
  CHECK(A::supported(64, 2) == 1);
  CHECK(A::supported(256, 4) == 1);
  CHECK(A::supported(96, 2) == 0);
  CHECK(A::supported(128, 3) == 0);
  CHECK(A::prefill(&c, nullptr, nullptr, x.v, x.lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, (pre + "k, v or seq_lens is NULL").c_str()));
  CHECK(A::prefill(&c, nullptr, x.misaligned(2), x.v, x.lens, 10, nullptr, &err) == OSCAR_ERR_MISALIGNED);
  CHECK(A::append(&c, nullptr, x.k, x.v, static_cast<const int32_t*>(x.misaligned(1026)), 10, nullptr, &err) == OSCAR_ERR_MISALIGNED);
  CHECK(says(err, (app + "k_new, v_new must be 16-byte aligned").c_str()));
  CHECK(A::prefill(&c, nullptr, x.k, x.v, x.lens, -1, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "max_len=-1 is negative"));
  CHECK(A::prefill(&c, nullptr, x.k, x.v, x.lens, cap + 1, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "exceeds the cache capacity"));
  CHECK(A::append(&c, nullptr, x.k, x.v, x.lens, cap, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, (app + "max_seq_len=" + std::to_string(cap) + ": appending would exceed the capacity").c_str()));
  const size_t wsb = oscar_decode_workspace_bytes(2, 8, 2, 128, cap, 1);
  CHECK(wsb > 0);
  CHECK(A::decode(&c, nullptr, x.k, 8, x.lens, cap + 1, 1.f, x.out, x.ws, wsb, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, (dec + "max_seq_len=" + std::to_string(cap + 1) + " exceeds the cache capacity").c_str()));
  CHECK(A::decode(&c, nullptr, x.k, 34, x.lens, 100, 1.f, x.out, x.ws, wsb, nullptr, &err) == OSCAR_ERR_UNSUPPORTED);  // 17 per KV head
  CHECK(says(err, "at most 16"));
  CHECK(A::decode(&c, nullptr, x.k, 7, x.lens, 100, 1.f, x.out, x.ws, wsb, nullptr, &err) == OSCAR_ERR_UNSUPPORTED);  // not a multiple
  CHECK(A::decode(&c, nullptr, x.k, 8, x.lens, 100, 1.f, x.out + 1, x.ws, wsb, nullptr, &err) == OSCAR_ERR_MISALIGNED);
  CHECK(A::decode(&c, nullptr, x.misaligned(8), 8, x.lens, 100, 1.f, x.out, x.ws, wsb, nullptr, &err) == OSCAR_ERR_MISALIGNED);
  CHECK(A::decode(&c, nullptr, x.k, 8, nullptr, 100, 1.f, x.out, x.ws, wsb, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(A::decode(&c, nullptr, x.k, 8, x.lens, cap, 1.f, x.out, x.ws, 16, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "workspace_bytes"));
  // Write options: a bad rotation kind, missing or misaligned matrices, a bad per_head are refused with their names.
  const auto* m0 = static_cast<const float*>(x.io.at(0));
  const auto* m4 = static_cast<const float*>(x.misaligned(4));
  oscar_write_options wo{{7, 0, nullptr, nullptr}};
  CHECK(A::prefill(&c, &wo, x.k, x.v, x.lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, (pre + "options->rotation.kind=7").c_str()));
  wo.rotation = {OSCAR_ROTATION_MATRIX, 0, m0, nullptr};
  CHECK(A::append(&c, &wo, x.k, x.v, x.lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, (app + "options->rotation.key or options->rotation.value is NULL").c_str()));
  wo.rotation = {OSCAR_ROTATION_MATRIX, 2, m0, m0};
  CHECK(A::prefill(&c, &wo, x.k, x.v, x.lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "options->rotation.per_head=2"));
  // Decode options: the same rotation checks, and a NaN, infinite or negative soft-cap and misaligned sinks.
  oscar_decode_options o{{OSCAR_ROTATION_MATRIX, 0, m0, m4}, 0.f, nullptr};
  CHECK(A::decode(&c, &o, x.k, 8, x.lens, 100, 1.f, x.out, x.ws, wsb, nullptr, &err) == OSCAR_ERR_MISALIGNED);
  CHECK(says(err, (dec + "options->rotation.key/value must be 16-byte aligned").c_str()));
  o = {{9, 0, nullptr, nullptr}, 0.f, nullptr};
  CHECK(A::decode(&c, &o, x.k, 8, x.lens, 100, 1.f, x.out, x.ws, wsb, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "options->rotation.kind=9"));
  for (const float softcap : {std::nanf(""), float(INFINITY), -1.f}) {
    o = {{}, softcap, nullptr};
    CHECK(A::decode(&c, &o, x.k, 8, x.lens, 100, 1.f, x.out, x.ws, wsb, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
    CHECK(says(err, (dec + "options->softcap=").c_str()));
  }
  o = {{}, 50.f, reinterpret_cast<const float*>(x.misaligned(2))};
  CHECK(A::decode(&c, &o, x.k, 8, x.lens, 100, 1.f, x.out, x.ws, wsb, nullptr, &err) == OSCAR_ERR_MISALIGNED);
  CHECK(says(err, (dec + "options->sinks").c_str()));
  // A valid rotation passes the options: the call then fails on the next fault (the workspace), not on the options.
  o = {{OSCAR_ROTATION_HADAMARD, 0, nullptr, nullptr}, 30.f, m0};
  CHECK(A::decode(&c, &o, x.k, 8, x.lens, 100, 1.f, x.out, x.ws, 16, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, (dec + "workspace_bytes=16").c_str()));
}

}  // namespace

TEST_CASE("oscar-cov C API rejects bad input with a message", "[kv_api]") {
  common_checks<CovApi>();
  Fake f;
  Io x;
  oscar_error err{};
  const oscar_cov_cache c = CovApi::make(f);
  CHECK(oscar_max_query_group() == 16);
  using Cache = oscar_cov_cache;
  refused<CovApi>(c, [](Cache& b) { b.k_params = static_cast<char*>(b.k_params) + 4; }, OSCAR_ERR_MISALIGNED, "cache->k_params");
  refused<CovApi>(c, [](Cache& b) { b.clip_mode = 2; }, OSCAR_ERR_INVALID_ARGUMENT, "cache->clip_mode=2");
  refused<CovApi>(c, [](Cache& b) { b.rounding = -1; }, OSCAR_ERR_INVALID_ARGUMENT, "cache->rounding=-1");
  refused<CovApi>(c, [](Cache& b) { b.clip_v = 0.f; }, OSCAR_ERR_INVALID_ARGUMENT, "clip_v=0");
  refused<CovApi>(c, [](Cache& b) { b.clip_k = 1.5f; }, OSCAR_ERR_INVALID_ARGUMENT, "(0, 1]");
  refused<CovApi>(c, [](Cache& b) { b.v_recent = nullptr; }, OSCAR_ERR_INVALID_ARGUMENT, "cache->v_recent is NULL");
  refused<CovApi>(c, [](Cache& b) { b.k_sink = nullptr; }, OSCAR_ERR_INVALID_ARGUMENT, "cache->k_sink is NULL");
  refused<CovApi>(c, [](Cache& b) { b.recent = 0; }, OSCAR_ERR_INVALID_ARGUMENT, "sink=64 recent=0");
  oscar_cov_cache bad = c;  // no sink: its arrays may be NULL
  bad.sink = 0;
  bad.k_sink = bad.v_sink = nullptr;
  CHECK(oscar_cov_decode_plain(&bad, x.k, 8, x.lens, 100, 1.f, x.out, x.ws, 16, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "oscar_cov_decode: workspace_bytes=16"));
  bad = c;
  bad.body_capacity = int64_t(1) << 31;  // 2 sequences x 2 KV heads x 2^30 rows: past the prefill's 32-bit row index
  CHECK(oscar_cov_prefill_plain(&bad, x.k, x.v, x.lens, 1 << 30, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "oscar_cov_prefill: batch=2 num_kv_heads=2 max_len=1073741824: the prefill grid would exceed 4294967296 blocks"));
  const size_t wsb = oscar_decode_workspace_bytes(2, 8, 2, 128, 1320, 1);
  CHECK(oscar_bf16_decode(x.k, x.v, 2, 2, 1000, 96, x.k, 8, x.lens, 100, 1.f, x.out, x.ws, wsb, nullptr, &err) == OSCAR_ERR_UNSUPPORTED);
  CHECK(oscar_bf16_decode(x.k, x.v, 2, 2, 1000, 128, x.k, 8, x.lens, 1001, 1.f, x.out, x.ws, wsb, nullptr, &err) ==
        OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "capacity"));
}

TEST_CASE("oscar-omni C API rejects bad input with a message", "[kv_api]") {
  common_checks<OmniApi>();
  Fake f;
  Io x;
  oscar_error err{};
  const oscar_omni_cache c = OmniApi::make(f);
  using Cache = oscar_omni_cache;
  refused<OmniApi>(c, [](Cache& b) { b.body_capacity = 1000; }, OSCAR_ERR_INVALID_ARGUMENT,
                   "body_capacity=1000 must be a non-negative multiple of 128");
  refused<OmniApi>(c, [](Cache& b) { b.k_norms = nullptr; }, OSCAR_ERR_INVALID_ARGUMENT, "cache->k_norms is NULL");
  refused<OmniApi>(c, [](Cache& b) { b.v_params = static_cast<char*>(b.v_params) + 8; }, OSCAR_ERR_MISALIGNED, "cache->v_params");
  refused<OmniApi>(c, [](Cache& b) { b.k_res = nullptr; }, OSCAR_ERR_INVALID_ARGUMENT, "cache->k_res is NULL");
  oscar_omni_cache bad = c;
  bad.batch = 64;
  bad.body_capacity = int64_t(1) << 31;  // 64 sequences x 2^25 key blocks: past the prefill grid's 2^31 blocks
  CHECK(oscar_omni_prefill_plain(&bad, x.k, x.v, x.lens, 1 << 30, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "oscar_omni_prefill: batch=64 num_kv_heads=2 max_len=1073741824: the prefill grid would exceed 2147483648 blocks"));
  CHECK(oscar_omni_decode_plain(&c, x.k, 8, x.lens, 1152, 1.f, x.out, x.ws, 1 << 20, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "oscar_omni_decode: max_seq_len=1152 exceeds the cache capacity 1151"));
}

TEST_CASE("format units: allocation sizes and argument checks", "[kv_api]") {
  oscar_error e{};
  // Sizes: the layout's arrays, each rounded up to 16 bytes.
  CHECK(oscar_cov_cache_bytes(2, 8, 128, 2, 64, 256, 1000) == 2 * (16 * 64 * 256 + 16 * 256 * 256 + 16 * 680 * 32 + 16 * 680 * 4));
  CHECK(oscar_omni_cache_bytes(2, 8, 128, 2, 1000) ==
        2 * (16 * 128 * 256 + 16 * 896 * 32) + 16 * 28 * 128 * 4 + 16 * 896 * 16 + 2 * 896 * 2);
  CHECK(oscar_cov_cache_bytes(0, 8, 128, 2, 64, 256, 1000) == 0);
  CHECK(oscar_omni_cache_bytes(1, 8, 128, 3, 1000) == 0);
  // Argument errors come before any CUDA call, so they are the same with or without a GPU.
  CHECK(oscar_cov_cache_create(nullptr, 1, 1, 128, 2, 64, 256, 1000, &e) == OSCAR_ERR_INVALID_ARGUMENT);
  oscar_cov_cache c{};
  CHECK(oscar_cov_cache_create(&c, 1, 1, 128, 3, 64, 256, 1000, &e) == OSCAR_ERR_UNSUPPORTED);
  CHECK(says(e, "bits=3"));
  CHECK(oscar_cov_cache_create(&c, 1, 1, 100, 2, 64, 256, 1000, &e) == OSCAR_ERR_UNSUPPORTED);
  CHECK(says(e, "head_dim=100"));
  CHECK(oscar_cov_cache_create(&c, 1, 1, 128, 2, 64, 0, 1000, &e) == OSCAR_ERR_INVALID_ARGUMENT);
  oscar_omni_cache o{};
  CHECK(oscar_omni_cache_create(&o, 1, 1, 128, 2, 0, &e) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(e, "capacity=0"));
  if (oscar_device_count() == 0) {  // without a GPU a valid request says so
    CHECK(oscar_cov_cache_create(&c, 1, 1, 128, 2, 64, 256, 1000, &e) == OSCAR_ERR_NO_DEVICE);
    CHECK(oscar_omni_cache_create(&o, 1, 1, 128, 2, 1000, &e) == OSCAR_ERR_NO_DEVICE);
    CHECK(c.k_sink == nullptr);
  }
  CHECK(oscar_cov_cache_destroy(nullptr, &e) == OSCAR_ERR_INVALID_ARGUMENT);
  oscar_cov_cache empty{};
  CHECK(oscar_cov_cache_destroy(&empty, &e) == OSCAR_OK);
}

TEST_CASE("paged oscar-cov C API rejects bad input with a message", "[kv_api]") {
  Fake f;
  oscar_cov_paged c{};
  c.num_kv_heads = 2; c.head_dim = 128; c.bits = 2; c.sink = 64; c.recent = 256; c.page_tokens = 256; c.num_pages = 4;
  oscar_error e{};
  oscar_cov_paged_layout lay{};
  REQUIRE(oscar_cov_paged_layout_of(256, 2, 128, 2, 64, 256, &lay, &e) == OSCAR_OK);
  c.page_stride = lay.page_bytes; c.num_window_slots = 2;
  oscar_cov_paged_default_rule(&c);
  c.pages = f.at(0); c.k_sink = f.at(256); c.v_sink = f.at(512); c.k_recent = f.at(768); c.v_recent = f.at(1024);
  const int32_t* i32 = static_cast<const int32_t*>(f.at(1280));
  oscar_paged_batch b{2, i32, i32, i32, 4, i32, 0};
  const int64_t* slots = static_cast<const int64_t*>(f.at(1536));
  float* out = static_cast<float*>(f.at(2048));
  auto decode = [&](const oscar_cov_paged& cc, const oscar_paged_batch& bb, const oscar_decode_options* o = nullptr) {
    return oscar_cov_paged_decode(&cc, o, &bb, f.at(1792), 4, 1024, 0.1f, out, f.at(2304), 1 << 20, nullptr, &e);
  };
  auto write = [&](const oscar_cov_paged& cc, const oscar_paged_batch& bb, int64_t stride, const oscar_write_options* o = nullptr) {
    return oscar_cov_paged_write(&cc, o, &bb, f.at(1792), f.at(1792), stride, stride, 3, slots, nullptr, &e);
  };
  oscar_cov_paged x = c;
  x.page_tokens = 100;
  CHECK(decode(x, b) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(e, "page_tokens=100"));
  x = c;
  x.head_dim = 96;
  CHECK(decode(x, b) == OSCAR_ERR_UNSUPPORTED);
  CHECK(says(e, "head_dim=96"));
  x = c;
  x.page_stride -= 16;
  CHECK(decode(x, b) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(e, "page_stride"));
  x = c;
  x.sink = 32;
  CHECK(write(x, b, 256) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(e, "sink=32"));
  x = c;
  x.pages = nullptr;
  CHECK(write(x, b, 256) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(e, "cache->pages is NULL"));
  oscar_paged_batch y = b;
  y.split_tokens = 100;
  CHECK(decode(c, y) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(e, "split_tokens=100"));
  y = b;
  y.block_table = nullptr;
  CHECK(decode(c, y) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(e, "block_table"));
  y = b;
  y.query_start_loc = nullptr;
  CHECK(write(c, y, 256) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(e, "query_start_loc"));
  CHECK(write(c, b, 200) == OSCAR_ERR_INVALID_ARGUMENT);  // a token row holds Hkv * head_dim = 256 values
  CHECK(says(e, "k_token_stride=200"));
  CHECK(oscar_cov_paged_workspace_bytes(2, 4, 2, 128, 1024, 100) == 0);
  // The options, as the contiguous entry points check them, named after the paged entry points.
  const oscar_write_options wo{{OSCAR_ROTATION_MATRIX, 0, nullptr, nullptr}};
  CHECK(write(c, b, 256, &wo) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(e, "oscar_cov_paged_write: options->rotation.key or options->rotation.value is NULL"));
  const oscar_decode_options nan_cap{{}, std::nanf(""), nullptr};
  CHECK(decode(c, b, &nan_cap) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(e, "oscar_cov_paged_decode: options->softcap=nan"));
  const oscar_decode_options odd_sinks{{}, 0.f, reinterpret_cast<const float*>(static_cast<char*>(f.at(0)) + 2)};
  CHECK(decode(c, b, &odd_sinks) == OSCAR_ERR_MISALIGNED);
  CHECK(says(e, "oscar_cov_paged_decode: options->sinks"));
}

TEST_CASE("paged oscar-cov layout: oscar/cov_paged_format.h's sizes and offsets, and the shapes it refuses", "[kv_api]") {
  oscar_error e{};
  oscar_cov_paged_layout l{};
  // head_dim 128, 2 bits, pages of 256 tokens, 8 KV heads: a token row's codes 32 bytes, (scale, zero) 4, a token 72.
  REQUIRE(oscar_cov_paged_layout_of(256, 8, 128, 2, 64, 256, &l, &e) == OSCAR_OK);
  CHECK(l.code_bytes == 32);
  CHECK(l.param_bytes == 4);
  CHECK(l.token_bytes == 72);
  CHECK(l.region_bytes == 256 * 72);
  CHECK(l.page_bytes == 147456);  // kernels/SERVING_ENGINES.md 2.6: Llama-3-8B, INT2
  CHECK(l.k_codes_offset == 0);
  CHECK(l.v_codes_offset == 256 * 32);
  CHECK(l.k_params_offset == 2 * 256 * 32);
  CHECK(l.v_params_offset == 2 * 256 * 32 + 256 * 4);
  CHECK(l.bf16_token_bytes == 512);
  CHECK(l.window_slot_bytes == 1310720);
  REQUIRE(oscar_cov_paged_layout_of(64, 3, 64, 4, 0, 100, &l, &e) == OSCAR_OK);
  CHECK(l.code_bytes == 32);
  CHECK(l.page_bytes == 3 * 64 * 72);
  CHECK(l.v_params_offset == 2 * 64 * 32 + 64 * 4);
  CHECK(l.window_slot_bytes == 3 * 100 * 256);
  CHECK(oscar_cov_paged_layout_of(256, 8, 128, 2, 64, 256, nullptr, &e) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(e, "oscar_cov_paged_layout_of: layout is NULL"));
  CHECK(oscar_cov_paged_layout_of(100, 8, 128, 2, 64, 256, &l, &e) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(e, "page_tokens=100"));
  CHECK(oscar_cov_paged_layout_of(256, 8, 96, 2, 64, 256, &l, &e) == OSCAR_ERR_UNSUPPORTED);
  CHECK(says(e, "head_dim=96 bits=2 unsupported"));
  CHECK(oscar_cov_paged_layout_of(256, 0, 128, 2, 64, 256, &l, &e) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(e, "num_kv_heads=0"));
  CHECK(oscar_cov_paged_layout_of(256, 8, 128, 2, 32, 256, &l, &e) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(e, "sink=32"));
  CHECK(oscar_cov_paged_layout_of(256, 8, 128, 2, 64, 0, &l, &e) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(e, "recent=0"));
}
