// omni_format.h: THE on-device layout of the oscar-omni (OScaR) quantized KV cache, its byte sizes, and
// the one rule beyond quant_rules.h that decides its codes: the per-token key norm. Shared by the CUDA
// kernels (kernels/src/omni/), the C API (oscar_kv.h), the CPU reference (lib/src/cache_sim.cpp)
// and the tests; plain C++ with OSCAR_HD functions.
//
// Recipe oscar-omni (Hadamard rotation, Omni-Token Scaling, KIVI-style groups, residual block):
//   * Rotations: the normalized Hadamard H on query, key and value channels, applied OUTSIDE the kernels
//     (oscar_fwht_bf16 or the caller's own): the cache takes k' = k H, v' = v H; decode takes q' = q H
//     and returns o' (the caller applies o = o' H, H being symmetric and orthogonal).
//   * Per sequence b the cache holds L_b tokens (device int32): the body = tokens [0, nb) with
//     nb = 128 * floor(L / 128), quantized; the residual = tokens [nb, L) (at most 127), BF16, residual
//     slot t - nb. Appending token t = L writes residual slot L % 128; when that slot is 127 the block
//     [L - 127, L] is quantized into the body instead (the residual is then empty).
//   * Omni-Token Scaling: token t's keys over ALL KV heads of the layer (H*D values, head-major) have the
//     L2 norm n_t (omni_token_norm below, stored fp16, one per token shared by the heads); body keys are
//     quantized as y = k / n_t (IEEE division; a token with n_t = 0 keeps y = k) and read back as
//     n_t * y^. Keys: per channel, asymmetric, over blocks of 32 tokens (one (scale, zero) per channel per
//     block). Values: per token, asymmetric, groups of 32 channels. Clip 1.0, fp16 scale/zero, OScaR's integer
//     zero point (the stored zero is -z * scale: dequantization is code * scale + zero as for any group), round half
//     to even, codes from oscar::int_zero_params / quantize_value_int_zero on the BF16 inputs.
//   * Arrays (device memory, "BH" = batch * kv_heads, (b, h) major; D = head_dim: 64, 128 or 256 compiled):
//       k_res, v_res   bf16    [BH][128][D]            residual block
//       k_codes,v_codes uint8  [BH][body_capacity][D*BITS/8]   token rows, packed as in quant_rules.h
//       k_params       fp16x2  [BH][body_capacity/32][D]       (scale, zero) per key block and channel
//       v_params       fp16x2  [BH][body_capacity][D/32]       (scale, zero) per token and 32-channel group
//       k_norms        fp16    [B][body_capacity]              n_t, shared by the KV heads
//     body_capacity is a multiple of 128; the cache holds up to body_capacity + 127 tokens.
//   * Body bytes per token per KV head (K + V): codes 2*D*BITS/8, key params 4*D/32, value params 4*D/32,
//     norm 2/H: INT2 D=128: 32+32+16+16 = 96 B + 2/H (5.32x less than BF16's 512 B at H=8), INT4 160 B.
#pragma once
#include <cmath>
#include <cstdint>

#include "oscar/host_device.h"
#include "oscar/quant_rules.h"

namespace oscar::omnifmt {

constexpr int kResidual = 128;   // residual block (tokens)
constexpr int kKeyBlock = 32;    // tokens per per-channel key group
constexpr int kValueGroup = 32;  // channels per per-token value group

OSCAR_HD int64_t body_tokens(int64_t tokens) { return tokens > 0 ? tokens / kResidual * kResidual : 0; }
OSCAR_HD int64_t code_bytes(int head_dim, int bits) { return static_cast<int64_t>(head_dim) * bits / 8; }
// Body bytes per token per KV head, K and V together, the key norm shared by `kv_heads` heads (as double).
OSCAR_HD double body_bytes_per_token(int head_dim, int bits, int kv_heads) {
  return 2.0 * code_bytes(head_dim, bits) + 4.0 * head_dim / kKeyBlock + 4.0 * head_dim / kValueGroup + 2.0 / kv_heads;
}
// Bytes per (sequence, KV head) for `tokens` tokens: the BF16 residual block (allocated in full) + body.
OSCAR_HD double state_bytes(int64_t tokens, int head_dim, int bits, int kv_heads) {
  return static_cast<double>(kResidual) * 4.0 * head_dim +
         static_cast<double>(body_tokens(tokens)) * body_bytes_per_token(head_dim, bits, kv_heads);
}
// Bytes a decode step reads for one (sequence, KV head) of `tokens` tokens (benchmarks' bandwidth).
OSCAR_HD double decode_read_bytes(int64_t tokens, int head_dim, int bits, int kv_heads) {
  const int64_t nb = body_tokens(tokens);
  return static_cast<double>(tokens - nb) * 4.0 * head_dim + static_cast<double>(nb) * body_bytes_per_token(head_dim, bits, kv_heads);
}

// The key norm of one token: x(i), i in [0, n), is its keys over all KV heads, head-major (n = H * D).
// The sum of squares is taken in double in the fixed order one CUDA warp uses: the 4-value chunks
// i/4 = l, l + 32, l + 64, ... go to lane l (l in [0, 32)), which adds its squares in increasing i;
// the 32 lane sums are then combined by a butterfly (xor 16, 8, 4, 2, 1: s_l <- s_l + s_{l^o}). Squares
// of floats are exact in double, so the result depends on nothing else. n_t = dtype(float(sqrt(sum))).
template <class X>
inline float omni_token_norm(X x, int n, ScaleDtype dtype) {
  double lane[32];
  for (int l = 0; l < 32; ++l) lane[l] = 0.0;
  for (int i = 0; i < n; ++i) {
    const double v = static_cast<double>(x(i));
    lane[(i / 4) % 32] += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) {
    double next[32];
    for (int l = 0; l < 32; ++l) next[l] = lane[l] + lane[l ^ o];
    for (int l = 0; l < 32; ++l) lane[l] = next[l];
  }
  return store_param(static_cast<float>(std::sqrt(lane[0])), dtype);
}

// Every device array of an oscar-omni cache, in bytes, for `batch` sequences of `kv_heads` KV heads that
// must each hold `capacity` tokens (the body rounded up to whole residual blocks). THE size formula, used
// by oscar_omni_cache_create, the benchmarks, the tests and the Python package.
struct Layout {
  int64_t body_capacity = 0;  // body tokens per (sequence, KV head), a multiple of kResidual
  int64_t capacity = 0;       // tokens one sequence holds: body_capacity + kResidual - 1
  int64_t res_bytes = 0;      // each of k_res, v_res
  int64_t codes_bytes = 0;    // each of k_codes, v_codes
  int64_t k_params_bytes = 0, v_params_bytes = 0, norms_bytes = 0;
  OSCAR_HD int64_t total_bytes() const { return 2 * (res_bytes + codes_bytes) + k_params_bytes + v_params_bytes + norms_bytes; }
};
OSCAR_HD Layout layout(int batch, int kv_heads, int head_dim, int bits, int64_t capacity) {
  Layout l;
  const int64_t bh = static_cast<int64_t>(batch) * kv_heads;
  const int64_t need = capacity > kResidual - 1 ? capacity - (kResidual - 1) : 0;
  l.body_capacity = (need + kResidual - 1) / kResidual * kResidual;
  l.capacity = l.body_capacity + kResidual - 1;
  l.res_bytes = bh * kResidual * head_dim * 2;
  l.codes_bytes = bh * l.body_capacity * code_bytes(head_dim, bits);
  l.k_params_bytes = bh * (l.body_capacity / kKeyBlock) * head_dim * 4;
  l.v_params_bytes = bh * l.body_capacity * (head_dim / kValueGroup) * 4;
  l.norms_bytes = static_cast<int64_t>(batch) * l.body_capacity * 2;
  return l;
}

}  // namespace oscar::omnifmt
