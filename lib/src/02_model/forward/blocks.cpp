// blocks.cpp: the block unit of each BlockUnit (architecture.h), and the feed-forward both units share.
#include "blocks.h"

#include "oscar/01_core/error.h"

namespace oscar::forward {

BlockFunction block_function(BlockUnit unit) {
  switch (unit) {
    case BlockUnit::llama: return block_llama;
    case BlockUnit::gemma3: return block_gemma3;
  }
  fail("internal: block unit {} has no block function (lib/src/02_model/forward/blocks.cpp)", static_cast<int>(unit));
}

void feed_forward_hidden(const BlockContext& b) {
  const ModelLayer& W = b.w();
  BlockScratch& s = b.s;
  linear(s.xb, W.w1, s.h1);
  linear(s.xb, W.w3, s.h3);
  switch (b.model.facts().ffn) {
    case FeedForward::swiglu: swiglu(s.h1, s.h3); break;
    case FeedForward::geglu_tanh: geglu_tanh(s.h1, s.h3); break;
  }
}

}  // namespace oscar::forward
