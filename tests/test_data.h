// test_data.h: paths of the bundled data and of scratch files for tests.
#pragma once
#include <filesystem>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace oscar::test {

inline std::string data(const std::string& rel) { return std::string(OSCAR_DATA_DIR) + "/" + rel; }
inline std::string stories_model() { return data("stories260K/stories260K.bin"); }
inline std::string stories_tokenizer() { return data("stories260K/tok512.bin"); }
inline std::string hd128_model() { return data("kjv-llama-hd128/kjv-llama-hd128.f16"); }
inline std::string kjv_text() { return data("text/kjv.txt.gz"); }
// SmolLM2-135M-Instruct's GGUF (data/fetch_smollm2.sh puts it in data/models/; OSCAR_SMOLLM2_GGUF overrides).
inline std::string smollm2_gguf() {
  if (const char* p = std::getenv("OSCAR_SMOLLM2_GGUF")) return p;
  return data("models/SmolLM2-135M-Instruct.Q4_1.gguf");
}
// Gemma 3 270M's GGUF (data/fetch_gemma3.sh puts it in data/models/; OSCAR_GEMMA3_GGUF overrides).
inline std::string gemma3_gguf() {
  if (const char* p = std::getenv("OSCAR_GEMMA3_GGUF")) return p;
  return data("models/gemma-3-270m-q4_k_m.gguf");
}
// The original float32 file, present only where ../shared/data exists.
inline std::string shared_hd128_fp32() { return std::string(OSCAR_SHARED_DATA_DIR) + "/kjv-llama-hd128/kjv-llama-hd128.bin"; }

// A fresh scratch folder per test process, removed with everything in it when the process exits normally.
inline std::filesystem::path scratch() {
  struct Folder {
    std::filesystem::path path;
    Folder() : path(std::filesystem::temp_directory_path() / ("oscar-test-" + std::to_string(::getpid()))) {
      std::filesystem::create_directories(path);
    }
    ~Folder() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Folder dir;
  return dir.path;
}

}  // namespace oscar::test
