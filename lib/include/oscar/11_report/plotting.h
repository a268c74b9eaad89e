// plotting.h: runs a script of plots/ with the configured Python (the OSCAR_PYTHON environment variable,
// else the one found at configure time, else python3 on PATH); throws Error with the script's exit status
// on failure. The scripts are found beside the running tool (../share/oscar-kv/plots from its folder, where
// the build copies them and `cmake --install` installs them), or in the folder OSCAR_PLOTS_DIR names.
#pragma once
#include <string>
#include <vector>

namespace oscar {

std::string plots_script(const std::string& name);  // path of plots/<name>
void run_python(const std::string& script, const std::vector<std::string>& args);

}  // namespace oscar
