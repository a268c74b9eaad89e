// app_main.h: shared main() wrapper of the CLI tools: runs the body, turns oscar::Error and other
// exceptions into one "tool: error: ..." line on stderr and exit status 1.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <fmt/format.h>

#include "oscar/01_core/error.h"

namespace oscar {

template <class Body>
int run_app(const char* tool, CLI::App& app, int argc, char** argv, Body body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return body();
  } catch (const oscar::Error& e) {
    fmt::print(stderr, "{}: error: {}\n", tool, e.what());
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: unexpected error: {}\n", tool, e.what());
  }
  return 1;
}

}  // namespace oscar
