// cov_paged_format.h: THE paged layout of oscar-cov for serving engines (kernels/SERVING_ENGINES.md, section 2):
// where a token's codes sit in a pool of pages, and the byte sizes of a page and of a window slot. Shared by the
// paged kernels (kernels/src/cov/cov_paged*.cu), the C API (oscar_kv.h: oscar_cov_paged_*; oscar_cov_paged_layout_of
// hands its sizes and offsets to callers), the tests and, through that function, the Python package and the vLLM plugin
// (kernels/python/oscar_kv/paged.py).
//
//   * Pages are addressed by position: token `pos` of a sequence lives in page block_table[pos / P] at offset
//     pos % P (P = page_tokens, a multiple of 64 so that no decode chunk of 64 INT2 / 32 INT4 tokens crosses a page).
//   * Write-through: every token's codes are written when it arrives, the sink and window tokens included (their
//     codes are never read while they are in a window; a token leaving the recent window is already in its page).
//   * One page, all KV heads of one layer: head h's region starts at h * region_bytes and holds, in order,
//       K codes [P][D*BITS/8], V codes [P][D*BITS/8], K (scale, zero) fp16x2 [P], V (scale, zero) fp16x2 [P];
//     every segment starts 16-byte aligned (P is a multiple of 64 and code rows are whole 16-byte pieces).
//   * The BF16 windows live outside the pages, one window slot per running sequence:
//       k_sink, v_sink     bf16 [slots][Hkv][S][D]   tokens [0, S)
//       k_recent, v_recent bf16 [slots][Hkv][W][D]   ring: token pos >= S in slot (pos - S) % W
//     A decode of a sequence of L tokens reads the sink [0, min(L, S)), the body [S, S + nb) from the pages and the
//     ring's [S + nb, L), nb = max(0, L - S - W): the same tokens, codes and windows as the contiguous cache
//     (cov_format.h), whose body index i is position S + i here.
#pragma once
#include <cstdint>

#include "oscar/cov_format.h"
#include "oscar/host_device.h"

namespace oscar::covpaged {

constexpr int kPageMultiple = 64;  // page_tokens must be a multiple of this (the INT2 decode chunk)

OSCAR_HD int64_t code_bytes(int head_dim, int bits) { return covfmt::body_code_bytes(head_dim, bits); }
// Bytes of one KV head's region of a page of `page_tokens` tokens.
OSCAR_HD int64_t region_bytes(int page_tokens, int head_dim, int bits) {
  return static_cast<int64_t>(page_tokens) * covfmt::body_bytes_per_token(head_dim, bits);
}
// Bytes of one page (all KV heads of one layer).
OSCAR_HD int64_t page_bytes(int page_tokens, int kv_heads, int head_dim, int bits) {
  return static_cast<int64_t>(kv_heads) * region_bytes(page_tokens, head_dim, bits);
}
// Offsets inside a region.
OSCAR_HD int64_t k_codes_offset() { return 0; }
OSCAR_HD int64_t v_codes_offset(int page_tokens, int head_dim, int bits) { return static_cast<int64_t>(page_tokens) * code_bytes(head_dim, bits); }
OSCAR_HD int64_t k_params_offset(int page_tokens, int head_dim, int bits) { return 2 * v_codes_offset(page_tokens, head_dim, bits); }
OSCAR_HD int64_t v_params_offset(int page_tokens, int head_dim, int bits) {
  return k_params_offset(page_tokens, head_dim, bits) + static_cast<int64_t>(page_tokens) * covfmt::kParamBytes;
}
// Bytes of one window slot (all KV heads of one layer): sink and recent, K and V, BF16.
OSCAR_HD int64_t window_slot_bytes(int kv_heads, int head_dim, int sink, int recent) {
  return static_cast<int64_t>(kv_heads) * (sink + recent) * covfmt::bf16_bytes_per_token(head_dim);
}

}  // namespace oscar::covpaged
