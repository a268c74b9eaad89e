// omni/omni_kernels.h: the oscar-omni kernels' host entry points, one per (head_dim, bits) of
// decode/shapes.h, and the format's dispatch table (omni/omni_api.cu; signatures: api/format_kernels.h). OmniView is the device view of an
// oscar_omni_cache (layout oscar/omni_format.h) after the C API has checked it.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "api/format_kernels.h"
#include "decode/args.h"
#include "oscar_kernels.h"

namespace oscar::kernels {

struct OmniView {
  int B, Hkv;
  int64_t cap;        // body capacity (tokens), a multiple of the residual block
  uint16_t *kr, *vr;  // residual block, bf16 [BH][128][HD]
  uint8_t *kc, *vc;   // body codes [BH][cap][HD * BITS / 8]
  uint32_t *kp, *vp;  // fp16x2 (scale, zero): keys [BH][cap / 32][HD], values [BH][cap][HD / 32]
  uint16_t* kn;       // fp16 token norms [B][cap]
};

// A rotated prefill or append stages one 32-token block of every KV head in shared memory (UNSUPPORTED when that exceeds
// the device's limit).
template <int HD, int BITS> oscar_status omni_prefill(const OmniView& c, const WriteArgs& w, const Launch& l);
template <int HD, int BITS> oscar_status omni_append(const OmniView& c, const WriteArgs& w, const Launch& l);
template <int HD, int BITS> oscar_status omni_decode(const OmniView& c, const DecodeArgs& a, const Launch& l);

using OmniKernels = FormatKernels<OmniView>;
// The entry of (head_dim, bits), or nullptr when that shape is not compiled.
const OmniKernels* omni_kernels(int head_dim, int bits);

}  // namespace oscar::kernels
