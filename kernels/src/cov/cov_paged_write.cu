// cov/cov_paged_write.cu: the paged oscar-cov writer (oscar_cov_paged_write; layout oscar/cov_paged_format.h). Every
// token of the step is quantized into its page slot (write-through), by the contiguous prefill's row rule and
// rotation (cov/row_quantize.cuh), so the same tokens give the same codes; its BF16 rows go to the sequence's window
// slot when it is a sink token or among the last `recent` tokens of the sequence after the step.
#include "api_util.h"
#include "cov/cov_kernels.h"
#include "cov/row_quantize.cuh"
#include "decode/shapes.h"
#include "decode/split_plan.h"
#include "oscar/cov_paged_format.h"

namespace oscar::kernels {
namespace {

// The sequence of token i: the last s with qsl[s] <= i (qsl ascending, qsl[0] = 0).
__device__ __forceinline__ int sequence_of(const int32_t* __restrict__ qsl, int num_seqs, int i) {
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (qsl[mid] <= i) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// HD/8 lanes per (token, KV head) row; K and V both handled by it (as the contiguous prefill_kernel).
template <int HD, int BITS, bool ROT>
__global__ void __launch_bounds__(256) paged_write_kernel(CovView c, RotArgs rot, PagedWriteArgs w) {
  constexpr int LR = HD / 8, CB = HD * BITS / 8, ROWS = 256 / LR;
  const int li = threadIdx.x & (LR - 1);
  constexpr unsigned mask = 0xffffffffu;  // every lane runs every shuffle (rows past the end on a clamped row)
  const int64_t total = static_cast<int64_t>(w.num_tokens) * c.Hkv;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * ROWS;
  const int64_t region = covpaged::region_bytes(c.P, HD, BITS);
  for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * ROWS; row0 < total; row0 += stride) {
    int64_t row = row0 + threadIdx.x / LR;
    const bool in_range = row < total;
    if (!in_range) row = total - 1;
    const int i = static_cast<int>(row / c.Hkv), h = static_cast<int>(row % c.Hkv);
    uint4 kin = reinterpret_cast<const uint4*>(w.k + i * w.k_stride + static_cast<int64_t>(h) * HD)[li];
    uint4 vin = reinterpret_cast<const uint4*>(w.v + i * w.v_stride + static_cast<int64_t>(h) * HD)[li];
    float kx[8], vx[8];
    bf16x8_to_float(kin, kx);
    bf16x8_to_float(vin, vx);
    if constexpr (ROT) {
      rotate_row8<HD>(kx, rot.kind, rot.kind == 2 ? head_matrix(rot.key, rot.per_head, h, HD) : nullptr, li, mask);
      rotate_row8<HD>(vx, rot.kind, rot.kind == 2 ? head_matrix(rot.value, rot.per_head, h, HD) : nullptr, li, mask);
      kin = pack8_bf16(kx);
      vin = pack8_bf16(vx);
    }
    uint32_t kbits, kpar, vbits, vpar;
    float thk = -1.0f, thv = -1.0f;
    if (c.quantile_k >= 0 && c.quantile_v >= 0) row_quantiles_kv<HD>(kx, c.quantile_k, vx, c.quantile_v, mask, thk, thv);
    else if (c.quantile_k >= 0) thk = row_quantile<HD>(kx, c.quantile_k, mask);
    else if (c.quantile_v >= 0) thv = row_quantile<HD>(vx, c.quantile_v, mask);
    quantize_row<HD, BITS>(kx, c.clip_k, thk, c.rounding, mask, kbits, kpar);
    quantize_row<HD, BITS>(vx, c.clip_v, thv, c.rounding, mask, vbits, vpar);
    if (!in_range) continue;
    const int64_t slot = w.slots[i];
    if (slot < 0) continue;  // an engine's padding token: nothing written
    const int64_t page = slot / c.P;
    const int off = static_cast<int>(slot - page * c.P);
    uint8_t* reg = c.pages + page * c.page_stride + h * region;
    store_codes<BITS>(reg + static_cast<int64_t>(off) * CB, li, kbits);
    store_codes<BITS>(reg + covpaged::v_codes_offset(c.P, HD, BITS) + static_cast<int64_t>(off) * CB, li, vbits);
    if (li == 0) {
      reinterpret_cast<uint32_t*>(reg + covpaged::k_params_offset(c.P, HD, BITS))[off] = kpar;
      reinterpret_cast<uint32_t*>(reg + covpaged::v_params_offset(c.P, HD, BITS))[off] = vpar;
    }
    const int s = sequence_of(w.qsl, w.num_seqs, i);
    const int L = w.lens[s];
    const int pos = L - (w.qsl[s + 1] - w.qsl[s]) + (i - w.qsl[s]);
    const int64_t wh = static_cast<int64_t>(c.wslot[s]) * c.Hkv + h;
    if (pos < 0) continue;
    if (pos < c.S) {
      reinterpret_cast<uint4*>(c.ks + (wh * c.S + pos) * HD)[li] = kin;
      reinterpret_cast<uint4*>(c.vs + (wh * c.S + pos) * HD)[li] = vin;
    } else if (pos >= L - c.W) {  // among the last W tokens: the ring slot (pos - S) % W
      const int64_t r = wh * c.W + (pos - c.S) % c.W;
      reinterpret_cast<uint4*>(c.kr + r * HD)[li] = kin;
      reinterpret_cast<uint4*>(c.vr + r * HD)[li] = vin;
    }
  }
}

}  // namespace

template <int HD, int BITS>
oscar_status cov_paged_write(const CovView& c, const RotArgs& rot, const PagedWriteArgs& w, cudaStream_t s, oscar_error* err) {
  const int64_t rows = static_cast<int64_t>(w.num_tokens) * c.Hkv;
  const int64_t per_block = 256 / (HD / 8);
  const int64_t want = (rows + per_block - 1) / per_block, cap = 16LL * plan::sm_count();
  const unsigned blocks = static_cast<unsigned>(want < cap ? want : cap);
  if (blocks == 0) return OSCAR_OK;
  if (rot.kind) paged_write_kernel<HD, BITS, true><<<blocks, 256, 0, s>>>(c, rot, w);
  else paged_write_kernel<HD, BITS, false><<<blocks, 256, 0, s>>>(c, rot, w);
  return api::check_launch(err, "oscar_cov_paged_write");
}

#define OSCAR_COV_PAGED_WRITE_INSTANCE(HD, BITS) \
  template oscar_status cov_paged_write<HD, BITS>(const CovView&, const RotArgs&, const PagedWriteArgs&, cudaStream_t, oscar_error*);
OSCAR_KV_SHAPES(OSCAR_COV_PAGED_WRITE_INSTANCE)

}  // namespace oscar::kernels
