// dump_fixture.h: writes a small real dump (stories260K over a KJV passage) for tests, once per process.
#pragma once
#include <filesystem>
#include <string>

#include "oscar/03_dump/dump_passage.h"
#include "test_data.h"

namespace oscar::test {

inline std::string small_dump(const std::string& dtype = "float32", int tokens = 96) {
  const std::string path = (scratch() / ("small_" + dtype + "_" + std::to_string(tokens) + ".h5")).string();
  if (!std::filesystem::exists(path)) {
    DumpRequest r;
    r.model = stories_model();
    r.tokenizer = stories_tokenizer();
    r.text = kjv_text();
    r.offset = 0;
    r.tokens = tokens;
    r.out = path;
    r.dtype = dtype;
    r.progress = false;
    dump_passage(r);
  }
  return path;
}

}  // namespace oscar::test
