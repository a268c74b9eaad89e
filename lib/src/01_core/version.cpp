// version.cpp: the project version (compiled in by lib/CMakeLists.txt) and the run's UTC time.
#include "oscar/01_core/version.h"

#include <ctime>

namespace oscar {

std::string version() { return OSCAR_VERSION; }

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace oscar
