// test_cache_formats.cpp: the byte-size formulas of oscar/cov_format.h, checked by hand
// (oscar-cov, head_dim 128, sink 64, recent 256) and of oscar/omni_format.h, including the memory ratios
// vs BF16 at 128K tokens.
#include <catch2/catch.hpp>

#include "oscar/cov_format.h"
#include "oscar/omni_format.h"

using namespace oscar::covfmt;

TEST_CASE("oscar-cov per-token bytes", "[kv_cache_format]") {
  // INT2: 128 channels * 2 bits = 32 bytes of codes + fp16 scale + fp16 zero = 36 bytes per tensor.
  CHECK(body_code_bytes(128, 2) == 32);
  CHECK(body_bytes_per_token(128, 2) == 72);    // K + V
  CHECK(body_code_bytes(128, 4) == 64);
  CHECK(body_bytes_per_token(128, 4) == 136);
  CHECK(bf16_bytes_per_token(128) == 512);      // 2 tensors * 128 channels * 2 bytes
  CHECK(body_bytes_per_token(64, 2) == 2 * (16 + 4));
}

TEST_CASE("oscar-cov segments", "[kv_cache_format]") {
  CHECK(body_tokens(0, 64, 256) == 0);
  CHECK(body_tokens(37, 64, 256) == 0);
  CHECK(body_tokens(320, 64, 256) == 0);
  CHECK(body_tokens(321, 64, 256) == 1);
  CHECK(body_tokens(131072, 64, 256) == 130752);
  // A short sequence still allocates both windows in full.
  CHECK(state_bytes(10, 128, 2, 64, 256) == 320 * 512);
  CHECK(decode_read_bytes(10, 128, 2, 64, 256) == 10 * 512);
}

TEST_CASE("oscar-cov memory at 128K tokens vs BF16", "[kv_cache_format]") {
  const int64_t T = 131072;
  // by hand: 320 window tokens * 512 B + 130752 body tokens * 72 B = 163840 + 9414144
  CHECK(state_bytes(T, 128, 2, 64, 256) == 9577984);
  CHECK(bf16_state_bytes(T, 128) == 67108864);  // 131072 * 512
  const double ratio2 = double(bf16_state_bytes(T, 128)) / double(state_bytes(T, 128, 2, 64, 256));
  CHECK(ratio2 == Approx(7.0066).epsilon(1e-4));
  CHECK(ratio2 >= 6.5);  // the format's target, all metadata and windows included
  // INT4: 163840 + 130752 * 136 = 17946112
  CHECK(state_bytes(T, 128, 4, 64, 256) == 17946112);
  CHECK(double(bf16_state_bytes(T, 128)) / double(state_bytes(T, 128, 4, 64, 256)) == Approx(3.7394).epsilon(1e-4));
  // Llama-3-8B (32 layers x 8 KV heads) per 128K-token sequence: BF16 16 GiB, INT2 ~2.28 GiB.
  CHECK(bf16_state_bytes(T, 128) * 32 * 8 == 17179869184LL);
  CHECK(state_bytes(T, 128, 2, 64, 256) * 32 * 8 == 2451963904LL);
}

TEST_CASE("oscar-omni bytes and segments", "[kv_cache_format]") {
  using namespace oscar::omnifmt;
  // per token per KV head, head_dim 128: codes 32 + 32 (INT2), key scale/zero 4 * 128 / 32 = 16,
  // value scale/zero 4 * 128 / 32 = 16, the fp16 norm shared by 8 KV heads 2 / 8
  CHECK(body_bytes_per_token(128, 2, 8) == 96.25);
  CHECK(body_bytes_per_token(128, 4, 8) == 160.25);
  CHECK(body_tokens(127) == 0);
  CHECK(body_tokens(128) == 128);
  CHECK(body_tokens(300) == 256);
  const int64_t T = 131072;
  CHECK(state_bytes(T, 128, 2, 8) == 128 * 512 + 131072 * 96.25);  // 12,681,216 B
  CHECK(67108864.0 / state_bytes(T, 128, 2, 8) == Approx(5.292).epsilon(1e-3));  // OScaR reports 5.3x
  CHECK(decode_read_bytes(300, 128, 2, 8) == 44 * 512 + 256 * 96.25);
}

TEST_CASE("layout(): every array of each format, by hand", "[kv_cache_format]") {
  // oscar-cov, B=2, 8 KV heads, head_dim 128, INT2, sink 64, recent 256, 1000 tokens: body 680 tokens.
  const Layout c = layout(2, 8, 128, 2, 1000, 64, 256);
  CHECK(c.body_capacity == 680);
  CHECK(c.capacity == 1000);
  CHECK(c.sink_bytes == 16 * 64 * 128 * 2);
  CHECK(c.recent_bytes == 16 * 256 * 128 * 2);
  CHECK(c.codes_bytes == 16 * 680 * 32);
  CHECK(c.params_bytes == 16 * 680 * 4);
  // The per-(sequence, head) state formula agrees with the arrays.
  CHECK(c.total_bytes() == 16 * state_bytes(1000, 128, 2, 64, 256));
  // Fewer tokens than the windows: no body, the windows still allocated.
  CHECK(layout(1, 1, 64, 4, 100, 64, 256).body_capacity == 0);
  CHECK(layout(1, 1, 64, 4, 100, 64, 256).capacity == 320);

  // oscar-omni, B=2, 8 KV heads, head_dim 128, INT2, 1000 tokens: body rounded up to 896 (= 7 blocks)
  // so that body + 127 >= 1000.
  const oscar::omnifmt::Layout o = oscar::omnifmt::layout(2, 8, 128, 2, 1000);
  CHECK(o.body_capacity == 896);
  CHECK(o.capacity == 1023);
  CHECK(o.res_bytes == 16 * 128 * 128 * 2);
  CHECK(o.codes_bytes == 16 * 896 * 32);
  CHECK(o.k_params_bytes == 16 * (896 / 32) * 128 * 4);
  CHECK(o.v_params_bytes == 16 * 896 * 4 * 4);
  CHECK(o.norms_bytes == 2 * 896 * 2);
  CHECK(oscar::omnifmt::layout(1, 1, 128, 2, 127).body_capacity == 0);
  CHECK(oscar::omnifmt::layout(1, 1, 128, 2, 128).body_capacity == 128);
}
