// cov/cov_quantize.cu: oscar-cov prefill and append (layout oscar/cov_format.h), rows quantized by cov/row_quantize.cuh
// (HD/8 lanes a row). Sink and recent tokens are copied; append demotes the token leaving the recent ring into the body.
#include "api_util.h"
#include "cov/cov_kernels.h"
#include "cov/row_quantize.cuh"
#include "decode/mma.cuh"
#include "decode/rotate.cuh"
#include "decode/rotate_rows.cuh"
#include "decode/shapes.h"
#include "decode/split_plan.h"
#include "oscar/cov_format.h"
#include "oscar/quant_rules.h"

namespace oscar::kernels {
namespace {

// Prefill: HD/8 lanes per (bh, t) row; K and V both handled by it.
template <int HD, int BITS, bool ROT>
__global__ void __launch_bounds__(256) prefill_kernel(CovView c, RotArgs rot, const uint16_t* __restrict__ k,
                                                      const uint16_t* __restrict__ v, const int32_t* __restrict__ lens, int max_len) {
  constexpr int LR = HD / 8, CB = HD * BITS / 8, ROWS = 256 / LR;
  const int li = threadIdx.x & (LR - 1);
  // every lane of the warp runs every shuffle (rows past the end on a clamped row): full-warp shuffles of width LR,
  // without the convergence checks that a row's partial mask costs
  constexpr unsigned mask = 0xffffffffu;
  const int64_t total = static_cast<int64_t>(c.B) * c.Hkv * max_len;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * ROWS;
  for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * ROWS; row0 < total; row0 += stride) {
    // every lane runs the shuffles; rows past the end are computed on a clamped row
    int64_t row = row0 + threadIdx.x / LR;
    const bool in_range = row < total;
    if (!in_range) row = total - 1;
    // 32-bit index math (the API bounds batch * kv_heads * max_len below 2^32)
    const uint32_t bh32 = static_cast<uint32_t>(row) / static_cast<uint32_t>(max_len);
    const int64_t bh = bh32;
    const int t = static_cast<int>(static_cast<uint32_t>(row) - bh32 * static_cast<uint32_t>(max_len));
    const int b = static_cast<int>(bh / c.Hkv);
    int len = lens[b];
    len = len < 0 ? 0 : (len > max_len ? max_len : len);
    const bool live = in_range && t < len;
    const auto head = [&] { return static_cast<int>(bh % c.Hkv); };
    uint4 kin, vin;
    uint32_t kbits, kpar, vbits, vpar;
    quantize_kv_row<HD, BITS, ROT>(c, rot, k + row * HD, v + row * HD, head, li, mask, kin, vin, kbits, kpar, vbits, vpar);
    if (!live) continue;
    const int64_t nb = covfmt::body_tokens(len, c.S, c.W);
    if (t < c.S) {
      reinterpret_cast<uint4*>(c.ks + (bh * c.S + t) * HD)[li] = kin;
      reinterpret_cast<uint4*>(c.vs + (bh * c.S + t) * HD)[li] = vin;
    } else if (t - c.S < nb) {
      const int64_t bi = bh * c.cap + (t - c.S);
      store_codes<BITS>(c.kc + bi * CB, li, kbits);
      store_codes<BITS>(c.vc + bi * CB, li, vbits);
      if (li == 0) { c.kp[bi] = kpar; c.vp[bi] = vpar; }
    } else {
      const int64_t slot = bh * c.W + static_cast<int64_t>(static_cast<uint32_t>(t - c.S) % static_cast<uint32_t>(c.W));
      reinterpret_cast<uint4*>(c.kr + slot * HD)[li] = kin;
      reinterpret_cast<uint4*>(c.vr + slot * HD)[li] = vin;
    }
  }
}

// Append: HD/8 lanes per (bh, K or V) row; row r = 2 bh + (1 for V). WRITE = false: only the demotion (a dense
// rotation then writes the new token: NewTokenRows below).
template <int HD, int BITS, bool ROT, bool WRITE = true>
__global__ void __launch_bounds__(256) append_kernel(CovView c, RotArgs rot, const uint16_t* __restrict__ k,
                                                     const uint16_t* __restrict__ v, const int32_t* __restrict__ lens) {
  constexpr int LR = HD / 8, CB = HD * BITS / 8;
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / LR;
  const int64_t bh = r >> 1;
  if (bh >= static_cast<int64_t>(c.B) * c.Hkv) return;  // whole row group
  const int li = threadIdx.x & (LR - 1);
  const bool is_v = (r & 1) != 0;
  const int b = static_cast<int>(bh / c.Hkv);
  const int64_t t = lens[b];
  if (t < 0 || t >= c.S + c.cap + c.W) return;  // whole row group (host checked the bound)
  const uint16_t* in = (is_v ? v : k) + bh * HD;
  uint4 nin = WRITE ? reinterpret_cast<const uint4*>(in)[li] : uint4{};
  if constexpr (ROT)  // the new token arrives unrotated (the window and demoted tokens are stored rotated)
    nin = rotate_piece<HD>(nin, rot, is_v, static_cast<int>(bh % c.Hkv), li, row_lanes_mask<HD>(threadIdx.x & 31));
  if (t < c.S) {
    if constexpr (WRITE) reinterpret_cast<uint4*>((is_v ? c.vs : c.ks) + (bh * c.S + t) * HD)[li] = nin;
    return;
  }
  uint4* slot = reinterpret_cast<uint4*>((is_v ? c.vr : c.kr) + (bh * c.W + (t - c.S) % c.W) * HD) + li;
  if (t - c.S >= c.W) {  // demote token t - W (same ring slot) into body index t - W - S
    const uint4 old = *slot;
    float x[8];
    bf16x8_to_float(old, x);
    uint32_t bits, par;
    const unsigned mask = row_lanes_mask<HD>(threadIdx.x & 31);
    const int quantile = is_v ? c.quantile_v : c.quantile_k;
    const float thr = quantile >= 0 ? row_quantile<HD>(x, quantile, mask) : -1.0f;
    quantize_row<HD, BITS>(x, is_v ? c.clip_v : c.clip_k, thr, c.rounding, mask, bits, par);
    const int64_t bi = bh * c.cap + (t - c.W - c.S);
    store_codes<BITS>((is_v ? c.vc : c.kc) + bi * CB, li, bits);
    if (li == 0) (is_v ? c.vp : c.kp)[bi] = par;
  }
  if constexpr (WRITE) *slot = nin;
}

// The new token's K and V rows under a dense rotation, written where append_kernel would put them (sink, or the
// recent ring slot it has just demoted): row r = 2 bh + (1 for V).
struct NewTokenRows {
  CovView c;
  RotArgs rot;
  const uint16_t* k;
  const uint16_t* v;
  const int32_t* lens;
  int hd;
  __device__ int64_t count() const { return 2LL * c.B * c.Hkv; }
  __device__ const void* src(int64_t r) const { return ((r & 1) ? v : k) + (r >> 1) * hd; }
  __device__ const float* matrix(int64_t r) const {
    return head_matrix((r & 1) ? rot.value : rot.key, rot.per_head, static_cast<int>((r >> 1) % c.Hkv), hd);
  }
  __device__ void* dst(int64_t r) const {
    const int64_t bh = r >> 1;
    const int64_t t = lens[bh / c.Hkv];
    if (t < 0 || t >= c.S + c.cap + c.W) return nullptr;
    uint16_t* base = (r & 1) ? (t < c.S ? c.vs : c.vr) : (t < c.S ? c.ks : c.kr);
    return t < c.S ? base + (bh * c.S + t) * hd : base + (bh * c.W + (t - c.S) % c.W) * hd;
  }
};

}  // namespace

template <int HD, int BITS>
oscar_status cov_prefill(const CovView& c, const WriteArgs& w, const Launch& l) {
  const int64_t rows = static_cast<int64_t>(c.B) * c.Hkv * w.max_len;
  const int64_t per_block = 256 / (HD / 8);
  const int64_t want = (rows + per_block - 1) / per_block, cap = 16LL * plan::sm_count();
  const unsigned blocks = static_cast<unsigned>(want < cap ? want : cap);
  if (w.rot.kind) prefill_kernel<HD, BITS, true><<<blocks, 256, 0, l.stream>>>(c, w.rot, w.k, w.v, w.lens, w.max_len);
  else prefill_kernel<HD, BITS, false><<<blocks, 256, 0, l.stream>>>(c, w.rot, w.k, w.v, w.lens, w.max_len);
  return api::check_launch(l.err, l.fn);
}

template <int HD, int BITS>
oscar_status cov_append(const CovView& c, const WriteArgs& w, const Launch& l) {
  const int64_t threads = static_cast<int64_t>(c.B) * c.Hkv * 2 * (HD / 8);
  const cudaStream_t s = l.stream;
  if (w.rot.kind == 2) {  // dense matrices: the demotion, then the new rows rotated a 32-column slice per warp
    const unsigned blocks = static_cast<unsigned>((threads + 255) / 256);
    append_kernel<HD, BITS, false, false><<<blocks, 256, 0, s>>>(c, w.rot, w.k, w.v, w.lens);
    const NewTokenRows rows{c, w.rot, w.k, w.v, w.lens, HD};
    launch_rotate_rows<HD, false, false, false>(rows, 2LL * c.B * c.Hkv, s);
  } else if (w.rot.kind) {  // Hadamard: butterflies in registers, one warp per block (the rows spread over the SMs)
    const unsigned blocks = static_cast<unsigned>((threads + 31) / 32);
    append_kernel<HD, BITS, true><<<blocks, 32, 0, s>>>(c, w.rot, w.k, w.v, w.lens);
  } else {
    const unsigned blocks = static_cast<unsigned>((threads + 255) / 256);
    append_kernel<HD, BITS, false><<<blocks, 256, 0, s>>>(c, w.rot, w.k, w.v, w.lens);
  }
  return api::check_launch(l.err, l.fn);
}

#define OSCAR_COV_QUANTIZE_INSTANCE(HD, BITS) OSCAR_WRITE_ENTRIES_AT(cov, CovView, HD, BITS)
OSCAR_KV_SHAPES(OSCAR_COV_QUANTIZE_INSTANCE)

}  // namespace oscar::kernels
