// gguf_dequant.h: ggml tensor types (ids, block sizes, bytes per row) and dequantization of rows to
// float32 or bfloat16. Dequantizes F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K
// bit-exactly as gguf-py does (tested), by ggml's reference operations in their order; every other
// type is refused by name and number.
#pragma once
#include <bit>
#include <cstdint>
#include <string>

namespace oscar {

// ggml's type ids as stored in a GGUF tensor info (ggml.h's enum ggml_type). Listed: every id whose
// block layout this file knows (so tensors of these types can be sized and validated); only the
// types for which ggml_type_dequantizable() is true can be converted.
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30, TQ1_0 = 34, TQ2_0 = 35,
  MXFP4 = 39,
};

// "Q4_K", or "unknown" for an id not listed above.
const char* ggml_type_name(uint32_t type);
// True when the block layout of `type` is known (values per block and bytes per block below).
bool ggml_type_known(uint32_t type);
// True for the eleven types dequantize() converts.
bool ggml_type_dequantizable(uint32_t type);
// "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K": for error messages.
std::string ggml_dequantizable_types();
// Values per block (1 for plain types, 32 for Q*_0/Q*_1, 256 for K-quants) and bytes per block.
// Throw Error for an unknown type.
int64_t ggml_block_size(uint32_t type);
int64_t ggml_block_bytes(uint32_t type);
// Bytes that `n` consecutive values of `type` occupy; throws Error when n is not a multiple of the
// block size.
int64_t ggml_row_bytes(uint32_t type, int64_t n);

// Converts `n` consecutive values stored as `type` at `src` (any alignment) into dst[0..n).
// n must be a multiple of the type's block size. Throws Error (naming the type, its id and the
// supported types) when the type cannot be dequantized. No allocation; single-threaded.
void dequantize(GgmlType type, const void* src, float* dst, int64_t n);
// The same into bfloat16 (round to nearest even, as uint16_t bit patterns).
void dequantize_bf16(GgmlType type, const void* src, uint16_t* dst, int64_t n);

// IEEE half and bfloat16 bit patterns to float32 (exact), and float32 to bfloat16 (round to nearest
// even; NaN stays NaN).
inline float fp16_to_fp32(uint16_t h) {
  // Branch-free (the F16 row loop vectorises): all three cases computed, one selected.
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7FFFu;                             // exponent and mantissa
  const uint32_t normal = (em << 13) + (112u << 23);           // rebias the exponent from 15 to 127
  const uint32_t inf_nan = (em << 13) + (224u << 23);          // exponent 31 -> 255, payload kept
  const uint32_t subnormal = std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f);  // exact
  const uint32_t mag = em >= 0x7C00u ? inf_nan : (em >= 0x0400u ? normal : subnormal);
  return std::bit_cast<float>(sign | mag);
}
inline float bf16_to_fp32(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}
uint16_t fp32_to_bf16(float f);

}  // namespace oscar
