// plotting.cpp: locating and running plot scripts (posix_spawn, no shell).
#include "oscar/11_report/plotting.h"

#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>

#include "oscar/01_core/error.h"

extern char** environ;

namespace oscar {

std::string plots_script(const std::string& name) {
  const char* env = std::getenv("OSCAR_PLOTS_DIR");
  const std::filesystem::path dir = env ? env : OSCAR_SOURCE_DIR "/plots";
  const auto p = dir / name;
  if (!std::filesystem::exists(p)) fail("plot script {} not found (set OSCAR_PLOTS_DIR to the project's plots/ folder)", p.string());
  return p.string();
}

void run_python(const std::string& script, const std::vector<std::string>& args) {
  const char* env = std::getenv("OSCAR_PYTHON");
  const std::string py = env ? env : OSCAR_PYTHON_DEFAULT;
  if (py.empty())
    fail("no Python with numpy and matplotlib was found when the project was configured; install python3-matplotlib "
         "or set OSCAR_PYTHON");
  std::vector<std::string> all{py, script};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  if (posix_spawnp(&pid, py.c_str(), nullptr, nullptr, argv.data(), environ) != 0)
    fail("cannot start '{}' to run {} (set OSCAR_PYTHON to a Python with matplotlib)", py, script);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail("{} {} failed (exit status {}); see its message above", py, script, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

}  // namespace oscar
