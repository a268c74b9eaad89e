// plotting.cpp: locating and running plot scripts (posix_spawn, no shell).
#include "oscar/11_report/plotting.h"

#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>

#include "oscar/01_core/error.h"

extern char** environ;

namespace oscar {

namespace {

// Where the build puts the plot scripts and `cmake --install` installs them, relative to the folder of the
// tools (build/apps/ and build/tests/ in the build tree, PREFIX/bin/ when installed).
constexpr const char* kPlotsBesideTools = "../share/oscar-kv/plots";

// The folder of the running executable, from /proc/self/exe ("" when it cannot be read).
std::filesystem::path executable_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : exe.parent_path();
}

// The interpreter: the one found with numpy and matplotlib at configure time when it still exists, else
// python3 on PATH.
std::string default_python() {
  const std::string configured = OSCAR_PYTHON_DEFAULT;
  std::error_code ec;
  if (!configured.empty() && std::filesystem::exists(configured, ec)) return configured;
  return "python3";
}

}  // namespace

std::string plots_script(const std::string& name) {
  const char* env = std::getenv("OSCAR_PLOTS_DIR");
  std::filesystem::path dir;
  if (env && *env) {
    dir = env;
  } else {
    const std::filesystem::path exe_dir = executable_dir();
    if (exe_dir.empty()) fail("cannot read /proc/self/exe to find the plot scripts; set OSCAR_PLOTS_DIR to the project's plots/ folder");
    dir = (exe_dir / kPlotsBesideTools).lexically_normal();
  }
  const auto p = dir / name;
  if (!std::filesystem::exists(p))
    fail("plot script {} not found ({}); set OSCAR_PLOTS_DIR to the project's plots/ folder", p.string(),
         env && *env ? "OSCAR_PLOTS_DIR names the folder" : "the build and `cmake --install` put plots/ there, beside the tools");
  return p.string();
}

void run_python(const std::string& script, const std::vector<std::string>& args) {
  const char* env = std::getenv("OSCAR_PYTHON");
  const std::string py = env ? env : default_python();
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
