// version.h: what every tool's --version and every JSON summary say about the run: the project's version and
// the date and time of the run (UTC).
#pragma once
#include <string>

namespace oscar {

std::string version();   // "0.1.0" (CMake's project version)
std::string utc_now();   // "2026-11-25T18:05:09Z"

}  // namespace oscar
