// real_activations.h: query/key/value activations of the bundled head_dim-128 model (kjv-llama-hd128) on
// a held-out KJV passage (Revelation, BOS + `tokens` - 1 tokens), from lib's CPU forward pass, head-major,
// for the GPU driver's real-activation decode cases. real_data_missing() names the first absent input
// file (those cases then report skipped); otherwise a load error is a failure, not a skip.
#pragma once
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "oscar/02_model/formats/checkpoint.h"
#include "oscar/02_model/forward/model.h"
#include "oscar/02_model/tokenizers/passage.h"
#include "oscar/02_model/tokenizers/tokenizer.h"

struct RealLayer {
  int n_heads = 0, n_kv_heads = 0, tokens = 0, head_dim = 0;
  int layer = 0;       // the model's layer number
  double scaling = 0;  // logit = scaling * q.k
  std::vector<float> q, k, v;  // head-major [heads][tokens][head_dim], after RoPE (q, k)
};

// The bundled data folder (OSCAR_DATA_DIR, compiled in).
inline std::string real_data_dir() { return OSCAR_DATA_DIR; }

// "" when the model, tokenizer and text are present, else the first missing path.
inline std::string real_data_missing() {
  const std::string d = real_data_dir();
  for (const std::string& p : {d + "/kjv-llama-hd128/kjv-llama-hd128.f16.part00", d + "/stories260K/tok512.bin", d + "/text/kjv.txt.gz"})
    if (!std::filesystem::exists(p)) return p;
  return "";
}

// Runs the CPU forward pass over `tokens` tokens (BOS included) of the held-out Revelation text.
inline std::vector<RealLayer> real_activations(int tokens) {
  const std::string dir = real_data_dir();
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
    r.layer = l.layer; r.scaling = 1.0 / std::sqrt(double(d));
    to_heads(l.q, c.n_heads, r.q);
    to_heads(l.k, c.n_kv_heads, r.k);
    to_heads(l.v, c.n_kv_heads, r.v);
  });
  return out;
}
