// cov/cov_paged_write.cu: the paged oscar-cov writer (oscar_cov_paged_write; layout oscar/cov_paged_format.h). Every
// token of the step is quantized into its page slot (write-through), by the contiguous prefill's row rule and
// rotation (cov/row_quantize.cuh), so the same tokens give the same codes; its BF16 rows go to the sequence's window
// slot when it is a sink token or among the last `recent` tokens of the sequence after the step. Under a dense
// rotation a step of at most `recent` tokens (every decode step) runs in two kernels: the rows rotated into their
// window slots a 32-column slice per warp (decode/rotate_rows.cuh), then quantized from there: 5 us a layer for the
// quantizing kernel (0.17 ms a step) beside the rotation's slices, where the one-kernel path (each row's lanes reading
// the whole matrix in dependent rounds) waits on L2/DRAM latency: 48 us a layer for 29 tokens of 8 KV heads (H100,
// vLLM at 100K tokens: 1.54 ms a step of 32 layers).
#include "api_util.h"
#include "cov/cov_kernels.h"
#include "cov/row_quantize.cuh"
#include "decode/rotate_rows.cuh"
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

// The window row (element offset into ks/vs when *sink, else into kr/vr) of token i, KV head h: its sink slot, or its
// ring slot when among the last W tokens of its sequence after the step; -1: none (a padding token, slot < 0, or a
// token that stays only in the pages).
__device__ __forceinline__ int64_t window_row(const CovView& c, const PagedWriteArgs& w, int i, int h, int hd, bool* sink) {
  if (w.slots[i] < 0) return -1;
  const int s = sequence_of(w.qsl, w.num_seqs, i);
  const int L = w.lens[s];
  const int pos = L - (w.qsl[s + 1] - w.qsl[s]) + (i - w.qsl[s]);
  const int64_t wh = static_cast<int64_t>(c.wslot[s]) * c.Hkv + h;
  *sink = pos < c.S;
  if (pos < 0) return -1;
  if (pos < c.S) return (wh * c.S + pos) * hd;
  if (pos >= L - c.W) return (wh * c.W + (pos - c.S) % c.W) * hd;
  return -1;
}

// HD/8 lanes per (token, KV head) row; K and V both handled by it (as the contiguous prefill_kernel). ROT: rotate the
// input rows here; FROM_WINDOW: the rows were rotated into their window slots already (WindowRows), read them there.
template <int HD, int BITS, bool ROT, bool FROM_WINDOW>
__global__ void __launch_bounds__(256) paged_write_kernel(CovView c, RotArgs rot, PagedWriteArgs w) {
  static_assert(!(ROT && FROM_WINDOW), "window rows are rotated already");
  constexpr int LR = HD / 8, CB = HD * BITS / 8, ROWS = 256 / LR;
  const int li = threadIdx.x & (LR - 1);
  constexpr unsigned mask = 0xffffffffu;  // every lane runs every shuffle (rows past the end on a clamped row)
  const int64_t total = static_cast<int64_t>(w.num_tokens) * c.Hkv;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * ROWS;
  const int64_t region = covpaged::region_bytes(c.P, HD, BITS);
  for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * ROWS; row0 < total; row0 += stride) {
    int64_t row = row0 + threadIdx.x / LR;
    bool in_range = row < total;
    if (!in_range) row = total - 1;
    const int i = static_cast<int>(row / c.Hkv), h = static_cast<int>(row % c.Hkv);
    bool sink = false;
    const int64_t wrow = window_row(c, w, i, h, HD, &sink);
    const uint16_t* ksrc = w.k + i * w.k_stride + static_cast<int64_t>(h) * HD;
    const uint16_t* vsrc = w.v + i * w.v_stride + static_cast<int64_t>(h) * HD;
    if constexpr (FROM_WINDOW) {
      if (wrow >= 0) {
        ksrc = (sink ? c.ks : c.kr) + wrow;
        vsrc = (sink ? c.vs : c.vr) + wrow;
      } else {
        in_range = false;  // no rotated row to read (the host sends only steps whose every token has a window row)
      }
    }
    uint4 kin = reinterpret_cast<const uint4*>(ksrc)[li];
    uint4 vin = reinterpret_cast<const uint4*>(vsrc)[li];
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
    if (FROM_WINDOW || wrow < 0) continue;
    reinterpret_cast<uint4*>((sink ? c.ks : c.kr) + wrow)[li] = kin;
    reinterpret_cast<uint4*>((sink ? c.vs : c.vr) + wrow)[li] = vin;
  }
}

// The step's K and V rows under a dense rotation, rotated into their window slots: row r = (K or V, KV head, token),
// token fastest, so that a block's consecutive rows share one matrix (rotate_rows_kernel loads its slice once).
struct WindowRows {
  CovView c;
  RotArgs rot;
  PagedWriteArgs w;
  int hd;
  __device__ int64_t count() const { return 2LL * c.Hkv * w.num_tokens; }
  __device__ int token(int64_t r) const { return static_cast<int>(r % w.num_tokens); }
  __device__ int head(int64_t r) const { return static_cast<int>((r / w.num_tokens) % c.Hkv); }
  __device__ bool is_v(int64_t r) const { return r >= static_cast<int64_t>(c.Hkv) * w.num_tokens; }
  __device__ const void* src(int64_t r) const {
    const int i = token(r);
    return is_v(r) ? w.v + i * w.v_stride + static_cast<int64_t>(head(r)) * hd : w.k + i * w.k_stride + static_cast<int64_t>(head(r)) * hd;
  }
  __device__ const float* matrix(int64_t r) const { return head_matrix(is_v(r) ? rot.value : rot.key, rot.per_head, head(r), hd); }
  __device__ void* dst(int64_t r) const {
    bool sink = false;
    const int64_t wrow = window_row(c, w, token(r), head(r), hd, &sink);
    if (wrow < 0) return nullptr;
    return is_v(r) ? (sink ? c.vs : c.vr) + wrow : (sink ? c.ks : c.kr) + wrow;
  }
};

}  // namespace

template <int HD, int BITS>
oscar_status cov_paged_write(const CovView& c, const RotArgs& rot, const PagedWriteArgs& w, cudaStream_t s, oscar_error* err) {
  const int64_t rows = static_cast<int64_t>(w.num_tokens) * c.Hkv;
  const int64_t per_block = 256 / (HD / 8);
  const int64_t want = (rows + per_block - 1) / per_block, cap = 16LL * plan::sm_count();
  const unsigned blocks = static_cast<unsigned>(want < cap ? want : cap);
  if (blocks == 0) return OSCAR_OK;
  if (rot.kind == 2 && w.num_tokens <= c.W) {  // every token has its own window row (the last W of its sequence)
    const WindowRows rows{c, rot, w, HD};
    launch_rotate_rows<HD, false, false, false>(rows, 2LL * c.Hkv * w.num_tokens, s);
    paged_write_kernel<HD, BITS, false, true><<<blocks, 256, 0, s>>>(c, rot, w);
  } else if (rot.kind) {
    paged_write_kernel<HD, BITS, true, false><<<blocks, 256, 0, s>>>(c, rot, w);
  } else {
    paged_write_kernel<HD, BITS, false, false><<<blocks, 256, 0, s>>>(c, rot, w);
  }
  return api::check_launch(err, "oscar_cov_paged_write");
}

#define OSCAR_COV_PAGED_WRITE_INSTANCE(HD, BITS) \
  template oscar_status cov_paged_write<HD, BITS>(const CovView&, const RotArgs&, const PagedWriteArgs&, cudaStream_t, oscar_error*);
OSCAR_KV_SHAPES(OSCAR_COV_PAGED_WRITE_INSTANCE)

}  // namespace oscar::kernels
