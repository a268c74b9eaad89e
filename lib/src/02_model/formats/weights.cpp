// weights.cpp: WeightMatrix and the blocked dequantize + Eigen product. Each OpenMP thread owns one
// float32 scratch buffer (thread_local, grown up to linear_scratch_floats()); a block of rows is
// dequantized into it and multiplied by Eigen single-threaded (parallel_chunks' threads are not OpenMP's,
// and Eigen does not parallelise a product of this size: see linear_impl), so blocks run in parallel
// without sharing memory.
#include "oscar/02_model/formats/weights.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "oscar/01_core/error.h"
#include "oscar/01_core/parallel.h"

namespace oscar {

namespace {
// Per-thread scratch bound: 2 Mi floats (8 MiB) for many-token chunks, where larger blocks keep the
// GEMM efficient; decode steps use blocks of at most 32 Ki floats (128 KiB, within L2).
constexpr int64_t kScratchFloats = int64_t{1} << 21;
constexpr int64_t kDecodeBlockFloats = int64_t{1} << 15;
constexpr int kDecodeTokens = 16;  // chunks of up to this many tokens count as decode steps
#if defined(__AVX2__) && defined(__F16C__)
// fp16 at p to float32 by F16C (exact, as fp16_to_fp32; inlined).
inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}
// 8 unsigned bytes (the low 8 of v) as float32.
inline __m256 u8x8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

// Q8_0: q * d, 32 values per 34-byte block.
void rows_q8_0(const uint8_t* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 32, b += 34, y += 32) {
    const __m256 d = _mm256_set1_ps(half_at(b));
    for (int k = 0; k < 4; ++k) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * k));
      _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
    }
  }
}

// Q4_0 (d * (q - 8)) and Q4_1 (d * q + m): value j in the low nibble of byte j, j+16 in its high nibble.
template <bool WithMin>
void rows_q4(const uint8_t* b, float* y, int64_t n) {
  constexpr int bytes = WithMin ? 20 : 18, off = WithMin ? 4 : 2;
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m256i eight = _mm256_set1_epi32(8);
  for (int64_t i = 0; i < n; i += 32, b += bytes, y += 32) {
    const __m256 d = _mm256_set1_ps(half_at(b));
    const __m256 m = _mm256_set1_ps(WithMin ? half_at(b + 2) : 0.0f);
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + off));
    const __m128i nib[2] = {_mm_and_si128(qs, mask), _mm_and_si128(_mm_srli_epi16(qs, 4), mask)};
    for (int k = 0; k < 4; ++k) {
      const __m128i bytes8 = (k & 1) ? _mm_srli_si128(nib[k >> 1], 8) : nib[k >> 1];
      if constexpr (WithMin) {
        _mm256_storeu_ps(y + 8 * k, _mm256_add_ps(_mm256_mul_ps(d, u8x8_to_ps(bytes8)), m));
      } else {
        const __m256i q = _mm256_sub_epi32(_mm256_cvtepu8_epi32(bytes8), eight);
        _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(q)));
      }
    }
  }
}

void rows_f16(const uint8_t* b, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 * i))));
  for (; i < n; ++i) y[i] = half_at(b + 2 * i);
}
#endif

}  // namespace

void dequantize_fast(GgmlType type, const void* src, float* dst, int64_t n) {
#if defined(__AVX2__) && defined(__F16C__)
  const auto* b = static_cast<const uint8_t*>(src);
  if (n % 32 == 0) {
    switch (type) {
      case GgmlType::Q8_0: return rows_q8_0(b, dst, n);
      case GgmlType::Q4_0: return rows_q4<false>(b, dst, n);
      case GgmlType::Q4_1: return rows_q4<true>(b, dst, n);
      default: break;
    }
  }
  if (type == GgmlType::F16) return rows_f16(b, dst, n);
#endif
  dequantize(type, src, dst, n);
}

int64_t linear_scratch_floats() { return kScratchFloats; }

WeightMatrix WeightMatrix::f32(const float* data, int64_t rows, int64_t cols) {
  WeightMatrix w;
  w.f32_ = data;
  w.rows_ = rows;
  w.cols_ = cols;
  return w;
}

WeightMatrix WeightMatrix::gguf(const GgufTensor& t) {
  if (t.dims.size() != 2)
    fail("tensor '{}' has {} dimensions ({}); a weight matrix must have 2", t.name, t.dims.size(), t.shape_string());
  if (!ggml_type_dequantizable(t.type))
    fail("tensor '{}' is stored as {} (ggml type {}), which oscar-kv cannot dequantize; supported types: {}; use a "
         "file quantized to one of them",
         t.name, t.type_name(), t.type, ggml_dequantizable_types());
  WeightMatrix w;
  w.rows_ = t.dims[1];
  w.cols_ = t.dims[0];
  if (t.ggml_type() == GgmlType::F32 && reinterpret_cast<uintptr_t>(t.data) % alignof(float) == 0)
    w.f32_ = reinterpret_cast<const float*>(t.data);
  else
    w.tensor_ = &t;
  return w;
}

std::string WeightMatrix::type_name() const { return tensor_ ? tensor_->type_name() : "F32"; }

void WeightMatrix::rows_to_f32(int64_t r0, int64_t n, float* dst) const {
  if (r0 < 0 || n < 0 || r0 + n > rows_) fail("internal: rows {}..{} of a {}x{} weight matrix", r0, r0 + n, rows_, cols_);
  if (f32_) {
    std::memcpy(dst, f32_ + r0 * cols_, static_cast<size_t>(n * cols_) * sizeof(float));
    return;
  }
  const uint64_t rb = tensor_->row_bytes();
  const GgmlType type = tensor_->ggml_type();
  for (int64_t r = 0; r < n; ++r) dequantize_fast(type, tensor_->data + static_cast<uint64_t>(r0 + r) * rb, dst + r * cols_, cols_);
}

namespace {

template <bool Accumulate>
void linear_impl(const MatrixRM& x, const WeightMatrix& W, MatrixRM& out) {
  if (x.cols() != W.cols())
    fail("internal: linear of {} inputs through a {}x{} matrix ({})", x.cols(), W.rows(), W.cols(), W.type_name());
  if constexpr (Accumulate) {
    if (out.rows() != x.rows() || out.cols() != W.rows())
      fail("internal: linear_add into {}x{}, expected {}x{}", out.rows(), out.cols(), x.rows(), W.rows());
  }
  if (W.f32_data()) {
    if constexpr (Accumulate)
      out.noalias() += x * ConstMapRM(W.f32_data(), W.rows(), W.cols()).transpose();
    else
      out.noalias() = x * ConstMapRM(W.f32_data(), W.rows(), W.cols()).transpose();
    return;
  }
  const int64_t R = W.rows(), C = W.cols(), n = x.rows();
  if constexpr (!Accumulate) out.resize(n, R);
  if (n == 0 || R == 0) return;
  const int threads = parallel_threads();
  const int64_t cap_rows = std::max<int64_t>(1, (n <= kDecodeTokens ? kDecodeBlockFloats : kScratchFloats) / C);
  // At least 4 blocks per thread where the matrix allows (balance), rows a multiple of 8 (Eigen's panels).
  int64_t block = (R + 4 * threads - 1) / (4 * threads);
  block = std::min(cap_rows, (block + 7) / 8 * 8);
  block = std::max<int64_t>(1, std::min(block, R));
  const int64_t n_blocks = (R + block - 1) / block;
  // Blocks claimed one at a time (parallel.h): a decode step's products are a fraction of a millisecond,
  // too short for an OpenMP region's join on a busy machine.
  parallel_chunks(n_blocks, [&](int64_t b) {
    thread_local std::vector<float> scratch;
    const int64_t r0 = b * block, nb = std::min(block, R - r0);
    if (static_cast<int64_t>(scratch.size()) < nb * C) scratch.resize(static_cast<size_t>(nb * C));
    W.rows_to_f32(r0, nb, scratch.data());
    if constexpr (Accumulate)
      out.middleCols(r0, nb).noalias() += x * ConstMapRM(scratch.data(), nb, C).transpose();
    else
      out.middleCols(r0, nb).noalias() = x * ConstMapRM(scratch.data(), nb, C).transpose();
  });
}

}  // namespace

void linear(const MatrixRM& x, const WeightMatrix& W, MatrixRM& out) { linear_impl<false>(x, W, out); }
void linear_add(const MatrixRM& x, const WeightMatrix& W, MatrixRM& out) { linear_impl<true>(x, W, out); }

}  // namespace oscar
