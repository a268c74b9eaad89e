// decode_common.cuh: pieces shared by the quantized-cache kernels (cov_cache.cu: oscar-cov; omni_cache.cu:
// oscar-omni) and the BF16 baseline: tensor-core MMA wrappers, magic-number dequantization, the per-warp
// online-softmax state, BF16 tiles, cp.async helpers, the block combine, the exact split merge and the
// split planner. Head_dim 128 (kHD) is the compiled size. Included by .cu files only (internal linkage).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "api_util.h"
#include "oscar/cov_format.h"
#include "oscar/quant_rules.h"
#include "oscar_kv.h"

namespace oscar::kernels {
namespace {

// Tuning knobs (defaults chosen on the H100 in a same-session A/B, BENCHMARKS.md 2026-11-23 "pipelined"):
// decode blocks per SM the register allocation must allow (3: 148-152 registers, no spills; 4 forced
// ~150 B of spills and was slower at every large shape), two independent accumulator chains for the 8 QK
// MMAs, tokens per warp chunk on the packed INT2 / INT4 body, cp.async stages per warp, the block slots
// per SM the split plan fills (= the min-blocks value), and the least body splits per (b, h).
#ifndef OSCAR_KV_MIN_BLOCKS_INT2
#define OSCAR_KV_MIN_BLOCKS_INT2 3
#endif
#ifndef OSCAR_KV_MIN_BLOCKS_INT4
#define OSCAR_KV_MIN_BLOCKS_INT4 3
#endif
#ifndef OSCAR_KV_QK_SPLIT
#define OSCAR_KV_QK_SPLIT 1
#endif
#ifndef OSCAR_KV_INT_CHUNK
#define OSCAR_KV_INT_CHUNK 64
#endif
#ifndef OSCAR_KV_INT4_CHUNK
#define OSCAR_KV_INT4_CHUNK 32
#endif
#ifndef OSCAR_KV_STAGES
#define OSCAR_KV_STAGES 3
#endif
#ifndef OSCAR_KV_SLOTS_PER_SM
#define OSCAR_KV_SLOTS_PER_SM 3
#endif
#ifndef OSCAR_KV_MIN_BODY_SPLITS
#define OSCAR_KV_MIN_BODY_SPLITS 4
#endif
constexpr int kHD = 128;     // the compiled head_dim
constexpr int kWarps = 4;    // warps per decode block
static_assert(kWarps * 32 == 128, "block_partial maps one thread to one channel of head_dim 128");
constexpr int kQSlots = 8;   // query slots per KV head (mma N)
template <int BITS>
constexpr int int_chunk_len() { return BITS == 2 ? OSCAR_KV_INT_CHUNK : OSCAR_KV_INT4_CHUNK; }
constexpr int kStages = OSCAR_KV_STAGES;       // cp.async stages per warp (each one chunk of codes + params)
constexpr int kBf16Chunk = 16;
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }


__device__ __forceinline__ void bf16x8_to_float(const uint4 v, float (&x)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = __uint_as_float(w[i] << 16);
    x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}


// ---------------------------------------------------------------------------------------------
// Decode attention.
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}
// Magic-number dequantization without a subtraction: the pair (code i, code i + 16/BITS) of word w
// becomes the 16-bit float pair (MAGIC + code * 2^(BITS*pos)), pos = i % NP, where NP codes fit in the
// mantissa at once (fp16: 10 bits, bf16: 7 bits), so only every NP-th pair needs a shift: one LOP3 per
// pair. The kernels remove MAGIC * sum(other operand) after the MMA and the 2^(BITS*pos) factor by
// pre-scaling the query (QK) or post-scaling the output channel (PV), both exact powers of two.
template <int BITS, int MANT>
struct MagicPos {
  static constexpr int NP = (MANT - BITS) / BITS + 1;
  static constexpr int shift(int i) { return (i / NP) * NP * BITS; }
  static constexpr int pos(int i) { return i % NP; }
};
// The middle of the code range, (2^BITS - 1) / 2: the value-path accumulators are kept centred on it.
template <int BITS>
__host__ __device__ constexpr float mid_code() { return 0.5f * static_cast<float>((1 << BITS) - 1); }
template <int BITS>
__device__ __forceinline__ uint32_t codes_f16x2(uint32_t w, int i) {  // value 1024 + code * 2^(BITS*pos)
  using M = MagicPos<BITS, 10>;
  constexpr uint32_t mask = BITS == 2 ? 0x00030003u : 0x000F000Fu;
  return ((w >> M::shift(i)) & (mask << (BITS * M::pos(i)))) | 0x64006400u;
}
template <int BITS>
__device__ __forceinline__ uint32_t codes_bf16x2(uint32_t w, int i) {  // value 128 + code * 2^(BITS*pos)
  using M = MagicPos<BITS, 7>;
  constexpr uint32_t mask = BITS == 2 ? 0x00030003u : 0x000F000Fu;
  return ((w >> M::shift(i)) & (mask << (BITS * M::pos(i)))) | 0x43004300u;
}
__device__ __forceinline__ uint32_t pack_bf16(float a, float b) {
  __nv_bfloat162 r = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&r);
}
__device__ __forceinline__ float bf16f(uint16_t x) { return __uint_as_float(static_cast<uint32_t>(x) << 16); }
__device__ __forceinline__ float half_lo(uint32_t x) { return __half2float(__ushort_as_half(static_cast<uint16_t>(x))); }
__device__ __forceinline__ float half_hi(uint32_t x) { return __half2float(__ushort_as_half(static_cast<uint16_t>(x >> 16))); }

// One warp's online-softmax state for query slots 2t, 2t+1 (t = lane & 3).
struct WarpState {
  float acc[8][4];  // [m-tile][c0..c3]: (channel 16g+mt, q 2t), (.., q 2t+1), (16g+8+mt, q 2t), (.., 2t+1)
  float m[2], l[2];
  float ex[4][2];  // per-format sums rescaled with the state (oscar-cov: zero-point sum, P' sum; oscar-omni: zero-point sums per 32-channel group)
  float off[2];    // oscar-omni: the mid-code offset taken out of acc chunk by chunk (full sums, this thread's value group)
};

__device__ __forceinline__ void state_init(WarpState& st) {
#pragma unroll
  for (int mt = 0; mt < 8; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) st.acc[mt][i] = 0.f;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    st.m[j] = -INFINITY;
    st.l[j] = 0.f;
#pragma unroll
    for (int e = 0; e < 4; ++e) st.ex[e][j] = 0.f;
    st.off[j] = 0.f;
  }
}

// s[u][i] in log2 units (masked = -inf, at least one finite): rescale the state to the new max and
// turn s into probabilities.
template <int SUB>
__device__ __forceinline__ void softmax_step(WarpState& st, float (&s)[SUB][4]) {
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    float mx = -INFINITY;
#pragma unroll
    for (int u = 0; u < SUB; ++u) mx = fmaxf(mx, fmaxf(s[u][j], s[u][2 + j]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
    const float mnew = fmaxf(st.m[j], mx);
    const float alpha = exp2f(st.m[j] - mnew);  // m = -inf -> 0
    st.m[j] = mnew;
    st.l[j] *= alpha;
#pragma unroll
    for (int e = 0; e < 4; ++e) st.ex[e][j] *= alpha;
    st.off[j] *= alpha;
#pragma unroll
    for (int mt = 0; mt < 8; ++mt) { st.acc[mt][j] *= alpha; st.acc[mt][2 + j] *= alpha; }
#pragma unroll
    for (int u = 0; u < SUB; ++u) {
      s[u][j] = exp2f(s[u][j] - mnew);
      s[u][2 + j] = exp2f(s[u][2 + j] - mnew);
      st.l[j] += s[u][j] + s[u][2 + j];
    }
  }
}

__device__ __forceinline__ uint32_t pack_f16(float a, float b) {
  __half2 r = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&r);
}
// P' (C layout, tokens g / g+8, queries 2t, 2t+1) -> B fragment (tokens 2t.. / 2t+8.., query g), as bf16
// pairs (F16 = false) or fp16 pairs (F16 = true).
template <bool F16 = false>
__device__ __forceinline__ void p_to_bfrag(uint16_t* ps, int g, int t, float p00, float p01, float p10, float p11,
                                           uint32_t (&b)[2]) {
  __syncwarp();
  uint32_t* row = reinterpret_cast<uint32_t*>(ps);
  row[g * 4 + t] = F16 ? pack_f16(p00, p01) : pack_bf16(p00, p01);        // ps[g][2t], ps[g][2t+1]
  row[(g + 8) * 4 + t] = F16 ? pack_f16(p10, p11) : pack_bf16(p10, p11);  // ps[g+8][2t..]
  __syncwarp();
  b[0] = static_cast<uint32_t>(ps[(2 * t) * 8 + g]) | (static_cast<uint32_t>(ps[(2 * t + 1) * 8 + g]) << 16);
  b[1] = static_cast<uint32_t>(ps[(2 * t + 8) * 8 + g]) | (static_cast<uint32_t>(ps[(2 * t + 9) * 8 + g]) << 16);
}

// PV A fragments from packed value codes. A thread holds, for its four tokens 2t, 2t+1, 2t+8, 2t+9 of a
// 16-token tile (rows r = 0..3 of vw), VW words of codes of channels 16g .. 16g + 15; pairing the tokens
// (2t, 2t+1) and (2t+8, 2t+9) per 16-bit half gives words whose halves hold one channel of two tokens.
template <int VW>
__device__ __forceinline__ void pair_tokens(const uint32_t (&vw)[4][VW], uint32_t (&lo)[2][VW], uint32_t (&hi)[2][VW]) {
#pragma unroll
  for (int pr = 0; pr < 2; ++pr)
#pragma unroll
    for (int w = 0; w < VW; ++w) {
      lo[pr][w] = prmt(vw[2 * pr][w], vw[2 * pr + 1][w], 0x5410);
      hi[pr][w] = prmt(vw[2 * pr][w], vw[2 * pr + 1][w], 0x7632);
    }
}
// Register k of m-tile mt's A fragment (channel 16g + mt + 8 (k & 1), token pair k >> 1): the paired word
// holding it, and the code index within that word's 16-bit halves (the argument of codes_bf16x2).
template <int BITS, int VW>
__device__ __forceinline__ uint32_t v_pair_word(const uint32_t (&lo)[2][VW], const uint32_t (&hi)[2][VW], int mt, int k) {
  constexpr int PW = 16 / BITS;
  const int pr = k >> 1, sigma = mt + 8 * (k & 1);
  const int w = sigma / (32 / BITS), cidx = sigma % (32 / BITS);
  return cidx / PW ? hi[pr][w] : lo[pr][w];
}
template <int BITS>
__host__ __device__ constexpr int v_pair_code(int mt, int k) { return (mt + 8 * (k & 1)) % (32 / BITS) % (16 / BITS); }

// cp.async helpers (per-warp pipeline: each lane waits for its own groups, then __syncwarp).
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// BF16 tile: 16 logical tokens [base, base + n) (n in [1, 16]); row(i) gives the row index of
// logical token i into kb/vb (rows of kHD bf16).
template <class RowFn>
__device__ __forceinline__ void bf16_tile(WarpState& st, const uint16_t* __restrict__ kb, const uint16_t* __restrict__ vb,
                                          RowFn row, int n, const uint32_t (&qb)[8][2], float sl2, uint16_t* ps,
                                          int g, int t) {
  uint4 kx[2][4], vx[4][2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint4* src = reinterpret_cast<const uint4*>(kb + row(min(g + 8 * r, n - 1)) * kHD) + t * 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) kx[r][i] = src[i];
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const uint4* src = reinterpret_cast<const uint4*>(vb + row(min(2 * t + (r & 1) + 8 * (r >> 1), n - 1)) * kHD) + g * 2;
    vx[r][0] = src[0];
    vx[r][1] = src[1];
  }
  float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int ks = 0; ks < 8; ++ks) {
    const uint32_t* k0 = reinterpret_cast<const uint32_t*>(&kx[0][0]);
    const uint32_t* k1 = reinterpret_cast<const uint32_t*>(&kx[1][0]);
    const uint32_t a[4] = {k0[2 * ks], k1[2 * ks], k0[2 * ks + 1], k1[2 * ks + 1]};
    mma_bf16(c, a, qb[ks]);
  }
  float s[1][4];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int j = 0; j < 2; ++j) s[0][2 * r + j] = (g + 8 * r < n) ? c[2 * r + j] * sl2 : -INFINITY;
  softmax_step<1>(st, s);
  uint32_t b[2];
  p_to_bfrag(ps, g, t, s[0][0], s[0][1], s[0][2], s[0][3], b);
#pragma unroll
  for (int mt = 0; mt < 8; ++mt) {
    uint32_t a[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int pr = k >> 1, sigma = mt + 8 * (k & 1);
      const uint32_t* wa = reinterpret_cast<const uint32_t*>(&vx[2 * pr][0]);
      const uint32_t* wb = reinterpret_cast<const uint32_t*>(&vx[2 * pr + 1][0]);
      a[k] = prmt(wa[sigma / 2], wb[sigma / 2], (sigma & 1) ? 0x7632 : 0x5410);
    }
    mma_bf16(st.acc[mt], a, b);
  }
}

struct DecodeArgs {
  const uint16_t* q;
  const int32_t* lens;
  int Hq, Hkv, G;
  int nsplit;       // body splits (quantized) or splits (bf16)
  int nwin;         // quantized: blocks sharing the BF16 sink + recent windows (parts nsplit .. nsplit+nwin-1)
  int64_t split_len;
  float sl2;
  float* part_o;   // [BH][np][8][kHD]
  float* part_ml;  // [BH][np][8][2]
  int np;
};
__device__ __forceinline__ void load_q_bf16(const uint16_t* qrow, bool live, int t, uint32_t (&qb)[8][2]) {
#pragma unroll
  for (int ks = 0; ks < 8; ++ks)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int ch = 32 * t + 4 * ks + 2 * h;
      qb[ks][h] = live ? (static_cast<uint32_t>(qrow[ch]) | (static_cast<uint32_t>(qrow[ch + 1]) << 16)) : 0u;
    }
}
struct CombineSmem {
  float o[kWarps][kQSlots][kHD];
  float m[kWarps][kQSlots], l[kWarps][kQSlots];
};

// Sum over the 8 lanes g of a quad position t (the token rows of a warp's fragments).
__device__ __forceinline__ float sum_over_g(float x) {
#pragma unroll
  for (int o = 4; o < 32; o <<= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Combines the block's warps exactly and writes one partial per (split, query slot). `fin(mt, j, acc)`
// turns the thread's accumulator value of m-tile mt, query slot 2t + j into the output channel value
// (PV bias / channel scale / zero point of the format); st.l must be summed over g by the caller.
template <class Fin>
__device__ __forceinline__ void block_partial(const WarpState& st, Fin fin, const DecodeArgs& a, int64_t bh, int part,
                                              CombineSmem& sm, int warp, int g, int t) {
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int qs = 2 * t + j;
#pragma unroll
    for (int mt = 0; mt < 8; ++mt) {
      sm.o[warp][qs][16 * g + mt] = fin(mt, j, st.acc[mt][j]);
      sm.o[warp][qs][16 * g + 8 + mt] = fin(mt, j, st.acc[mt][2 + j]);
    }
    if (g == 0) { sm.m[warp][qs] = st.m[j]; sm.l[warp][qs] = st.l[j]; }
  }
  __syncthreads();
  const int ch = threadIdx.x;  // kWarps * 32 == kHD threads
  for (int qs = 0; qs < a.G; ++qs) {
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm.m[w][qs]);
    float o = 0.f, l = 0.f;
    if (M != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float e = exp2f(sm.m[w][qs] - M);
        o += e * sm.o[w][qs][ch];
        l += e * sm.l[w][qs];
      }
    }
    const int64_t i = (bh * a.np + part) * kQSlots + qs;
    a.part_o[i * kHD + ch] = o;
    if (ch == 0) { a.part_ml[i * 2] = M; a.part_ml[i * 2 + 1] = l; }
  }
}

// Partial of a block that only saw BF16 tiles (no format-specific terms).
__device__ __forceinline__ void block_partial_bf16(WarpState st, const DecodeArgs& a, int64_t bh, int part, CombineSmem& sm,
                                                   int warp, int g, int t) {
  st.l[0] = sum_over_g(st.l[0]);
  st.l[1] = sum_over_g(st.l[1]);
  block_partial(st, [](int, int, float v) { return v; }, a, bh, part, sm, warp, g, t);
}

// Merge: one block of kHD threads per (b, query head). Launched with programmatic dependent launch:
// griddepcontrol.wait returns once the decode grid has finished and its writes are visible.
__global__ void __launch_bounds__(kHD) merge_kernel(DecodeArgs a, float* __restrict__ out) {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  __shared__ float red[kHD / 32];
  const int64_t bq = blockIdx.x;
  const int b = static_cast<int>(bq / a.Hq), hq = static_cast<int>(bq % a.Hq);
  const int64_t bh = static_cast<int64_t>(b) * a.Hkv + hq / a.G;
  const int qs = hq % a.G;
  const float* ml = a.part_ml + (bh * a.np * kQSlots + qs) * 2;  // part p: ml[p * kQSlots * 2 + {0, 1}]
  const float* po = a.part_o + (bh * a.np * kQSlots + qs) * kHD + threadIdx.x;
  float M = -INFINITY;
  for (int p = threadIdx.x; p < a.np; p += kHD) M = fmaxf(M, ml[p * kQSlots * 2]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = M;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kHD / 32; ++w) M = fmaxf(M, red[w]);
  float num = 0.f, den = 0.f;
  if (M != -INFINITY) {
#pragma unroll 16
    for (int p = 0; p < a.np; ++p) {
      const float w = exp2f(ml[p * kQSlots * 2] - M);
      den += w * ml[p * kQSlots * 2 + 1];
      num += w * po[static_cast<int64_t>(p) * kQSlots * kHD];
    }
  }
  out[bq * kHD + threadIdx.x] = den > 0.f ? num / den : 0.f;
}

int sm_count() {
  int dev = 0, n = 132;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    cudaGetLastError();
    n = 132;
  }
  return n;
}

// Split plan: enough blocks for ~4 per SM, each split at least `min_len` tokens.
void plan_splits(int64_t bh, int64_t tokens, int64_t granule, int& nsplit, int64_t& split_len) {
  const int64_t target = 4LL * sm_count();
  int64_t ns = (target + bh - 1) / bh;
  const int64_t by_len = (tokens + granule - 1) / granule;
  ns = ns < by_len ? ns : by_len;
  if (ns < 1) ns = 1;
  int64_t len = (tokens + ns - 1) / ns;
  len = (len + granule - 1) / granule * granule;
  if (len < granule) len = granule;
  split_len = len;
  nsplit = static_cast<int>(tokens > 0 ? (tokens + len - 1) / len : 1);
}

int64_t body_max(int64_t max_len, int S, int W) { return covfmt::body_tokens(max_len, S, W); }

// Quantized plan: all blocks of one step in about one wave of OSCAR_KV_SLOTS_PER_SM blocks per SM
// (no half-empty second wave), at least OSCAR_KV_MIN_BODY_SPLITS body splits per (b, h), body splits
// multiples of kWarps * 64 tokens (every warp the same number of chunks); at small batch the BF16
// windows are shared by up to 4 blocks so that they do not become the longest block.
constexpr int kQuantGranule = kWarps * 64;     // oscar-cov body split granule (tokens)
constexpr int kOmniGranule = kWarps * 32;      // oscar-omni body split granule (= its residual block)
constexpr int kMaxWin = 4;
int64_t quant_split_cap(int64_t bh) {
  const int64_t slots = static_cast<int64_t>(OSCAR_KV_SLOTS_PER_SM) * sm_count();
  const int64_t c = slots / bh;
  return c > OSCAR_KV_MIN_BODY_SPLITS ? c : OSCAR_KV_MIN_BODY_SPLITS;
}
void plan_quant(int64_t bh, int64_t body, int64_t win, int64_t granule, int& nsplit, int64_t& split_len, int& nwin) {
  const int64_t slots = static_cast<int64_t>(OSCAR_KV_SLOTS_PER_SM) * sm_count();
  int64_t nw = 1;
  if (bh * 16 <= slots) {
    nw = (win + kWarps * 16 - 1) / (kWarps * 16);
    nw = nw < 1 ? 1 : (nw > kMaxWin ? kMaxWin : nw);
  }
  int64_t ns = (slots - nw * bh) / bh;
  if (ns < OSCAR_KV_MIN_BODY_SPLITS) ns = OSCAR_KV_MIN_BODY_SPLITS;
  const int64_t by_len = (body + granule - 1) / granule;
  ns = ns < by_len ? ns : by_len;
  if (ns < 1) ns = 1;
  int64_t len = (body + ns - 1) / ns;
  len = (len + granule - 1) / granule * granule;
  if (len < granule) len = granule;
  split_len = len;
  nsplit = static_cast<int>(body > 0 ? (body + len - 1) / len : 1);
  nwin = static_cast<int>(nw);
}

size_t decode_workspace(int64_t bh, int np) { return static_cast<size_t>(bh) * np * kQSlots * (kHD + 2) * sizeof(float); }

// Upper bound of the parts of any quantized plan (oscar-cov or oscar-omni, any windows): body splits
// <= the split cap and <= ceil(max_len / smallest granule), windows <= kMaxWin.
int quant_parts_bound(int batch, int kv_heads, int32_t max_len) {
  const int64_t bh = static_cast<int64_t>(batch) * kv_heads;
  int64_t ns = quant_split_cap(bh);
  int64_t by_len = (static_cast<int64_t>(max_len) + kOmniGranule - 1) / kOmniGranule;
  if (by_len < 1) by_len = 1;
  ns = ns < by_len ? ns : by_len;
  return static_cast<int>(ns + kMaxWin);
}

// Checks shared by the prefill and append entry points of both formats: the bf16 K/V inputs and the
// lengths (`what`: "k, v" or "k_new, v_new"), and, for append, that one more token fits.
oscar_status check_write_args(const char* fn, const char* what, const void* k, const void* v, const int32_t* lens, oscar_error* err) {
  if (!k || !v || !lens) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: %s or seq_lens is NULL", fn, what);
  if (!api::aligned(k, 16) || !api::aligned(v, 16) || !api::aligned(lens, 4))
    return api::fail(err, OSCAR_ERR_MISALIGNED, "%s: %s must be 16-byte aligned and seq_lens 4-byte aligned", fn, what);
  return OSCAR_OK;
}
oscar_status check_append_len(const char* fn, int32_t max_seq_len, int64_t capacity, oscar_error* err) {
  if (max_seq_len < 0 || static_cast<int64_t>(max_seq_len) + 1 > capacity)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: max_seq_len=%d: appending would exceed the capacity %lld", fn, max_seq_len,
                     (long long)capacity);
  return OSCAR_OK;
}

// Checks shared by every decode entry point.
oscar_status check_decode_args(const char* fn, const void* q, int32_t hq, int32_t hkv, const int32_t* lens, int32_t max_len, int64_t capacity,
                                 float* out, void* ws, oscar_error* err) {
  if (!q || !lens || !out || !ws) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: q, seq_lens, out or workspace is NULL", fn);
  if (!api::aligned(q, 16) || !api::aligned(out, 16) || !api::aligned(ws, 16) || !api::aligned(lens, 4))
    return api::fail(err, OSCAR_ERR_MISALIGNED, "%s: q/out/workspace must be 16-byte aligned", fn);
  if (hq <= 0 || hkv <= 0 || hq % hkv != 0 || hq / hkv > 8)
    return api::fail(err, OSCAR_ERR_UNSUPPORTED, "%s: num_q_heads=%d num_kv_heads=%d unsupported (a multiple, at most 8 per KV head)",
                     fn, hq, hkv);
  if (max_len < 0) return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: max_seq_len=%d is negative", fn, max_len);
  if (max_len > capacity)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: max_seq_len=%d exceeds the cache capacity %lld", fn, max_len, (long long)capacity);
  return OSCAR_OK;
}

// Fills the per-call fields of a decode step whose plan (nsplit, split_len, nwin, np) is set, after
// checking the caller's workspace against it.
oscar_status finish_decode_args(DecodeArgs& a, const char* fn, const void* q, const int32_t* lens, int32_t hq, int32_t hkv, int64_t bh,
                                float softmax_scale, void* workspace, size_t workspace_bytes, oscar_error* err) {
  const size_t need = decode_workspace(bh, a.np);
  if (workspace_bytes < need)
    return api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: workspace_bytes=%zu < %zu needed", fn, workspace_bytes, need);
  a.q = static_cast<const uint16_t*>(q);
  a.lens = lens;
  a.Hq = hq; a.Hkv = hkv; a.G = hq / hkv;
  a.sl2 = softmax_scale * kLog2e;
  a.part_o = static_cast<float*>(workspace);
  a.part_ml = a.part_o + static_cast<size_t>(bh) * a.np * kQSlots * kHD;
  return OSCAR_OK;
}

// The merge of a decode step, launched with programmatic dependent launch right after the decode grid.
oscar_status launch_merge(const DecodeArgs& a, int batch, float* out, cudaStream_t s, oscar_error* err, const char* fn) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(static_cast<int64_t>(batch) * a.Hq));
  cfg.blockDim = dim3(kHD);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaLaunchKernelEx(&cfg, merge_kernel, a, out);
  return api::check_launch(err, fn);
}

}  // namespace
}  // namespace oscar::kernels
