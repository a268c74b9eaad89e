// decode/quantized_decode.h: what every quantized decode entry point does after its format's checks and plan:
// the workspace checked against the plan, the query rotation of a *_decode_rotated call (q' into the workspace's
// tail, the merge un-rotating the output), the logit modifiers of a *_decode_ex call, the format's decode grid, and the merge
// (in the decode grid when the cache has arrival counters and the plan's parts fit the in-grid merge: one launch).
#pragma once
#include <cuda_runtime.h>

#include "decode/checks.h"
#include "decode/merge.h"
#include "decode/rotate_q.h"

namespace oscar::kernels {

// grid(a, s, err): launches the format's decode grid over the arguments `a`.
template <class Grid>
oscar_status run_quantized_decode(const plan::Plan& p, const RotArgs& rot, const oscar_decode_logits* logits, const char* fn, const void* q,
                                  const int32_t* lens, int32_t hq, int32_t hkv, int batch, int head_dim, float softmax_scale, float* out,
                                  void* workspace, size_t workspace_bytes, uint32_t* arrivals, cudaStream_t s, oscar_error* err,
                                  Grid grid) {
  const int64_t bh = static_cast<int64_t>(batch) * hkv;
  DecodeArgs a;
  const size_t qrot = rot.kind ? rotated_q_bytes(batch, hq, head_dim) : 0;
  oscar_status st = plan_decode_args(a, p, fn, q, lens, hq, hkv, bh, head_dim, softmax_scale, workspace, workspace_bytes, err, qrot);
  if (st != OSCAR_OK || (st = check_logits(logits, fn, err, a)) != OSCAR_OK) return st;
  if (rot.kind) {
    auto* qr = reinterpret_cast<uint16_t*>(static_cast<char*>(workspace) + (workspace_bytes - qrot) / 16 * 16);
    if ((st = launch_rotate_q(rot, a.q, qr, static_cast<int64_t>(batch) * hq, hq, a.G, head_dim, s, err, fn)) != OSCAR_OK) return st;
    a.q = qr;
    a.rot = rot;
  }
  if (arrivals && a.np <= plan::kFusedMaxParts) {
    a.arrivals = arrivals;
    a.out = out;
  }
  if ((st = grid(a, s, err)) != OSCAR_OK) return st;
  return launch_merge(a, head_dim, batch, out, s, err, fn);
}

}  // namespace oscar::kernels
