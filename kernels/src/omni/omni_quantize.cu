// omni/omni_quantize.cu: oscar-omni prefill and append (layout oscar/omni_format.h) for every (head_dim,
// bits) of decode/shapes.h: per-token key norms over all KV heads (omnifmt::omni_token_norm's order), keys
// per channel over 32-token blocks of k / n_t, values per token in 32-channel groups, codes and fp16
// (scale, zero) by oscar::group_params / quantize_value (bit-exact with the CPU); the BF16 residual block
// of 128 tokens is copied, and append quantizes it into the body when it fills.
#include "api_util.h"
#include "decode/mma.cuh"
#include "decode/shapes.h"
#include "omni/omni_kernels.h"
#include "oscar/omni_format.h"
#include "oscar/quant_rules.h"

namespace oscar::kernels {
namespace {

using omnifmt::kKeyBlock;
using omnifmt::kResidual;
using omnifmt::kValueGroup;

// Quantization of one 32-token block of every KV head of sequence b (body tokens t0 .. t0 + 31), by a
// block of 256 threads. src_k(h, i) / src_v(h, i): the bf16 row of token t0 + i of head h.
constexpr int kQThreads = 256;
template <int HD>
struct QuantSmem {
  static constexpr int TP = kQThreads / HD;  // threads per key channel, each over 32 / TP tokens (4, 2, 1)
  float norm[kKeyBlock];
  float mn[TP][HD], mx[TP][HD];
  uint8_t codes[kKeyBlock][HD];
};

__device__ __forceinline__ void bf16x4_to_float(const uint2 w, float (&x)[4]) {
  x[0] = __uint_as_float(w.x << 16);
  x[1] = __uint_as_float(w.x & 0xffff0000u);
  x[2] = __uint_as_float(w.y << 16);
  x[3] = __uint_as_float(w.y & 0xffff0000u);
}

template <int HD, int BITS, class SrcK, class SrcV>
__device__ void quantize_block32(const OmniView& c, int b, int64_t t0, SrcK src_k, SrcV src_v, QuantSmem<HD>& sm) {
  constexpr int CB = HD * BITS / 8, CPR = HD / 4;  // code bytes per row, 4-channel pieces per row
  constexpr int TP = QuantSmem<HD>::TP, TT = kKeyBlock / TP;
  static_assert(kQThreads % HD == 0 && CPR % 8 == 0, "head_dim 64, 128 or 256");
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // 1. Token norms over all KV heads in omnifmt::omni_token_norm's order: piece j (4 channels) of the
  //    token's H * HD keys, head-major, goes to lane j % 32, which adds its squares in increasing j; then
  //    the xor butterfly. One warp per token. HD >= 128: lane l takes pieces l, l + 32, .. of every head;
  //    HD = 64: piece l % 16 of every other head (h * 16 % 32 = l - l % 16).
  auto add_squares = [&](const uint16_t* krow, int q, double& acc) {
    float x[4];
    bf16x4_to_float(reinterpret_cast<const uint2*>(krow)[q], x);
#pragma unroll
    for (int e = 0; e < 4; ++e) acc = __dadd_rn(acc, __dmul_rn(x[e], x[e]));
  };
  for (int i = warp; i < kKeyBlock; i += kQThreads / 32) {
    double acc = 0.0;
    for (int h = 0; h < c.Hkv; ++h) {
      if constexpr (CPR >= 32) {
#pragma unroll
        for (int k = 0; k < CPR / 32; ++k) add_squares(src_k(h, i), lane + 32 * k, acc);
      } else {
        if ((h * CPR) % 32 == lane - lane % CPR) add_squares(src_k(h, i), lane % CPR, acc);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc = __dadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, o));
    const uint16_t nb = float_to_half_bits(__double2float_rn(__dsqrt_rn(acc)));
    if (lane == 0) {
      sm.norm[i] = half_bits_to_float(nb);
      c.kn[static_cast<int64_t>(b) * c.cap + t0 + i] = nb;
    }
  }
  __syncthreads();
  // 2. Keys: per channel over the 32 tokens of y = k / n. Thread = (channel ch, token part hf of TT tokens).
  const int ch = tid & (HD - 1), hf = tid / HD;
  for (int h = 0; h < c.Hkv; ++h) {
    const int64_t bh = static_cast<int64_t>(b) * c.Hkv + h;
    float y[TT];
    float mn = INFINITY, mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < TT; ++k) {
      const int i = hf * TT + k;
      const float x = __uint_as_float(static_cast<uint32_t>(src_k(h, i)[ch]) << 16);
      const float n = sm.norm[i];
      y[k] = n > 0.0f ? __fdiv_rn(x, n) : x;
      mn = fminf(mn, y[k]);
      mx = fmaxf(mx, y[k]);
    }
    sm.mn[hf][ch] = mn;
    sm.mx[hf][ch] = mx;
    __syncthreads();
    mn = sm.mn[0][ch];
    mx = sm.mx[0][ch];
#pragma unroll
    for (int p = 1; p < TP; ++p) {
      mn = fminf(mn, sm.mn[p][ch]);
      mx = fmaxf(mx, sm.mx[p][ch]);
    }
    const GroupParams p = group_params(mn, mx, BITS, false, 1.0f, ScaleDtype::F16);
    if (hf == 0)
      c.kp[(bh * (c.cap / kKeyBlock) + t0 / kKeyBlock) * HD + ch] =
          static_cast<uint32_t>(float_to_half_bits(p.scale)) | (static_cast<uint32_t>(float_to_half_bits(p.zero)) << 16);
    const float r = __frcp_rn(p.scale);  // quantize_value_recip == quantize_value (test_quant_recip)
#pragma unroll
    for (int k = 0; k < TT; ++k) sm.codes[hf * TT + k][ch] = quantize_value_recip(y[k], p, r, BITS, Rounding::HalfEven);
    __syncthreads();
    // pack: 32 rows x CB bytes as 32-bit words, 16 (INT2) or 8 (INT4) codes per word
    constexpr int WPR = CB / 4, CPW = 32 / BITS;
    for (int wi = tid; wi < kKeyBlock * WPR; wi += kQThreads) {
      const int i = wi / WPR, w = wi % WPR;
      uint32_t bits = 0;
#pragma unroll
      for (int q = 0; q < CPW; ++q) bits |= static_cast<uint32_t>(sm.codes[i][w * CPW + q]) << (BITS * q);
      reinterpret_cast<uint32_t*>(c.kc + (bh * c.cap + t0 + i) * CB)[w] = bits;
    }
    __syncthreads();  // sm.codes / mn / mx reused by the next head
  }
  // 3. Values: per token, groups of 32 channels = 8 consecutive lanes x 4 channels (piece q of a row). A
  //    warp step takes RPW rows (HD 64: two, lanes 0-15 and 16-31) and each lane PPL pieces of its row
  //    (HD 256: q = lane, lane + 32); the rows (32 H) are a multiple of the 8 RPW a block step takes, so
  //    every warp runs the same iterations.
  constexpr int RPW = CPR >= 32 ? 1 : 32 / CPR, PPL = CPR >= 32 ? CPR / 32 : 1;
  for (int r0 = warp * RPW; r0 < kKeyBlock * c.Hkv; r0 += (kQThreads / 32) * RPW)
#pragma unroll
    for (int k = 0; k < PPL; ++k) {
      const int r = RPW > 1 ? r0 + lane / CPR : r0, q = RPW > 1 ? lane % CPR : lane + 32 * k;
      const int h = r / kKeyBlock, i = r % kKeyBlock;
      const int64_t bh = static_cast<int64_t>(b) * c.Hkv + h;
      float x[4];
      bf16x4_to_float(reinterpret_cast<const uint2*>(src_v(h, i))[q], x);
      float mn = fminf(fminf(x[0], x[1]), fminf(x[2], x[3])), mx = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
#pragma unroll
      for (int o = 1; o < 8; o <<= 1) {
        mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      }
      const GroupParams p = group_params(mn, mx, BITS, false, 1.0f, ScaleDtype::F16);
      uint32_t bits = 0;
      const float rv = __frcp_rn(p.scale);  // quantize_value_recip == quantize_value (test_quant_recip)
#pragma unroll
      for (int j = 0; j < 4; ++j) bits |= static_cast<uint32_t>(quantize_value_recip(x[j], p, rv, BITS, Rounding::HalfEven)) << (BITS * j);
      uint8_t* row = c.vc + (bh * c.cap + t0 + i) * CB;
      if constexpr (BITS == 2) row[q] = static_cast<uint8_t>(bits);
      else reinterpret_cast<uint16_t*>(row)[q] = static_cast<uint16_t>(bits);
      if ((q & 7) == 0)
        c.vp[(bh * c.cap + t0 + i) * (HD / kValueGroup) + q / 8] =
            static_cast<uint32_t>(float_to_half_bits(p.scale)) | (static_cast<uint32_t>(float_to_half_bits(p.zero)) << 16);
    }
}

// Prefill: block (b, 32-token block blk): quantized when inside the body, else copied to the residual.
template <int HD, int BITS>
__global__ void __launch_bounds__(kQThreads) prefill_kernel(OmniView c, const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
                                                            const int32_t* __restrict__ lens, int max_len) {
  __shared__ QuantSmem<HD> sm;
  const int nblk = (max_len + kKeyBlock - 1) / kKeyBlock;
  const int b = blockIdx.x / nblk, blk = blockIdx.x % nblk;
  int L = lens[b];
  L = L < 0 ? 0 : (L > max_len ? max_len : L);
  const int64_t nb = omnifmt::body_tokens(L);
  const int64_t t0 = static_cast<int64_t>(blk) * kKeyBlock;
  auto row = [&](const uint16_t* x, int h, int64_t t) { return x + ((static_cast<int64_t>(b) * c.Hkv + h) * max_len + t) * HD; };
  if (t0 + kKeyBlock <= nb) {
    quantize_block32<HD, BITS>(
        c, b, t0, [&](int h, int i) { return row(k, h, t0 + i); }, [&](int h, int i) { return row(v, h, t0 + i); }, sm);
    return;
  }
  const int64_t end = min64(L, t0 + kKeyBlock);
  const int64_t first = t0 > nb ? t0 : nb;
  const int64_t n = end - first;
  if (n <= 0) return;
  // residual copy: (head, token, 16-byte piece) per thread
  constexpr int P16 = HD / 8;
  const int64_t pieces = static_cast<int64_t>(c.Hkv) * n * P16;
  for (int64_t p = threadIdx.x; p < pieces; p += kQThreads) {
    const int piece = static_cast<int>(p % P16);
    const int64_t ti = (p / P16) % n;
    const int h = static_cast<int>(p / P16 / n);
    const int64_t t = first + ti;
    const int64_t dst = ((static_cast<int64_t>(b) * c.Hkv + h) * kResidual + (t - nb)) * HD;
    reinterpret_cast<uint4*>(c.kr + dst)[piece] = reinterpret_cast<const uint4*>(row(k, h, t))[piece];
    reinterpret_cast<uint4*>(c.vr + dst)[piece] = reinterpret_cast<const uint4*>(row(v, h, t))[piece];
  }
}

// Append: grid (B, 4). Token t = lens[b] goes to residual slot t % 128; when that is slot 127 the four
// blocks of the sequence quantize the residual block (the new token read straight from the input).
template <int HD, int BITS>
__global__ void __launch_bounds__(kQThreads) append_kernel(OmniView c, const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
                                                           const int32_t* __restrict__ lens) {
  __shared__ QuantSmem<HD> sm;
  const int b = blockIdx.x, sub = blockIdx.y;
  const int64_t t = lens[b];
  if (t < 0 || t >= c.cap + kResidual - 1) return;  // host checked the bound
  const int slot = static_cast<int>(t % kResidual);
  auto res = [&](uint16_t* x, int h, int s) { return x + ((static_cast<int64_t>(b) * c.Hkv + h) * kResidual + s) * HD; };
  auto in = [&](const uint16_t* x, int h) { return x + (static_cast<int64_t>(b) * c.Hkv + h) * HD; };
  if (slot != kResidual - 1) {
    if (sub != 0) return;
    constexpr int P16 = HD / 8;
    for (int p = threadIdx.x; p < c.Hkv * P16; p += kQThreads) {
      const int h = p / P16, piece = p % P16;
      reinterpret_cast<uint4*>(res(c.kr, h, slot))[piece] = reinterpret_cast<const uint4*>(in(k, h))[piece];
      reinterpret_cast<uint4*>(res(c.vr, h, slot))[piece] = reinterpret_cast<const uint4*>(in(v, h))[piece];
    }
    return;
  }
  const int64_t t0 = t - (kResidual - 1) + sub * kKeyBlock;
  quantize_block32<HD, BITS>(
      c, b, t0,
      [&](int h, int i) -> const uint16_t* { const int s = sub * kKeyBlock + i; return s == kResidual - 1 ? in(k, h) : res(c.kr, h, s); },
      [&](int h, int i) -> const uint16_t* { const int s = sub * kKeyBlock + i; return s == kResidual - 1 ? in(v, h) : res(c.vr, h, s); },
      sm);
}

}  // namespace

template <int HD, int BITS>
oscar_status omni_prefill(const OmniView& c, const uint16_t* k, const uint16_t* v, const int32_t* lens, int32_t max_len, cudaStream_t s,
                          oscar_error* err) {
  const int64_t blocks = static_cast<int64_t>(c.B) * ((max_len + kKeyBlock - 1) / kKeyBlock);  // the API bounds it below 2^31
  prefill_kernel<HD, BITS><<<static_cast<unsigned>(blocks), kQThreads, 0, s>>>(c, k, v, lens, max_len);
  return api::check_launch(err, "oscar_omni_prefill");
}

template <int HD, int BITS>
oscar_status omni_append(const OmniView& c, const uint16_t* k, const uint16_t* v, const int32_t* lens, cudaStream_t s, oscar_error* err) {
  const dim3 grid(static_cast<unsigned>(c.B), kResidual / kKeyBlock);
  append_kernel<HD, BITS><<<grid, kQThreads, 0, s>>>(c, k, v, lens);
  return api::check_launch(err, "oscar_omni_append");
}

#define OSCAR_OMNI_QUANTIZE_INSTANCE(HD, BITS)                                                                                  \
  template oscar_status omni_prefill<HD, BITS>(const OmniView&, const uint16_t*, const uint16_t*, const int32_t*, int32_t, cudaStream_t, \
                                               oscar_error*);                                                                   \
  template oscar_status omni_append<HD, BITS>(const OmniView&, const uint16_t*, const uint16_t*, const int32_t*, cudaStream_t, oscar_error*);
OSCAR_KV_SHAPES(OSCAR_OMNI_QUANTIZE_INSTANCE)

}  // namespace oscar::kernels
