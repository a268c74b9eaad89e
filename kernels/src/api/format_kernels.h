// api/format_kernels.h: what a format's kernels offer the C API: one host entry per operation and compiled shape (one
// signature per operation for both formats: the format's device view, the call's arguments, where to launch), gathered
// into the format's dispatch table over decode/shapes.h (cov_kernels() in cov/cov_api.cu, omni_kernels() in
// omni/omni_api.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "decode/args.h"
#include "oscar_kernels.h"

namespace oscar::kernels {

// Where a host entry launches and whom it answers: the stream, the caller's error and the C entry point (for messages).
struct Launch {
  cudaStream_t stream;
  oscar_error* err;
  const char* fn;
};

// The per-call arguments of a prefill (k, v bf16 [B][Hkv][max_len][HD]) or an append (k, v bf16 [B][Hkv][HD]).
struct WriteArgs {
  RotArgs rot;  // in-kernel rotation of the unrotated rows (kind 0: the rows are already rotated)
  const uint16_t* k = nullptr;
  const uint16_t* v = nullptr;
  const int32_t* lens = nullptr;
  int32_t max_len = 0;  // prefill: the rows per sequence in k, v
};

template <class View>
struct FormatKernels {
  int head_dim, bits;
  oscar_status (*prefill)(const View&, const WriteArgs&, const Launch&);
  oscar_status (*append)(const View&, const WriteArgs&, const Launch&);
  oscar_status (*decode)(const View&, const DecodeArgs&, const Launch&);  // the decode grid only (no merge)
};

// The entry of (head_dim, bits) in a format's table, or nullptr when that shape is not compiled.
template <class Entry, size_t N>
const Entry* find_shape(const Entry (&table)[N], int head_dim, int bits) {
  for (const Entry& e : table)
    if (e.head_dim == head_dim && e.bits == bits) return &e;
  return nullptr;
}

// The explicit instantiations of a format's write entries <prefix>_prefill and <prefix>_append at one compiled shape.
#define OSCAR_WRITE_ENTRIES_AT(prefix, View, HD, BITS)                                           \
  template oscar_status prefix##_prefill<HD, BITS>(const View&, const WriteArgs&, const Launch&); \
  template oscar_status prefix##_append<HD, BITS>(const View&, const WriteArgs&, const Launch&);

}  // namespace oscar::kernels
