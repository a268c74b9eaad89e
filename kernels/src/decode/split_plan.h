// decode/split_plan.h: how a decode step is cut into blocks (host only). A "unit" is one (sequence, KV head,
// query-slot group) of the grid; its tokens are cut into equal splits so that one step is about one wave of
// resident blocks, and (quantized formats) its BF16 windows are shared by up to kMaxWin extra blocks.
// Also the workspace the partials of a plan take.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace oscar::kernels::plan {

constexpr int kWarpsPerBlock = 4;
constexpr int kQuantGranule = kWarpsPerBlock * 64;  // oscar-cov body split granule (tokens): whole chunks for every warp
constexpr int kOmniGranule = kWarpsPerBlock * 32;   // oscar-omni body split granule (= its residual block)
constexpr int kBf16Granule = kWarpsPerBlock * 64;   // BF16 baseline split granule
constexpr int kMaxWin = 4;                          // most blocks sharing the BF16 windows of one unit
constexpr int kMinBodySplits = 4;                   // least body splits per unit
constexpr int kFusedMaxParts = 128;                 // most parts per unit the in-grid merge takes (its weights fit the block's shared memory)

// Decode blocks per SM the kernels' register budget is built for (__launch_bounds__ min blocks) and the
// plan fills: 3 at head_dim 64/128 (148-152 registers at 128, no spills), 2 at 256 (twice the accumulators).
constexpr int blocks_per_sm(int head_dim) { return head_dim >= 256 ? 2 : 3; }
// Query-slot groups of 8 per KV head (grid z).
constexpr int query_groups(int q_per_kv) { return (q_per_kv + 7) / 8; }

inline int sm_count() {
  int dev = 0, n = 132;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    cudaGetLastError();
    n = 132;
  }
  return n;
}

struct Plan {
  int nsplit = 1;         // body splits (quantized) or splits (bf16)
  int nwin = 0;           // blocks sharing the BF16 windows (quantized)
  int64_t split_len = 0;  // tokens per split, a multiple of the granule
  int parts() const { return nsplit + nwin; }
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline Plan cut(int64_t tokens, int64_t ns, int64_t granule) {
  Plan p;
  const int64_t by_len = ceil_div(tokens, granule);
  ns = ns < by_len ? ns : by_len;
  if (ns < 1) ns = 1;
  int64_t len = ceil_div(ceil_div(tokens, ns), granule) * granule;
  if (len < granule) len = granule;
  p.split_len = len;
  p.nsplit = static_cast<int>(tokens > 0 ? ceil_div(tokens, len) : 1);
  return p;
}

// BF16 baseline: about 4 blocks per SM over all units.
inline Plan bf16_plan(int64_t units, int64_t tokens, int sms) { return cut(tokens, ceil_div(4LL * sms, units), kBf16Granule); }

// Quantized formats: body splits + window blocks of all units in about one wave of `slots_per_sm` blocks
// per SM (no half-empty second wave), at least kMinBodySplits body splits; at small batch the windows are
// shared by up to kMaxWin blocks so that they do not become the longest block.
inline Plan quant_plan(int64_t units, int64_t body, int64_t win, int64_t granule, int slots_per_sm, int sms) {
  const int64_t slots = static_cast<int64_t>(slots_per_sm) * sms;
  int64_t nw = 1;
  if (units * 16 <= slots) {
    nw = ceil_div(win, kWarpsPerBlock * 16);
    nw = nw < 1 ? 1 : (nw > kMaxWin ? kMaxWin : nw);
  }
  int64_t ns = (slots - nw * units) / units;
  if (ns < kMinBodySplits) ns = kMinBodySplits;
  Plan p = cut(body, ns, granule);
  p.nwin = static_cast<int>(nw);
  return p;
}

// An upper bound of the parts of any quantized plan of these units (either format, any windows).
inline int quant_parts_bound(int64_t units, int64_t max_len, int slots_per_sm, int sms) {
  const int64_t slots = static_cast<int64_t>(slots_per_sm) * sms;
  int64_t ns = slots / units;
  if (ns < kMinBodySplits) ns = kMinBodySplits;
  int64_t by_len = ceil_div(max_len, kOmniGranule);
  if (by_len < 1) by_len = 1;
  ns = ns < by_len ? ns : by_len;
  return static_cast<int>(ns + kMaxWin);
}

// Workspace bytes of the partials: [BH][np][QS][head_dim] outputs + [BH][np][QS][2] (max, sum).
inline size_t workspace_bytes(int64_t bh, int np, int qs, int head_dim) {
  return static_cast<size_t>(bh) * np * qs * (head_dim + 2) * sizeof(float);
}

}  // namespace oscar::kernels::plan
