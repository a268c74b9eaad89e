// decode/rotate_q.h: the query rotation a rotated decode runs before its decode grid: q' = bf16(q R_K) (or
// the normalized Hadamard) for every (sequence, query head) row, the R_K of the row's KV head (oscar/rotate_math.h).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "decode/args.h"
#include "oscar_kv.h"

namespace oscar::kernels {

// Bytes of the rotated queries in a decode workspace (after the partials), 16-byte rounded.
inline size_t rotated_q_bytes(int64_t batch, int q_heads, int head_dim) {
  return (static_cast<size_t>(batch) * q_heads * head_dim * 2 + 15) / 16 * 16;
}

// dst bf16 [rows][head_dim] from q bf16 [rows][head_dim]; row r is query head r % Hq of KV head (r % Hq) / G.
oscar_status launch_rotate_q(const RotArgs& rot, const uint16_t* q, uint16_t* dst, int64_t rows, int Hq, int G, int head_dim,
                             cudaStream_t s, oscar_error* err, const char* fn);

// Checks the rotation of a caller's options (NULL = none; the messages name it options->rotation) into RotArgs.
oscar_status check_rotation(const oscar_rotation* rotation, const char* fn, oscar_error* err, RotArgs& out);

}  // namespace oscar::kernels
