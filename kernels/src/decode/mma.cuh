// decode/mma.cuh: register-level pieces of every decode kernel: tensor-core MMA wrappers, byte permutes,
// magic-number dequantization of packed codes into 16-bit float pairs, bf16/fp16 packing and cp.async.
// Device-only, internal linkage (included by .cu files).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "decode/levers.h"

namespace oscar::kernels {
namespace {

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
// (a & MASK) | magic in one LOP3. Written as `(x & m) | c` with two immediates, the compiler emits two LOP3s
// (a SASS LOP3 takes one immediate); one lop3.b32 of PTX leaves ptxas one immediate and the other constant in a register
// (materialized once, outside the loops), as Marlin's dequantization does.
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t mask, uint32_t magic) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "r"(mask), "r"(magic));  // 0xEA: (a & b) | c
  return r;
}
// The pair (code i, code i + 16/BITS) of w as the 16-bit float pair MAGIC + code * 2^(BITS*pos) of a format with
// MANT mantissa bits (the struct comment above).
template <int BITS, int MANT, uint32_t MAGIC>
__device__ __forceinline__ uint32_t codes_x2(uint32_t w, int i) {
  using M = MagicPos<BITS, MANT>;
  constexpr uint32_t mask = BITS == 2 ? 0x00030003u : 0x000F000Fu;
#if OSCAR_LEVER_LOP3
  return and_or(w >> M::shift(i), mask << (BITS * M::pos(i)), MAGIC);
#else
  return ((w >> M::shift(i)) & (mask << (BITS * M::pos(i)))) | MAGIC;
#endif
}
template <int BITS>
__device__ __forceinline__ uint32_t codes_f16x2(uint32_t w, int i) {  // value 1024 + code * 2^(BITS*pos)
  return codes_x2<BITS, 10, 0x64006400u>(w, i);
}
template <int BITS>
__device__ __forceinline__ uint32_t codes_bf16x2(uint32_t w, int i) {  // value 128 + code * 2^(BITS*pos)
  return codes_x2<BITS, 7, 0x43004300u>(w, i);
}

__device__ __forceinline__ uint32_t pack_bf16(float a, float b) {
  __nv_bfloat162 r = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&r);
}
__device__ __forceinline__ uint32_t pack_f16(float a, float b) {
  __half2 r = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&r);
}
__device__ __forceinline__ float bf16f(uint16_t x) { return __uint_as_float(static_cast<uint32_t>(x) << 16); }
__device__ __forceinline__ float half_lo(uint32_t x) { return __half2float(__ushort_as_half(static_cast<uint16_t>(x))); }
__device__ __forceinline__ float half_hi(uint32_t x) { return __half2float(__ushort_as_half(static_cast<uint16_t>(x >> 16))); }
__device__ __forceinline__ void bf16x8_to_float(const uint4 v, float (&x)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = __uint_as_float(w[i] << 16);
    x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// cp.async helpers (per-warp pipeline: each lane waits for its own groups, then __syncwarp).
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_async8(void* dst, const void* src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Loads W consecutive 32-bit words (W in {1, 2, 4, 8}; the address aligned to 4 W bytes), or, for
// HALF = true, one 16-bit half into word 0 (the rest zero).
template <int W, bool HALF = false>
__device__ __forceinline__ void load_words(const void* src, uint32_t (&w)[W]) {
  if constexpr (HALF) {
    w[0] = *reinterpret_cast<const uint16_t*>(src);
#pragma unroll
    for (int i = 1; i < W; ++i) w[i] = 0u;
  } else if constexpr (W == 1) {
    w[0] = *reinterpret_cast<const uint32_t*>(src);
  } else if constexpr (W == 2) {
    const uint2 x = *reinterpret_cast<const uint2*>(src);
    w[0] = x.x; w[1] = x.y;
  } else {
#pragma unroll
    for (int i = 0; i < W / 4; ++i) {
      const uint4 x = reinterpret_cast<const uint4*>(src)[i];
      w[4 * i] = x.x; w[4 * i + 1] = x.y; w[4 * i + 2] = x.z; w[4 * i + 3] = x.w;
    }
  }
}

}  // namespace
}  // namespace oscar::kernels
