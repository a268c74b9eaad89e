// blocks.h: the block units, one per BlockUnit of the architecture table: one transformer layer applied to the
// residual stream x [n, dim] of a chunk. Private to lib/src/02_model/forward.
#pragma once
#include "ops.h"

namespace oscar::forward {

// Pre-norm attention and SwiGLU feed-forward (llama, qwen2, qwen3, llama2.c).
void block_llama(const BlockContext& b, MatrixRM& x);
// Gemma 3: pre- and post-norms around attention and the GeGLU feed-forward.
void block_gemma3(const BlockContext& b, MatrixRM& x);

}  // namespace oscar::forward
