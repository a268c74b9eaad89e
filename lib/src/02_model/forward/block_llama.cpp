// block_llama.cpp: the llama block: x += W_o attn(rmsnorm(x)); x += W_down (silu(W_gate h) * W_up h), h = rmsnorm(x).
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
  linear(s.xb, W.w1, s.h1);
  linear(s.xb, W.w3, s.h3);
  swiglu(s.h1, s.h3);
  linear_add(s.h1, W.w2, x);
}

}  // namespace oscar::forward
