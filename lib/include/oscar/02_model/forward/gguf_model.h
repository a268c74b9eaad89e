// gguf_model.h: a Model over a GGUF file of an architecture of the architecture table (architecture.h): llama
// (Llama 2/3, SmolLM2, Mistral), qwen2, qwen3, gemma3. The file stays memory-mapped; weight matrices stay in their
// stored types (dequantized block by block inside each product, weights.h) and only the small vectors (norm
// weights, qwen2's q/k/v biases, RoPE frequency factors) are converted to float32 at load. Loading checks every
// tensor the architecture needs (present, shape, dequantizable type) and throws oscar::Error naming the file and
// the tensor.
//
// Usage (the tools' wiring):
//   const GgufModel g = GgufModel::load(path);
//   const Model& m = g.model();           // forward / generate_greedy / KvCache(m.config()) as usual
//   info.model_name = g.name();           // "SmolLM2-135M-Instruct.Q4_1"
//   info.checkpoint_sha256 = g.sha256();  // of the whole file; computed on first call (streamed)
//
// Architecture choices, as llama.cpp runs them (the table's rows): llama rotates adjacent pairs (llama.cpp's normal
// RoPE, which is why GGUF stores llama's Q/K weights permuted), the others half-split pairs (neox); qwen2 adds
// q/k/v biases; qwen3 and gemma3 RMS-normalise each head of q and k (attn_q_norm / attn_k_norm, eps = the model's
// RMS eps) before RoPE, and their q_pre/k_pre in LayerQKV are after that norm; gemma3 adds post-attention and
// post-feed-forward norms (post_attention_norm, post_ffw_norm), GeGLU, sqrt(d)-scaled embeddings and its local
// layers (the file's attention.sliding_window, RoPE base 10000, five of every six layers). A missing output.weight
// means the classifier is token_embd.weight (tied). Llama 3.1's rope_freqs.weight divides the RoPE frequencies.
// Refused with an Error: other architectures, RoPE scaling types other than none, value heads of another width
// than key heads, tensor types dequantize() cannot convert, a q/k norm or bias the architecture does not have.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "oscar/02_model/formats/gguf.h"
#include "oscar/02_model/forward/model.h"

namespace oscar {

class GgufModel {
 public:
  // Opens, validates and maps `path` (gguf.h), reads its config (read_model_config) and builds the model.
  static GgufModel load(const std::string& path);

  GgufModel(GgufModel&&) noexcept;
  GgufModel& operator=(GgufModel&&) noexcept;
  ~GgufModel();

  const Model& model() const;
  const ModelConfig& config() const { return model().config(); }
  const GgufModelConfig& gguf_config() const;
  const GgufFile& file() const;
  const std::string& path() const;
  // The file name without folders and the ".gguf" suffix.
  const std::string& name() const;
  // Lower-case hex sha256 of the whole file, streamed from disk in 4 MiB reads on the first call and
  // cached (the first call is not thread-safe). Lazy because it costs: SmolLM2's 98 MB take ~0.25 s from
  // the page cache; an 8 GB file takes several seconds of CPU plus the time to read it from disk.
  const std::string& sha256() const;
  // "gguf Q4_1 (210 tensors), Q8_0 (1), F32 (61)": the stored types of the tensors in the file.
  std::string storage() const;

 private:
  struct Impl;
  explicit GgufModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The ModelConfig of a GGUF model (seq_len = the context length; hidden_dim = the feed-forward width).
ModelConfig model_config_from_gguf(const GgufModelConfig& g);

}  // namespace oscar
