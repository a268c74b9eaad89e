// dump.h: KV dump format v2 (HDF5; README "Dump format"). Root attributes describe the model (with its
// architecture and configuration as JSON) and passage; /token_ids int32 [T]; optional /token_text
// (strings, [T]); one group per layer, /layer_000 .., whose attributes say what attention received
// (LayerAttention: scaling, sliding window, soft-cap, RoPE) and which holds q [n_heads, T, head_dim] and
// k, v [n_kv_heads, T, head_dim] (after RoPE), q_pre/k_pre (before RoPE) only when has_pre_rope, and
// optional sinks float32 [n_heads]; tensors are float32 or float16 in chunks of [1, <=1024, head_dim], so
// one layer or one head reads alone. DumpWriter writes v2 through a temporary file renamed on finish();
// DumpReader reads v1 (with v1's implicit attention, see DumpInfo) and v2, validates attributes, shapes and
// dtypes against each other (n_layers against the layer groups present) and streams one layer (or one
// head) at a time.
#pragma once
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "oscar/01_core/attention.h"
#include "oscar/01_core/tensor.h"
#include "oscar/02_model/forward/model.h"

namespace oscar {

inline constexpr const char* kDumpFormat = "oscar-kv-dump";
inline constexpr int kDumpVersion = 2;  // written; versions 1 and 2 are read

struct DumpInfo {
  std::string model_name;
  std::string checkpoint_sha256;
  int n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  std::string rope_convention = "adjacent-pairs";  // or "half-split" (Hugging Face rotate_half)
  double rope_theta = 10000.0;
  std::string text_source;
  long token_count = 0;
  std::string storage_dtype = "float32";  // or "float16"
  // Optional, written by oscar-dump; absent (NaN / empty) in dumps from other tools.
  double mean_next_token_loss = std::numeric_limits<double>::quiet_NaN();
  std::string producer;
  // v2 (a v1 file reads as: "llama", "", true, and no per-layer entries).
  int format_version = kDumpVersion;  // of the file read; what a writer writes is always kDumpVersion
  std::string architecture = "llama";  // HF model_type / GGUF general.architecture
  std::string config_json;             // the model's configuration as a JSON object ("" in v1 files)
  bool has_pre_rope = true;            // every layer holds q_pre and k_pre (none does when false)
  // Per layer, what attention received; empty means every layer is LayerAttention::standard (v1's view).
  std::vector<LayerAttention> layers;

  // Layer l's attention: layers[l], or standard attention with the root's RoPE when `layers` is empty.
  LayerAttention attention(int l) const;
};

// Fills the model fields of `info` from a model's configuration: shapes, RoPE, architecture, config_json
// (the ModelConfig's fields as a JSON object), has_pre_rope = true and one LayerAttention per layer (the config's
// scale, the layer's sliding window and RoPE base, no soft-cap, rotary_dim = the config's rotary dims, no sinks).
void set_model_fields(DumpInfo& info, const ModelConfig& cfg);


struct LayerDump {
  int layer = 0;
  HeadTensor q, q_pre, k, k_pre, v;
};

class DumpWriter {
 public:
  DumpWriter(const std::string& path, const DumpInfo& info, const std::vector<int>& token_ids,
             const std::vector<std::string>& token_text);
  ~DumpWriter();
  // Rows are tokens, columns head-major; called once per layer, in any order. Throws on NaN/Inf. q_pre and
  // k_pre are written only when info.has_pre_rope (otherwise they are ignored and may be empty); the
  // layer's attributes and sinks come from info.attention(layer), validated when the writer is made.
  void write_layer(const LayerQKV& a);
  void set_mean_next_token_loss(double loss);  // root attribute, known only after the forward pass
  void finish();  // checks that every layer was written, closes, and renames into place

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class DumpReader {
 public:
  explicit DumpReader(const std::string& path);
  // A dump held in memory as an HDF5 file image (read from standard input); messages and path() call it `name`.
  DumpReader(const std::vector<char>& image, const std::string& name);
  ~DumpReader();
  DumpReader(DumpReader&&) noexcept;
  const DumpInfo& info() const;
  const std::string& path() const;
  const std::vector<int>& token_ids() const;
  const std::vector<std::string>& token_text() const;  // empty when the dump has none
  // Reads the named tensors of one layer ("q", "q_pre", "k", "k_pre", "v"); others stay empty. The
  // layer's other tensors are checked for NaN/Inf too (the first time the layer is read). Throws Error
  // naming file, layer and dataset on a shape or dtype mismatch or a non-finite value, and for q_pre/k_pre
  // in a dump without them (has_pre_rope = 0). Safe to call from
  // several threads: HDF5 is entered by one at a time, float16 decoding and checks run in parallel.
  LayerDump read_layer(int layer, const std::vector<std::string>& tensors) const;
  // One head of one tensor: [T, head_dim] row-major.
  std::vector<float> read_head(int layer, const std::string& tensor, int head) const;

 private:
  [[noreturn]] void no_pre_rope(const std::string& tensor) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace oscar
