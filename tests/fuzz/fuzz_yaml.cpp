// fuzz_yaml.cpp: recipe files and sweep configs from strangers. The first byte picks the parser; a refusal
// (oscar::Error, naming the file and line) is the expected answer; an escaping yaml-cpp exception is a finding.
#include <cstdint>

#include "fuzz_input.h"
#include "oscar/01_core/error.h"
#include "oscar/05_recipe/recipe_yaml.h"
#include "oscar/12_sweep/sweep.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string path = oscar::fuzz::as_file(data + 1, size - 1, ".yaml");
  try {
    if (data[0] & 1) (void)oscar::load_sweep_config(path);
    else (void)oscar::load_recipe_file(path);
  } catch (const oscar::Error&) {
  }
  return 0;
}
