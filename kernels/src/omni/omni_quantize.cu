// omni/omni_quantize.cu: oscar-omni prefill and append (layout oscar/omni_format.h) for every (head_dim,
// bits) of decode/shapes.h: per-token key norms over all KV heads (omnifmt::omni_token_norm's order), keys
// per channel over 32-token blocks of k / n_t, values per token in 32-channel groups, codes and fp16
// (scale, zero) by OScaR's integer zero point, oscar::int_zero_params / quantize_value_int_zero (bit-exact with the CPU); the BF16 residual block
// of 128 tokens is copied, and append quantizes it into the body when it fills.
#include "api_util.h"
#include "decode/mma.cuh"
#include "decode/rotate.cuh"
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

// Keys (norms, per-channel groups) of the block; ends with a block barrier.
template <int HD, int BITS, class SrcK>
__device__ void quantize_keys32(const OmniView& c, int b, int64_t t0, SrcK src_k, QuantSmem<HD>& sm) {
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
    const IntZeroParams p = int_zero_params(mn, mx, BITS, 1.0f, ScaleDtype::F16);
    if (hf == 0)
      c.kp[(bh * (c.cap / kKeyBlock) + t0 / kKeyBlock) * HD + ch] =
          static_cast<uint32_t>(float_to_half_bits(p.p.scale)) | (static_cast<uint32_t>(float_to_half_bits(p.p.zero)) << 16);
    const float r = __frcp_rn(p.p.scale);  // quantize_value_int_zero_recip == quantize_value_int_zero (test_quant_recip)
#pragma unroll
    for (int k = 0; k < TT; ++k) sm.codes[hf * TT + k][ch] = quantize_value_int_zero_recip(y[k], p, r, BITS, Rounding::HalfEven);
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
}

// Values (per token, 32-channel groups) of the block; no shared memory.
template <int HD, int BITS, class SrcV>
__device__ void quantize_values32(const OmniView& c, int b, int64_t t0, SrcV src_v) {
  constexpr int CB = HD * BITS / 8, CPR = HD / 4;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
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
      const IntZeroParams p = int_zero_params(mn, mx, BITS, 1.0f, ScaleDtype::F16);
      uint32_t bits = 0;
      const float rv = __frcp_rn(p.p.scale);  // quantize_value_int_zero_recip == quantize_value_int_zero (test_quant_recip)
#pragma unroll
      for (int j = 0; j < 4; ++j) bits |= static_cast<uint32_t>(quantize_value_int_zero_recip(x[j], p, rv, BITS, Rounding::HalfEven)) << (BITS * j);
      uint8_t* row = c.vc + (bh * c.cap + t0 + i) * CB;
      if constexpr (BITS == 2) row[q] = static_cast<uint8_t>(bits);
      else reinterpret_cast<uint16_t*>(row)[q] = static_cast<uint16_t>(bits);
      if ((q & 7) == 0)
        c.vp[(bh * c.cap + t0 + i) * (HD / kValueGroup) + q / 8] =
            static_cast<uint32_t>(float_to_half_bits(p.p.scale)) | (static_cast<uint32_t>(float_to_half_bits(p.p.zero)) << 16);
    }
}

template <int HD, int BITS, class SrcK, class SrcV>
__device__ void quantize_block32(const OmniView& c, int b, int64_t t0, SrcK src_k, SrcV src_v, QuantSmem<HD>& sm) {
  quantize_keys32<HD, BITS>(c, b, t0, src_k, sm);
  quantize_values32<HD, BITS>(c, b, t0, src_v);
}

// In-kernel rotation (oscar_rotation; rule oscar/rotate_math.h): rows of HD/8 lanes, 8 channels per lane.
// Writes rows r = h * 32 + i (h < H, i < 32) into stage [H * 32][HD]: src(h, i) the row, rotated by head h's
// key or value rotation when rotate(h, i) (rows already rotated, e.g. from the residual block, are copied).
template <int HD, class Src, class Pred>
__device__ void stage_rows(uint16_t* stage, const RotArgs& rot, bool value, int H, Src src, Pred rotate) {
  constexpr int LR = HD / 8, RPB = kQThreads / LR;
  const int li = threadIdx.x & (LR - 1);
  const unsigned mask = row_lanes_mask<HD>(threadIdx.x & 31);
  for (int r0 = 0; r0 < H * kKeyBlock; r0 += RPB) {  // every lane runs every iteration (clamped rows): the shuffles need them
    const int rr = r0 + static_cast<int>(threadIdx.x) / LR;
    const int r = rr < H * kKeyBlock ? rr : H * kKeyBlock - 1;
    const int h = r / kKeyBlock, i = r % kKeyBlock;
    uint4 w = reinterpret_cast<const uint4*>(src(h, i))[li];
    if (rotate(h, i)) w = rotate_piece<HD>(w, rot, value, h, li, mask);  // uniform over the row's lanes
    if (rr < H * kKeyBlock) reinterpret_cast<uint4*>(stage + static_cast<int64_t>(r) * HD)[li] = w;
  }
}
// One bf16 row (src -> dst) by HD/8 lanes, rotated when rot.kind != 0 (the caller keeps the row's lanes together).
template <int HD>
__device__ __forceinline__ void copy_row(uint16_t* dst, const uint16_t* src, const RotArgs& rot, bool value, int h, int li, unsigned mask,
                                         bool write = true) {
  uint4 w = reinterpret_cast<const uint4*>(src)[li];
  if (rot.kind) w = rotate_piece<HD>(w, rot, value, h, li, mask);
  if (write) reinterpret_cast<uint4*>(dst)[li] = w;
}

// Prefill: block (b, 32-token block blk): quantized when inside the body, else copied to the residual.
template <int HD, int BITS, bool ROT>
__global__ void __launch_bounds__(kQThreads) prefill_kernel(OmniView c, RotArgs rot, const uint16_t* __restrict__ k,
                                                            const uint16_t* __restrict__ v, const int32_t* __restrict__ lens, int max_len) {
  __shared__ QuantSmem<HD> sm;
  extern __shared__ __align__(16) uint16_t stage[];  // rot.kind != 0: the block's rotated rows [Hkv * 32][HD], K then V
  const int nblk = (max_len + kKeyBlock - 1) / kKeyBlock;
  const int b = blockIdx.x / nblk, blk = blockIdx.x % nblk;
  int L = lens[b];
  L = L < 0 ? 0 : (L > max_len ? max_len : L);
  const int64_t nb = omnifmt::body_tokens(L);
  const int64_t t0 = static_cast<int64_t>(blk) * kKeyBlock;
  auto row = [&](const uint16_t* x, int h, int64_t t) { return x + ((static_cast<int64_t>(b) * c.Hkv + h) * max_len + t) * HD; };
  if (t0 + kKeyBlock <= nb) {
    if constexpr (!ROT) {
      quantize_block32<HD, BITS>(
          c, b, t0, [&](int h, int i) { return row(k, h, t0 + i); }, [&](int h, int i) { return row(v, h, t0 + i); }, sm);
      return;
    } else {
    auto staged = [&](int h, int i) -> const uint16_t* { return stage + (static_cast<int64_t>(h) * kKeyBlock + i) * HD; };
    auto all = [](int, int) { return true; };
    stage_rows<HD>(stage, rot, false, c.Hkv, [&](int h, int i) { return row(k, h, t0 + i); }, all);
    __syncthreads();
    quantize_keys32<HD, BITS>(c, b, t0, staged, sm);  // ends with a barrier
    stage_rows<HD>(stage, rot, true, c.Hkv, [&](int h, int i) { return row(v, h, t0 + i); }, all);
    __syncthreads();
    quantize_values32<HD, BITS>(c, b, t0, staged);
    return;
    }
  }
  const int64_t end = min64(L, t0 + kKeyBlock);
  const int64_t first = t0 > nb ? t0 : nb;
  const int64_t n = end - first;
  if (n <= 0) return;
  if constexpr (ROT) {  // residual rows rotated: HD/8 lanes per (head, token) row
    constexpr int LR = HD / 8, RPB = kQThreads / LR;
    const int li = threadIdx.x & (LR - 1);
    const unsigned mask = row_lanes_mask<HD>(threadIdx.x & 31);
    const int64_t rows = static_cast<int64_t>(c.Hkv) * n;
    for (int64_t r0 = 0; r0 < rows; r0 += RPB) {
      const int64_t rr = r0 + threadIdx.x / LR, r = rr < rows ? rr : rows - 1;  // clamped rows keep every lane in the shuffles
      const int h = static_cast<int>(r / n);
      const int64_t t = first + r % n;
      const int64_t dst = ((static_cast<int64_t>(b) * c.Hkv + h) * kResidual + (t - nb)) * HD;
      copy_row<HD>(c.kr + dst, row(k, h, t), rot, false, h, li, mask, rr < rows);  // clamped duplicates write nothing
      copy_row<HD>(c.vr + dst, row(v, h, t), rot, true, h, li, mask, rr < rows);
    }
    return;
  }
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
template <int HD, int BITS, bool ROT>
__global__ void __launch_bounds__(kQThreads) append_kernel(OmniView c, RotArgs rot, const uint16_t* __restrict__ k,
                                                           const uint16_t* __restrict__ v, const int32_t* __restrict__ lens) {
  __shared__ QuantSmem<HD> sm;
  extern __shared__ __align__(16) uint16_t stage[];  // rot.kind != 0: this sub-block's rows [Hkv * 32][HD], K then V
  const int b = blockIdx.x, sub = blockIdx.y;
  const int64_t t = lens[b];
  if (t < 0 || t >= c.cap + kResidual - 1) return;  // host checked the bound
  const int slot = static_cast<int>(t % kResidual);
  auto res = [&](uint16_t* x, int h, int s) { return x + ((static_cast<int64_t>(b) * c.Hkv + h) * kResidual + s) * HD; };
  auto in = [&](const uint16_t* x, int h) { return x + (static_cast<int64_t>(b) * c.Hkv + h) * HD; };
  if (slot != kResidual - 1) {
    if (sub != 0) return;
    if constexpr (ROT) {  // the new token rotated into its residual slot: HD/8 lanes per head row
      constexpr int LR = HD / 8, RPB = kQThreads / LR;
      const int li = threadIdx.x & (LR - 1);
      const unsigned mask = row_lanes_mask<HD>(threadIdx.x & 31);
      for (int r0 = 0; r0 < c.Hkv; r0 += RPB) {
        const int rr = r0 + static_cast<int>(threadIdx.x) / LR, h = rr < c.Hkv ? rr : c.Hkv - 1;
        copy_row<HD>(res(c.kr, h, slot), in(k, h), rot, false, h, li, mask, rr < c.Hkv);
        copy_row<HD>(res(c.vr, h, slot), in(v, h), rot, true, h, li, mask, rr < c.Hkv);
      }
      return;
    }
    constexpr int P16 = HD / 8;
    for (int p = threadIdx.x; p < c.Hkv * P16; p += kQThreads) {
      const int h = p / P16, piece = p % P16;
      reinterpret_cast<uint4*>(res(c.kr, h, slot))[piece] = reinterpret_cast<const uint4*>(in(k, h))[piece];
      reinterpret_cast<uint4*>(res(c.vr, h, slot))[piece] = reinterpret_cast<const uint4*>(in(v, h))[piece];
    }
    return;
  }
  const int64_t t0 = t - (kResidual - 1) + sub * kKeyBlock;
  auto src_k = [&](int h, int i) -> const uint16_t* { const int s = sub * kKeyBlock + i; return s == kResidual - 1 ? in(k, h) : res(c.kr, h, s); };
  auto src_v = [&](int h, int i) -> const uint16_t* { const int s = sub * kKeyBlock + i; return s == kResidual - 1 ? in(v, h) : res(c.vr, h, s); };
  if constexpr (!ROT) {
    quantize_block32<HD, BITS>(c, b, t0, src_k, src_v, sm);
    return;
  } else {
  // Rotated: the residual rows are stored rotated already; only the new token (slot 127) is rotated here.
  auto staged = [&](int h, int i) -> const uint16_t* { return stage + (static_cast<int64_t>(h) * kKeyBlock + i) * HD; };
  auto is_new = [&](int, int i) { return sub * kKeyBlock + i == kResidual - 1; };
  stage_rows<HD>(stage, rot, false, c.Hkv, src_k, is_new);
  __syncthreads();
  quantize_keys32<HD, BITS>(c, b, t0, staged, sm);  // ends with a barrier
  stage_rows<HD>(stage, rot, true, c.Hkv, src_v, is_new);
  __syncthreads();
  quantize_values32<HD, BITS>(c, b, t0, staged);
  }
}

}  // namespace

// Dynamic shared memory of a rotated launch (the staged rows of one 32-token block, K or V), checked against
// the device's opt-in limit; 0 without rotation.
template <int HD, int BITS, class Kernel>
oscar_status rotated_stage(Kernel kernel, const OmniView& c, const RotArgs& rot, size_t& bytes, oscar_error* err, const char* fn) {
  bytes = 0;
  if (!rot.kind) return OSCAR_OK;
  bytes = static_cast<size_t>(c.Hkv) * kKeyBlock * HD * 2;
  int dev = 0, optin = 0;
  OSCAR_CUDA_TRY(cudaGetDevice(&dev), err, fn);
  OSCAR_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), err, fn);
  const size_t limit = static_cast<size_t>(optin) - sizeof(QuantSmem<HD>);
  if (bytes > limit)
    return api::fail(err, OSCAR_ERR_UNSUPPORTED,
                     "%s: num_kv_heads=%d x head_dim=%d: the in-kernel rotation stages %zu bytes per block, the device allows %zu; "
                     "rotate on the host and call it without a rotation",
                     fn, c.Hkv, HD, bytes, limit);
  OSCAR_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), err, fn);
  return OSCAR_OK;
}

template <int HD, int BITS>
oscar_status omni_prefill(const OmniView& c, const WriteArgs& w, const Launch& l) {
  size_t smem = 0;
  if (const oscar_status st = rotated_stage<HD, BITS>(prefill_kernel<HD, BITS, true>, c, w.rot, smem, l.err, l.fn); st != OSCAR_OK) return st;
  const unsigned blocks = static_cast<unsigned>(static_cast<int64_t>(c.B) * ((w.max_len + kKeyBlock - 1) / kKeyBlock));  // < 2^31 (API)
  if (w.rot.kind) prefill_kernel<HD, BITS, true><<<blocks, kQThreads, smem, l.stream>>>(c, w.rot, w.k, w.v, w.lens, w.max_len);
  else prefill_kernel<HD, BITS, false><<<blocks, kQThreads, 0, l.stream>>>(c, w.rot, w.k, w.v, w.lens, w.max_len);
  return api::check_launch(l.err, l.fn);
}

template <int HD, int BITS>
oscar_status omni_append(const OmniView& c, const WriteArgs& w, const Launch& l) {
  size_t smem = 0;
  if (const oscar_status st = rotated_stage<HD, BITS>(append_kernel<HD, BITS, true>, c, w.rot, smem, l.err, l.fn); st != OSCAR_OK) return st;
  const dim3 grid(static_cast<unsigned>(c.B), kResidual / kKeyBlock);
  if (w.rot.kind) append_kernel<HD, BITS, true><<<grid, kQThreads, smem, l.stream>>>(c, w.rot, w.k, w.v, w.lens);
  else append_kernel<HD, BITS, false><<<grid, kQThreads, 0, l.stream>>>(c, w.rot, w.k, w.v, w.lens);
  return api::check_launch(l.err, l.fn);
}

#define OSCAR_OMNI_QUANTIZE_INSTANCE(HD, BITS) OSCAR_WRITE_ENTRIES_AT(omni, OmniView, HD, BITS)
OSCAR_KV_SHAPES(OSCAR_OMNI_QUANTIZE_INSTANCE)

}  // namespace oscar::kernels
