// plotting.h: runs a script of plots/ with the configured Python (the OSCAR_PYTHON environment variable,
// else the one found at configure time, else python3 on PATH). The scripts are found beside the running tool
// (../share/oscar-kv/plots from its folder, where the build copies them and `cmake --install` installs them),
// or in the folder OSCAR_PLOTS_DIR names. The script's stderr is captured: on failure the tool reports one
// line (the script's own one-line reason, or the write error it hit), and a SIGINT/SIGTERM stops the script too.
#pragma once
#include <string>
#include <vector>

namespace oscar {

std::string plots_script(const std::string& name);  // absolute path of plots/<name>; throws when missing
// Before the work: the script exists and a Python was configured (throws Error saying what to install).
void check_plotting(const std::string& name);
// Runs `script` with `args`; `output` names the file it draws, for error messages (empty: the script).
void run_python(const std::string& script, const std::vector<std::string>& args, const std::string& output = {});

}  // namespace oscar
