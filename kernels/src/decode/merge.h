// decode/merge.h: the exact log-sum-exp merge of the splits' partials of each (sequence, query head) into out
// float32 [B][Hq][head_dim]: a second kernel launched right after the decode grid with programmatic dependent launch
// (its launch overlaps the decode grid), or, when DecodeArgs::arrivals is set, nothing (the decode grid merged:
// decode/unit_merge.cuh). Either way a dense R_V's un-rotation follows as a kernel of its own.
#pragma once
#include <cuda_runtime.h>

#include "decode/args.h"
#include "oscar_kernels.h"

namespace oscar::kernels {

oscar_status launch_merge(const DecodeArgs& a, int head_dim, int batch, float* out, cudaStream_t s, oscar_error* err, const char* fn);

}  // namespace oscar::kernels
