// plotting.cpp: locating and running plot scripts (posix_spawn, no shell; stderr through a pipe).
// Protocol with plots/plot_common.py: a script that fails prints one line on stderr; a write failure is
// "oscar-plot-errno: N" (turned into the same write error as the C++ writers'), a signal ends it quietly.
#include "oscar/13_report/plotting.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "oscar/01_core/error.h"
#include "oscar/01_core/interrupts.h"
#include "oscar/01_core/output_files.h"

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

std::string python() {
  const char* env = std::getenv("OSCAR_PYTHON");
  const std::string py = env ? env : default_python();
  if (py.empty())
    fail("no Python with numpy and matplotlib was found when the project was configured; install python3-matplotlib "
         "or set OSCAR_PYTHON");
  return py;
}

std::string last_line(const std::string& s) {
  size_t end = s.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return {};
  const size_t start = s.rfind('\n', end);
  return s.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
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

void check_plotting(const std::string& name) {
  (void)plots_script(name);
  const std::string py = python();
  bool found = false;
  if (py.find('/') != std::string::npos) {
    found = ::access(py.c_str(), X_OK) == 0;
  } else if (const char* path = std::getenv("PATH")) {
    std::string dirs = path;
    for (size_t a = 0; !found && a <= dirs.size();) {
      const size_t b = std::min(dirs.find(':', a), dirs.size());
      const std::string d = dirs.substr(a, b - a);
      found = ::access(((d.empty() ? std::string(".") : d) + "/" + py).c_str(), X_OK) == 0;
      a = b + 1;
    }
  }
  if (!found)
    fail("the Python for plots, '{}', cannot be run (no such program); install python3-matplotlib or set OSCAR_PYTHON",
         py);
}

void run_python(const std::string& script, const std::vector<std::string>& args, const std::string& output_name) {
  const std::string output = output_name.empty() ? script : output_name;
  const std::string py = python();
  std::vector<std::string> all{py, script};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) fail("cannot run {} (pipe: {})", script, std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, py.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(pipefd[1]);
  if (rc != 0) {
    ::close(pipefd[0]);
    fail("cannot start '{}' to run {} ({}); set OSCAR_PYTHON to a Python with matplotlib", py, script, std::strerror(rc));
  }
  interrupts::set_child(pid);  // a SIGINT/SIGTERM of the tool stops the script before temporaries are removed
  std::string err;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(pipefd[0], buf, sizeof buf);
    if (n > 0) {
      err.append(buf, static_cast<size_t>(n));
      if (err.size() > (1u << 20)) err.erase(0, err.size() - (1u << 16));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(pipefd[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  interrupts::set_child(0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  const std::string line = last_line(err);
  const std::string name = std::filesystem::path(script).filename().string();
  if (line.rfind("oscar-plot-errno: ", 0) == 0) {
    const int e = std::atoi(line.c_str() + 18);
    if (e > 0) fail_write(output, e);
  }
  if (WIFSIGNALED(status))
    fail("{}: the plot script {} was stopped by signal {} ({}); run the tool again", output, name, WTERMSIG(status),
         strsignal(WTERMSIG(status)));
  const int code = WEXITSTATUS(status);
  if (code == 128 + SIGINT || code == 128 + SIGTERM || code == 128 + SIGHUP)
    fail("{}: the plot script {} was interrupted; run the tool again", output, name);
  fail("{}: the plot script {} failed (exit status {}): {}", output, name, code,
       line.empty() ? std::string("no message; run it by hand to see why") : line);
}

}  // namespace oscar
