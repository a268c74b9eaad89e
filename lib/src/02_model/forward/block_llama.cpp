// block_llama.cpp: the llama block: x += W_o attn(rmsnorm(x)); x += W_down act(W_gate h) * W_up h, h = rmsnorm(x)
// (the activation from the architecture table: SwiGLU for llama, qwen2, qwen3).
#include "blocks.h"

namespace oscar::forward {

void block_llama(const BlockContext& b, MatrixRM& x) {
  const ModelLayer& W = b.w();
  const float eps = static_cast<float>(b.model.config().rms_eps);
  BlockScratch& s = b.s;
  rmsnorm_rows(x, W.rms_att, eps, s.xb);
  attention(b);
  linear_add(s.att, W.wo, x);
  rmsnorm_rows(x, W.rms_ffn, eps, s.xb);
  feed_forward_hidden(b);
  linear_add(s.h1, W.w2, x);
}

}  // namespace oscar::forward
