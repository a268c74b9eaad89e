// blocks.h: the block units, one per BlockUnit of the architecture table: one transformer layer applied to the
// residual stream x [n, dim] of a chunk. Private to lib/src/02_model/forward.
#pragma once
#include "ops.h"

namespace oscar::forward {

using BlockFunction = void (*)(const BlockContext& b, MatrixRM& x);
// The function of a block unit (architecture.h's unit table); throws Error for a unit that has none.
BlockFunction block_function(BlockUnit unit);

// Pre-norm attention and feed-forward (llama, qwen2, qwen3, llama2.c).
void block_llama(const BlockContext& b, MatrixRM& x);
// Gemma 3: pre- and post-norms (sandwich) around attention and the feed-forward.
void block_gemma3(const BlockContext& b, MatrixRM& x);
// The feed-forward's hidden layer of both units, from the normalised input b.s.xb: act(W_gate h) * W_up h into b.s.h1,
// with the activation the architecture table names (FeedForward); the unit applies W_down.
void feed_forward_hidden(const BlockContext& b);

}  // namespace oscar::forward
