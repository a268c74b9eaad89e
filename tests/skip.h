// skip.h: how a Catch2 case whose input data may be absent reports itself skipped, never passed. Tag the
// case [optional-data] and start it with OSCAR_SKIP_UNLESS_EXISTS(path, what): when `path` is missing it
// prints the fixed marker "OSCAR-SKIPPED:" with the reason and returns; tests/CMakeLists.txt runs such cases
// as their own CTest entry with SKIP_REGULAR_EXPRESSION "OSCAR-SKIPPED:", which CTest reports as skipped.
#pragma once
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#define OSCAR_SKIP_UNLESS_EXISTS(path, what)                                                              \
  do {                                                                                                   \
    const std::string oscar_skip_path_ = (path);                                                         \
    if (!std::filesystem::exists(oscar_skip_path_)) {                                                    \
      std::printf("OSCAR-SKIPPED: %s is absent: %s\n", oscar_skip_path_.c_str(), std::string(what).c_str()); \
      WARN("OSCAR-SKIPPED: " << oscar_skip_path_ << " is absent: " << (what));                           \
      return;                                                                                            \
    }                                                                                                    \
  } while (0)
