// weights.h: a weight matrix [rows = outputs, cols = inputs] held either as float32 in memory (llama2.c
// checkpoints; GGUF F32 tensors) or as a GGUF tensor in its stored type (memory-mapped, dequantized on
// the fly), and the linear op out = x * W^T over it. A stored-type matrix is never converted whole: the
// op dequantizes blocks of rows into per-thread float32 scratch of bounded size (at most
// linear_scratch_floats() per thread) and multiplies each block with Eigen, blocks in parallel (OpenMP).
#pragma once
#include <cstdint>
#include <string>

#include "oscar/02_model/formats/checkpoint.h"
#include "oscar/02_model/formats/gguf.h"

namespace oscar {

class WeightMatrix {
 public:
  WeightMatrix() = default;
  // A view of row-major float32 values [rows, cols]; the caller keeps them alive.
  static WeightMatrix f32(const float* data, int64_t rows, int64_t cols);
  // A view of a 2-D GGUF tensor (ggml dims {cols, rows}); the GgufFile must outlive the view. An F32
  // tensor becomes a float32 view; any other dequantizable type stays in its stored form. Throws Error
  // naming the tensor when it is not 2-D or its type cannot be dequantized.
  static WeightMatrix gguf(const GgufTensor& t);

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  bool empty() const { return rows_ == 0; }
  // The float32 values when held as float32, else nullptr.
  const float* f32_data() const { return f32_; }
  const GgufTensor* tensor() const { return tensor_; }
  // "F32", "Q4_1", ...: how the values are stored.
  std::string type_name() const;
  // Rows r0 .. r0+n-1 as float32 into dst[0 .. n*cols) (single-threaded).
  void rows_to_f32(int64_t r0, int64_t n, float* dst) const;

 private:
  const float* f32_ = nullptr;
  const GgufTensor* tensor_ = nullptr;
  int64_t rows_ = 0, cols_ = 0;
};

// out = x * W^T: x [n, W.cols()] -> out [n, W.rows()] (resized). Float32 matrices go through one Eigen
// product (exactly as a plain Eigen expression would); stored-type matrices through row blocks as
// described above, for any n (decode steps of one token included). Throws Error when x.cols() !=
// W.cols().
void linear(const MatrixRM& x, const WeightMatrix& W, MatrixRM& out);
// out += x * W^T (out must be [n, W.rows()]); the product accumulates into out as Eigen's
// `out.noalias() += x * W^T` does.
void linear_add(const MatrixRM& x, const WeightMatrix& W, MatrixRM& out);

// The same float32 values as dequantize() (bit for bit, except that a NaN may come out with another
// payload), faster: AVX2 + F16C paths
// for Q8_0, Q4_0, Q4_1 and F16 where the build targets them, dequantize() otherwise.
void dequantize_fast(GgmlType type, const void* src, float* dst, int64_t n);

// The bound on one thread's dequantization scratch (float32 values) of linear().
int64_t linear_scratch_floats();

}  // namespace oscar
