// error.h: the one exception type of lib/, carrying a message that names the file and the fix.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>
#include <utility>

namespace oscar {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace oscar
