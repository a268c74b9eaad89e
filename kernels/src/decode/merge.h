// decode/merge.h: the second kernel of every decode step: the exact log-sum-exp merge of the splits'
// partials of each (sequence, query head) into out float32 [B][Hq][head_dim]. Launched right after the
// decode grid with programmatic dependent launch (its launch overlaps the decode grid).
#pragma once
#include <cuda_runtime.h>

#include "decode/args.h"
#include "oscar_kernels.h"

namespace oscar::kernels {

oscar_status launch_merge(const DecodeArgs& a, int head_dim, int batch, float* out, cudaStream_t s, oscar_error* err, const char* fn);

}  // namespace oscar::kernels
