// gguf.h: read-only access to a GGUF model file (versions 2 and 3, little-endian), memory-mapped:
// the header, every metadata key/value, the tensor infos and each tensor's stored bytes, which stay in
// the page cache (nothing is copied or converted when the file opens). open() validates the whole
// layout (magic, version, every length and tensor byte range against the file size, alignment) and
// throws oscar::Error naming the file, what is wrong and what to do; accessors throw the same way.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "oscar/02_model/formats/gguf_dequant.h"

namespace oscar {

// GGUF metadata value types (the on-disk ids).
enum class GgufValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
  U64 = 10, I64 = 11, F64 = 12,
};
const char* gguf_value_type_name(GgufValueType t);  // "uint32", "array", ...

// One tensor of the file. `dims` is ggml's order: dims[0] is the row length (the fastest-varying
// index), the product of the others the number of rows; a [out, in] weight matrix has dims {in, out}.
struct GgufTensor {
  std::string file;            // path of the GGUF, for messages
  std::string name;
  uint32_t type = 0;           // ggml type id (GgmlType), possibly one dequantize() refuses
  std::vector<int64_t> dims;   // 1 to 4 entries
  uint64_t offset = 0;         // from the start of the data section
  const uint8_t* data = nullptr;  // first byte, inside the mapping
  uint64_t n_bytes = 0;

  GgmlType ggml_type() const { return static_cast<GgmlType>(type); }
  const char* type_name() const { return ggml_type_name(type); }
  int64_t row_length() const { return dims.empty() ? 0 : dims[0]; }
  int64_t n_rows() const;
  int64_t n_elements() const { return row_length() * n_rows(); }
  uint64_t row_bytes() const { return n_rows() ? n_bytes / static_cast<uint64_t>(n_rows()) : 0; }
  std::span<const uint8_t> bytes() const { return {data, static_cast<size_t>(n_bytes)}; }
  std::string shape_string() const;  // "576x49152"
};

class GgufFile {
 public:
  // Maps and validates `path`. Throws Error when the file cannot be read, is not GGUF (magic), has a
  // version other than 2 or 3, is truncated anywhere, has a tensor whose bytes lie past the end of the
  // file, a tensor of a type id unknown to ggml_type_known(), a non-power-of-two alignment, or two
  // tensors of one name.
  static GgufFile open(const std::string& path);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::string& path() const;
  uint32_t version() const;
  uint64_t file_size() const;
  uint32_t alignment() const;      // general.alignment, or 32
  uint64_t data_offset() const;    // where the tensor data section starts

  // Metadata. Keys in file order. The typed getters throw Error naming the key and the file when the
  // key is missing or holds a value of another kind. Integer getters accept any integer type whose
  // value fits the requested one; float getters accept float32, float64 and integers.
  const std::vector<std::string>& keys() const;
  bool has(const std::string& key) const;
  GgufValueType value_type(const std::string& key) const;
  GgufValueType array_type(const std::string& key) const;  // element type of an array value
  uint64_t array_size(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  uint32_t get_u32(const std::string& key) const;
  int32_t get_i32(const std::string& key) const;
  uint64_t get_u64(const std::string& key) const;
  int64_t get_i64(const std::string& key) const;
  float get_f32(const std::string& key) const;
  double get_f64(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<float> get_f32_array(const std::string& key) const;      // float32 or float64 elements
  std::vector<int32_t> get_i32_array(const std::string& key) const;    // any integer elements that fit
  std::vector<int64_t> get_i64_array(const std::string& key) const;
  std::vector<uint8_t> get_bool_array(const std::string& key) const;   // 0/1
  // A human-readable rendering of a value (arrays: type, length and the first elements).
  std::string value_string(const std::string& key) const;

  // Tensors, in file order.
  const std::vector<GgufTensor>& tensors() const;
  bool has_tensor(const std::string& name) const;
  const GgufTensor& tensor(const std::string& name) const;  // throws Error naming name and file
  // Throws Error naming the first tensor whose type dequantize() cannot convert, the count of such
  // tensors, and the supported types.
  void require_dequantizable() const;

 private:
  struct Impl;
  explicit GgufFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Rows row0 .. row0+nrows-1 of `t` as float32 into dst[0 .. nrows*row_length). Throws Error naming the
// tensor when its type cannot be dequantized or the rows lie outside it. Large requests run on the
// OpenMP threads (rows are independent).
void dequantize_rows(const GgufTensor& t, int64_t row0, int64_t nrows, float* dst);
// The same as bfloat16 bit patterns (round to nearest even).
void dequantize_rows_bf16(const GgufTensor& t, int64_t row0, int64_t nrows, uint16_t* dst);

// What a transformer runner needs from the metadata of a GGUF of a supported architecture (architecture.h), with
// the architecture's facts that the file does not store (sliding-window pattern, local RoPE base, attention scale).
struct GgufModelConfig {
  std::string architecture;  // "llama", "qwen2", "qwen3", "gemma3"
  std::string name;          // general.name, or the file name
  int n_layers = 0;          // {arch}.block_count
  int dim = 0;               // {arch}.embedding_length
  int ffn_dim = 0;           // {arch}.feed_forward_length
  int n_heads = 0;           // {arch}.attention.head_count
  int n_kv_heads = 0;        // {arch}.attention.head_count_kv (n_heads when absent)
  int head_dim = 0;          // {arch}.attention.key_length, or dim / n_heads
  int rope_dims = 0;         // {arch}.rope.dimension_count, or head_dim
  double rope_base = 10000;  // {arch}.rope.freq_base
  std::string rope_scaling;  // {arch}.rope.scaling.type ("linear", "yarn", ...); empty when absent or "none"
  double rope_scaling_factor = 1;  // {arch}.rope.scaling.factor
  bool rope_freq_factors = false;  // rope_freqs.weight present (per-dimension divisors, Llama 3.1 style)
  // llama.cpp's RoPE for the architecture: "adjacent-pairs" (llama: rotates channels 2i, 2i+1) or
  // "half-split" (qwen2, qwen3: i and i + rope_dims/2), the dump format's names.
  std::string rope_convention;
  double rms_eps = 1e-5;     // {arch}.attention.layer_norm_rms_epsilon
  int context_length = 0;    // {arch}.context_length
  int vocab_size = 0;        // rows of token_embd.weight
  bool tied_output = false;  // no output.weight: the classifier is token_embd.weight
  bool qk_norm = false;      // per-head RMSNorm of q and k (blk.0.attn_q_norm.weight present; qwen3)
  bool qkv_bias = false;     // blk.0.attn_q.bias present (qwen2)
  int sliding_window = 0;    // {arch}.attention.sliding_window of an architecture with local layers (gemma3)
  std::vector<int> layer_windows;  // per layer: sliding_window for local layers, 0 for global; empty: all global
  double rope_base_local = 0;      // RoPE base of local layers (0: rope_base)
  double attention_scale = 0;      // logit factor when not 1/sqrt(head_dim) (gemma3 27B), else 0
  std::string tokenizer_model;  // tokenizer.ggml.model ("gpt2", "llama", ...)
};

// Reads the config. Throws Error when the architecture is not in the architecture table (naming it and the
// supported ones), a required key is missing or implausible (heads not dividing the dimensions; an architecture
// with local layers without a window), the tokenizer metadata (tokenizer.ggml.model, tokenizer.ggml.tokens;
// merges for gpt2) is missing, or the vocabulary disagrees with token_embd.weight.
GgufModelConfig read_model_config(const GgufFile& f);

}  // namespace oscar
