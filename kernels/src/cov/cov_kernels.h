// cov/cov_kernels.h: the oscar-cov kernels' host entry points, one per (head_dim, bits) of decode/shapes.h,
// and the format's dispatch table (cov_kernels() in cov/cov_api.cu; signatures: api/format_kernels.h). CovView is the
// device view of an oscar_cov_cache (layout oscar/cov_format.h) or of an oscar_cov_paged after the C API has checked it.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "api/format_kernels.h"
#include "decode/args.h"
#include "oscar/quant_rules.h"
#include "oscar_kernels.h"

namespace oscar::kernels {

struct CovView {
  int B, Hkv, S, W;
  int64_t cap;
  float clip_k, clip_v;  // ratio clip (quantile_k/_v < 0), else 1 (the quantile clamp does the clipping)
  int quantile_k, quantile_v;  // quantile clip: the threshold's index in a row's ascending |x|; -1: ratio clip
  Rounding rounding;
  uint16_t *ks, *vs, *kr, *vr;
  uint8_t *kc, *vc;
  uint32_t *kp, *vp;
  // Paged mode (oscar_cov_paged, layout oscar/cov_paged_format.h) when pages is set: body position S + i of sequence b
  // in page block_table[b * bt_stride + (S + i) / P]; the window arrays indexed by window slot wslot[b], not by b.
  uint8_t* pages = nullptr;
  int64_t page_stride = 0;
  int P = 0, bt_stride = 0;
  const int32_t* block_table = nullptr;
  const int32_t* wslot = nullptr;
};

// The paged writer's per-step arguments (oscar_cov_paged_write): token i of sequence s (qsl[s] <= i < qsl[s + 1]).
struct PagedWriteArgs {
  const uint16_t* k;
  const uint16_t* v;
  int64_t k_stride, v_stride;  // elements between tokens
  int num_tokens, num_seqs;
  const int32_t* lens;         // [num_seqs] lengths after the step
  const int32_t* qsl;          // [num_seqs + 1]
  const int64_t* slots;        // [num_tokens] page * P + offset, < 0: no codes written
};

template <int HD, int BITS> oscar_status cov_prefill(const CovView& c, const WriteArgs& w, const Launch& l);
template <int HD, int BITS> oscar_status cov_append(const CovView& c, const WriteArgs& w, const Launch& l);
template <int HD, int BITS> oscar_status cov_decode(const CovView& c, const DecodeArgs& a, const Launch& l);  // paged when c.pages
// rot: in-kernel rotation of the unrotated k/v rows (kind 0: the rows are already rotated).
template <int HD, int BITS>
oscar_status cov_paged_write(const CovView& c, const RotArgs& rot, const PagedWriteArgs& w, const Launch& l);

struct CovKernels : FormatKernels<CovView> {
  oscar_status (*paged_write)(const CovView&, const RotArgs&, const PagedWriteArgs&, const Launch&);
};
// The row rule of a cache's fields (clip_k, clip_v, clip_mode, rounding) checked into v's rule fields (both cache kinds).
oscar_status check_cov_rule(float clip_k, float clip_v, int32_t clip_mode, int32_t rounding, int head_dim, const char* fn, oscar_error* err,
                            CovView& v);

// The entry of (head_dim, bits), or nullptr when that shape is not compiled.
const CovKernels* cov_kernels(int head_dim, int bits);

}  // namespace oscar::kernels
