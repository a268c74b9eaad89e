// block_gemma3.cpp: the Gemma 3 block (sandwich norms):
//   x += post_att_norm(W_o attn(att_norm(x)));  x += post_ffn_norm(W_down act(W_gate h) * W_up h), h = ffn_norm(x) (GeGLU, tanh approximation).
// Attention has per-head q/k norms, the layer's RoPE base and, in local layers, the sliding window (ops.cpp).
#include "blocks.h"

namespace oscar::forward {

void block_gemma3(const BlockContext& b, MatrixRM& x) {
  const ModelLayer& W = b.w();
  const float eps = static_cast<float>(b.model.config().rms_eps);
  BlockScratch& s = b.s;
  rmsnorm_rows(x, W.rms_att, eps, s.xb);
  attention(b);
  linear(s.att, W.wo, s.o);
  rmsnorm_rows(s.o, W.post_att_norm, eps, s.xb);
  x += s.xb;
  rmsnorm_rows(x, W.rms_ffn, eps, s.xb);
  feed_forward_hidden(b);
  linear(s.h1, W.w2, s.o);
  rmsnorm_rows(s.o, W.post_ffn_norm, eps, s.xb);
  x += s.xb;
}

}  // namespace oscar::forward
