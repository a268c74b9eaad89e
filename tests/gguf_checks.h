// gguf_checks.h: the checks the GGUF reader's tests share: a model config against the expected one, field by field;
// whole tensors dequantized, against gguf-py's sha256s (float32 little-endian), and every tensor of a file finite.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "oscar/01_core/file_io.h"
#include "oscar/02_model/formats/gguf.h"
#include "same_fields.h"

namespace oscar::test {

// Every member of the model config as expected (rms_eps, a float32 in the file, to its precision).
inline void check_config(const GgufModelConfig& c, const GgufModelConfig& want) {
  using G = GgufModelConfig;
  check_same_fields(c, want, &G::architecture, &G::name, &G::n_layers, &G::dim, &G::ffn_dim, &G::n_heads, &G::n_kv_heads,
                    &G::head_dim, &G::rope_dims, &G::rope_base, &G::rope_scaling, &G::rope_scaling_factor,
                    &G::rope_freq_factors, &G::rope_convention, &G::context_length, &G::vocab_size, &G::tied_output,
                    &G::qk_norm, &G::qkv_bias, &G::sliding_window, &G::layer_windows, &G::rope_base_local,
                    &G::attention_scale, &G::tokenizer_model);
  CHECK(c.rms_eps == Approx(want.rms_eps).epsilon(1e-6));
}

inline std::vector<float> all_values(const GgufTensor& t) {
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  dequantize_rows(t, 0, t.n_rows(), v.data());
  return v;
}

// Each named tensor, whole, dequantized to float32: its sha256 is the expected one (gguf-py's).
inline void check_sha256s(const GgufFile& f, const std::map<std::string, std::string>& expect) {
  for (const auto& [name, sha] : expect) {
    INFO(name);
    const auto v = all_values(f.tensor(name));
    CHECK(sha256_hex(v.data(), v.size() * 4) == sha);
  }
}

// How many tensors of each ggml type the file holds.
inline std::map<std::string, int> tensor_types(const GgufFile& f) {
  std::map<std::string, int> n;
  for (const auto& t : f.tensors()) ++n[t.type_name()];
  return n;
}

// Every tensor of the file dequantized: how many values, and how many of them are not finite.
struct AllTensors {
  int64_t values = 0;
  size_t non_finite = 0;
};
inline AllTensors dequantize_all(const GgufFile& f) {
  AllTensors r;
  for (const auto& t : f.tensors()) {
    const auto v = all_values(t);
    r.values += static_cast<int64_t>(v.size());
    for (float x : v) r.non_finite += !std::isfinite(x);
  }
  return r;
}

}  // namespace oscar::test
