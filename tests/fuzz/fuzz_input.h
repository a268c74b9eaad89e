// fuzz_input.h: the fuzzer's bytes as a file of this process (the readers take paths), rewritten for every input.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace oscar::fuzz {

// Writes data[0..size) to a per-process scratch file ending in `ext` and returns its path.
inline std::string as_file(const uint8_t* data, size_t size, const char* ext) {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("oscar-fuzz-" + std::to_string(::getpid()) + ext)).string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace oscar::fuzz
