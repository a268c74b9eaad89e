// gpu_test_real_host.cpp: the host part of gpu_test_real: the bundled head_dim-128 model's activations
// (lib's CPU forward pass) on held-out text, reshaped head-major for the kernel tests.
#include "real_activations.h"

#include <string>

#include "oscar/02_model/checkpoint.h"
#include "oscar/02_model/model.h"
#include "oscar/02_model/passage.h"
#include "oscar/02_model/tokenizer.h"

std::vector<RealLayer> real_activations(int tokens) {
  const std::string dir = OSCAR_DATA_DIR;
  const oscar::Checkpoint ck = oscar::load_checkpoint(dir + "/kjv-llama-hd128/kjv-llama-hd128.f16");
  const oscar::ModelConfig& c = ck.config;
  const oscar::Tokenizer tok = oscar::Tokenizer::load(dir + "/stories260K/tok512.bin", c.vocab_size);
  const std::string text = dir + "/text/kjv.txt.gz";
  const auto lines = oscar::read_lines(text);
  const oscar::Passage p = oscar::select_passage(text, lines, -404, tokens, tok);
  const int d = c.head_dim();
  std::vector<RealLayer> out(c.n_layers);
  auto to_heads = [&](const oscar::MatrixRM& m, int heads, std::vector<float>& dst) {
    dst.resize(static_cast<size_t>(heads) * tokens * d);
    for (int h = 0; h < heads; ++h)
      for (int t = 0; t < tokens; ++t)
        for (int i = 0; i < d; ++i) dst[(static_cast<size_t>(h) * tokens + t) * d + i] = m(t, h * d + i);
  };
  oscar::Model model(ck);
  oscar::KvCache cache(c);
  model.forward(p.tokens, cache, [&](const oscar::LayerQKV& l) {
    RealLayer& r = out[l.layer];
    r.n_heads = c.n_heads; r.n_kv_heads = c.n_kv_heads; r.tokens = tokens; r.head_dim = d;
    to_heads(l.q, c.n_heads, r.q);
    to_heads(l.k, c.n_kv_heads, r.k);
    to_heads(l.v, c.n_kv_heads, r.v);
  });
  return out;
}
