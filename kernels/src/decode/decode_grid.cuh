// decode/decode_grid.cuh: the launch of a quantized format's decode grid (either format's kernel over its view): one
// block of kWarps warps per (part, sequence x KV head, group of kQSlots query slots), `smem` bytes of dynamic shared
// memory (the attribute set on every call: no global state, a cheap host-side write). Host code, internal linkage.
#pragma once
#include <cuda_runtime.h>

#include "api/format_kernels.h"
#include "api_util.h"
#include "decode/warp_state.cuh"

namespace oscar::kernels {
namespace {

template <class View>
oscar_status launch_decode_grid(void (*kernel)(View, DecodeArgs), size_t smem, const View& c, const DecodeArgs& a, const Launch& l) {
  OSCAR_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), l.err, l.fn);
  const dim3 grid(a.np, static_cast<unsigned>(static_cast<int64_t>(c.B) * c.Hkv), a.QS / kQSlots);
  kernel<<<grid, kWarps * 32, smem, l.stream>>>(c, a);
  return api::check_launch(l.err, l.fn);
}

}  // namespace
}  // namespace oscar::kernels
