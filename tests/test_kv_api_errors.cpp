// test_kv_api_errors.cpp: the KV-cache C API (oscar_kv.h) rejects bad input with a status and a message
// before touching the GPU, so these checks run on CPU-only machines too: both formats, the paged oscar-cov cache, prefill, append,
// decode, and the BF16 baseline. Pointers are host addresses that are never dereferenced (every call
// here fails validation before a launch).
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "oscar_kv.h"

namespace {

struct Fake {  // aligned, never-dereferenced stand-ins for device buffers
  alignas(256) unsigned char bytes[4096];
  void* at(size_t off) { return bytes + off; }
};

oscar_cov_cache cov_cache(Fake& f) {
  oscar_cov_cache c{};
  c.batch = 2; c.num_kv_heads = 2; c.head_dim = 128; c.bits = 2; c.sink = 64; c.recent = 256; c.body_capacity = 1000;
  c.clip_k = 0.96f; c.clip_v = 0.92f; c.clip_mode = OSCAR_CLIP_QUANTILE; c.rounding = OSCAR_ROUND_HALF_AWAY;
  void** p[8] = {&c.k_sink, &c.v_sink, &c.k_recent, &c.v_recent, &c.k_codes, &c.v_codes, &c.k_params, &c.v_params};
  for (int i = 0; i < 8; ++i) *p[i] = f.at(256 * i);
  return c;
}

oscar_omni_cache omni_cache(Fake& f) {
  oscar_omni_cache c{};
  c.batch = 2; c.num_kv_heads = 2; c.head_dim = 128; c.bits = 2; c.body_capacity = 1024;
  void** p[7] = {&c.k_res, &c.v_res, &c.k_codes, &c.v_codes, &c.k_params, &c.v_params, &c.k_norms};
  for (int i = 0; i < 7; ++i) *p[i] = f.at(256 * i);
  return c;
}

bool says(const oscar_error& e, const char* what) { return std::strstr(e.message, what) != nullptr; }

}  // namespace

TEST_CASE("oscar-cov C API rejects bad input with a message", "[kv_api]") {
  Fake f, io;
  oscar_error err{};
  const oscar_cov_cache c = cov_cache(f);
  void* k = io.at(0);
  void* v = io.at(512);
  auto* lens = static_cast<int32_t*>(io.at(1024));
  CHECK(oscar_cov_capacity(&c) == 64 + 1000 + 256);
  CHECK(oscar_cov_prefill(nullptr, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "cache is NULL"));
  oscar_cov_cache bad = c;
  bad.bits = 3;
  CHECK(oscar_cov_prefill(&bad, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_UNSUPPORTED);
  CHECK(says(err, "bits=3"));
  bad = c;
  bad.head_dim = 96;
  CHECK(oscar_cov_append(&bad, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_UNSUPPORTED);
  CHECK(says(err, "head_dim=96"));
  CHECK(says(err, "64, 128 or 256"));
  CHECK(oscar_cov_shape_supported(64, 2) == 1);
  CHECK(oscar_cov_shape_supported(256, 4) == 1);
  CHECK(oscar_cov_shape_supported(96, 2) == 0);
  CHECK(oscar_cov_shape_supported(128, 3) == 0);
  CHECK(oscar_max_query_group() == 16);
  bad = c;
  bad.k_codes = static_cast<char*>(bad.k_codes) + 4;
  CHECK(oscar_cov_prefill(&bad, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_MISALIGNED);
  CHECK(says(err, "k_codes"));
  bad = c;
  bad.arrivals = reinterpret_cast<uint32_t*>(static_cast<char*>(f.at(2048)) + 2);
  CHECK(oscar_cov_prefill(&bad, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_MISALIGNED);
  CHECK(says(err, "arrivals"));
  bad = c;
  bad.clip_mode = 2;
  CHECK(oscar_cov_prefill(&bad, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "clip_mode=2"));
  bad = c;
  bad.rounding = -1;
  CHECK(oscar_cov_append(&bad, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "rounding=-1"));
  bad = c;
  bad.clip_v = 0.0f;
  CHECK(oscar_cov_prefill(&bad, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "clip_v=0"));
  bad.clip_v = 1.5f;
  CHECK(oscar_cov_prefill(&bad, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "(0, 1]"));
  bad = c;
  bad.v_recent = nullptr;
  CHECK(oscar_cov_prefill(&bad, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "v_recent"));
  CHECK(oscar_cov_prefill(&c, nullptr, v, lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(oscar_cov_prefill(&c, static_cast<char*>(k) + 2, v, lens, 10, nullptr, &err) == OSCAR_ERR_MISALIGNED);
  CHECK(oscar_cov_prefill(&c, k, v, lens, 1321, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "capacity"));
  CHECK(oscar_cov_append(&c, k, v, lens, 1320, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "capacity"));
  float* out = static_cast<float*>(io.at(2048));
  void* ws = io.at(3072);
  const size_t wsb = oscar_decode_workspace_bytes(2, 8, 2, 128, 1320, 1);
  CHECK(wsb > 0);
  CHECK(oscar_cov_decode(&c, k, 8, lens, 1321, 1.f, out, ws, wsb, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "capacity"));
  CHECK(oscar_cov_decode(&c, k, 34, lens, 100, 1.f, out, ws, wsb, nullptr, &err) == OSCAR_ERR_UNSUPPORTED);  // 17 per KV head
  CHECK(says(err, "at most 16"));
  CHECK(oscar_cov_decode(&c, k, 7, lens, 100, 1.f, out, ws, wsb, nullptr, &err) == OSCAR_ERR_UNSUPPORTED);   // not a multiple
  CHECK(oscar_cov_decode(&c, k, 8, lens, 100, 1.f, out + 1, ws, wsb, nullptr, &err) == OSCAR_ERR_MISALIGNED);
  CHECK(oscar_cov_decode(&c, k, 8, nullptr, 100, 1.f, out, ws, wsb, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(oscar_cov_decode(&c, k, 8, lens, 1320, 1.f, out, ws, 16, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "workspace_bytes"));
  // in-kernel rotations: a bad kind, missing or misaligned matrices are refused with their names
  oscar_rotation rot{7, 0, nullptr, nullptr};
  CHECK(oscar_cov_prefill_rotated(&c, &rot, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "rotation->kind=7"));
  rot = {OSCAR_ROTATION_MATRIX, 0, static_cast<const float*>(io.at(0)), nullptr};
  CHECK(oscar_cov_append_rotated(&c, &rot, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "rotation->key or rotation->value is NULL"));
  rot = {OSCAR_ROTATION_MATRIX, 0, static_cast<const float*>(io.at(0)), reinterpret_cast<const float*>(static_cast<char*>(io.at(0)) + 4)};
  CHECK(oscar_cov_decode_rotated(&c, &rot, k, 8, lens, 100, 1.f, out, ws, wsb, nullptr, &err) == OSCAR_ERR_MISALIGNED);
  CHECK(says(err, "oscar_cov_decode_rotated"));
  rot = {OSCAR_ROTATION_MATRIX, 2, static_cast<const float*>(io.at(0)), static_cast<const float*>(io.at(0))};
  CHECK(oscar_cov_prefill_rotated(&c, &rot, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "per_head=2"));
  // logit modifiers: a NaN, infinite or negative soft-cap and misaligned sinks are refused with their names
  oscar_decode_logits lg{std::nanf(""), nullptr};
  CHECK(oscar_cov_decode_ex(&c, nullptr, &lg, k, 8, lens, 100, 1.f, out, ws, wsb, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "oscar_cov_decode_ex: logits->softcap=nan"));
  lg = {INFINITY, nullptr};
  CHECK(oscar_cov_decode_ex(&c, nullptr, &lg, k, 8, lens, 100, 1.f, out, ws, wsb, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  lg = {50.f, reinterpret_cast<const float*>(static_cast<char*>(io.at(0)) + 2)};
  CHECK(oscar_cov_decode_ex(&c, nullptr, &lg, k, 8, lens, 100, 1.f, out, ws, wsb, nullptr, &err) == OSCAR_ERR_MISALIGNED);
  CHECK(says(err, "logits->sinks"));
  CHECK(oscar_bf16_decode(k, v, 2, 2, 1000, 96, k, 8, lens, 100, 1.f, out, ws, wsb, nullptr, &err) == OSCAR_ERR_UNSUPPORTED);
  CHECK(oscar_bf16_decode(k, v, 2, 2, 1000, 128, k, 8, lens, 1001, 1.f, out, ws, wsb, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "capacity"));
}

TEST_CASE("oscar-omni C API rejects bad input with a message", "[kv_api]") {
  Fake f, io;
  oscar_error err{};
  const oscar_omni_cache c = omni_cache(f);
  void* k = io.at(0);
  void* v = io.at(512);
  auto* lens = static_cast<int32_t*>(io.at(1024));
  CHECK(oscar_omni_capacity(&c) == 1024 + 127);
  CHECK(oscar_omni_prefill(nullptr, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  oscar_omni_cache bad = c;
  bad.bits = 8;
  CHECK(oscar_omni_prefill(&bad, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_UNSUPPORTED);
  CHECK(says(err, "bits=8"));
  bad = c;
  bad.head_dim = 96;
  CHECK(oscar_omni_append(&bad, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_UNSUPPORTED);
  CHECK(says(err, "head_dim=96"));
  CHECK(says(err, "compiled: head_dim 64, 128 or 256"));
  CHECK(oscar_omni_shape_supported(96, 2) == 0);
  CHECK(oscar_omni_shape_supported(64, 2) == 1);
  CHECK(oscar_omni_shape_supported(128, 4) == 1);
  CHECK(oscar_omni_shape_supported(256, 4) == 1);
  CHECK(oscar_omni_shape_supported(256, 3) == 0);
  bad = c;
  bad.body_capacity = 1000;
  CHECK(oscar_omni_prefill(&bad, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "multiple of 128"));
  bad = c;
  bad.k_norms = nullptr;
  CHECK(oscar_omni_prefill(&bad, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "k_norms"));
  bad = c;
  bad.v_params = static_cast<char*>(bad.v_params) + 8;
  CHECK(oscar_omni_append(&bad, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_MISALIGNED);
  CHECK(says(err, "v_params"));
  bad = c;
  bad.arrivals = reinterpret_cast<uint32_t*>(static_cast<char*>(f.at(2048)) + 1);
  CHECK(oscar_omni_append(&bad, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_MISALIGNED);
  CHECK(says(err, "arrivals"));
  CHECK(oscar_omni_prefill(&c, k, nullptr, lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(oscar_omni_append(&c, k, v, static_cast<int32_t*>(io.at(1026)), 10, nullptr, &err) == OSCAR_ERR_MISALIGNED);
  CHECK(oscar_omni_prefill(&c, k, v, lens, 1152, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "capacity"));
  CHECK(oscar_omni_append(&c, k, v, lens, 1151, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "capacity"));
  float* out = static_cast<float*>(io.at(2048));
  void* ws = io.at(3072);
  const size_t wsb = oscar_decode_workspace_bytes(2, 8, 2, 128, 1151, 1);
  CHECK(oscar_omni_decode(&c, k, 8, lens, 1152, 1.f, out, ws, wsb, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "capacity"));
  oscar_rotation orot{OSCAR_ROTATION_MATRIX, 0, nullptr, nullptr};
  CHECK(oscar_omni_prefill_rotated(&c, &orot, k, v, lens, 10, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "oscar_omni_prefill_rotated"));
  orot = {9, 0, nullptr, nullptr};
  CHECK(oscar_omni_decode_rotated(&c, &orot, k, 8, lens, 100, 1.f, out, ws, wsb, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "rotation->kind=9"));
  const oscar_decode_logits lg{-1.f, nullptr};
  CHECK(oscar_omni_decode_ex(&c, nullptr, &lg, k, 8, lens, 100, 1.f, out, ws, wsb, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "oscar_omni_decode_ex: logits->softcap=-1"));
  CHECK(oscar_omni_decode(&c, k, 34, lens, 100, 1.f, out, ws, wsb, nullptr, &err) == OSCAR_ERR_UNSUPPORTED);
  CHECK(oscar_omni_decode(&c, static_cast<char*>(k) + 8, 8, lens, 100, 1.f, out, ws, wsb, nullptr, &err) == OSCAR_ERR_MISALIGNED);
  CHECK(oscar_omni_decode(&c, k, 8, lens, 1151, 1.f, out, ws, 16, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "workspace_bytes"));
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
  c.page_stride = oscar_cov_paged_page_bytes(256, 2, 128, 2); c.num_window_slots = 2;
  oscar_cov_paged_default_rule(&c);
  c.pages = f.at(0); c.k_sink = f.at(256); c.v_sink = f.at(512); c.k_recent = f.at(768); c.v_recent = f.at(1024);
  const int32_t* i32 = static_cast<const int32_t*>(f.at(1280));
  oscar_paged_batch b{2, i32, i32, i32, 4, i32, 0};
  const int64_t* slots = static_cast<const int64_t*>(f.at(1536));
  float* out = static_cast<float*>(f.at(2048));
  oscar_error e{};
  auto decode = [&](const oscar_cov_paged& cc, const oscar_paged_batch& bb) {
    return oscar_cov_paged_decode(&cc, nullptr, &bb, f.at(1792), 4, 1024, 0.1f, out, f.at(2304), 1 << 20, nullptr, &e);
  };
  auto write = [&](const oscar_cov_paged& cc, const oscar_paged_batch& bb, int64_t stride) {
    return oscar_cov_paged_write(&cc, nullptr, &bb, f.at(1792), f.at(1792), stride, stride, 3, slots, nullptr, &e);
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
}
