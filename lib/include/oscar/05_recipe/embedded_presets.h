// embedded_presets.h: the preset recipes (experiments/presets/*.yaml) compiled into the library at build
// time (lib/cmake/embed_presets.cmake writes the table), so that tools load them without the source tree.
// Contract: kPresets in file-name order; each text is the file's bytes, NUL-terminated.
#pragma once
#include <cstddef>

namespace oscar::embedded {

struct Preset {
  const char* name;  // file name without .yaml
  const char* text;  // the YAML
  std::size_t size;  // bytes of text, without the terminating NUL
};
extern const Preset kPresets[];
extern const int kPresetCount;

}  // namespace oscar::embedded
