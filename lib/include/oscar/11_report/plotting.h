// plotting.h: runs a script of plots/ with the configured Python (OSCAR_PYTHON at configure time, or
// the OSCAR_PYTHON environment variable); throws Error with the script's exit status on failure.
#pragma once
#include <string>
#include <vector>

namespace oscar {

std::string plots_script(const std::string& name);  // absolute path of plots/<name>
void run_python(const std::string& script, const std::vector<std::string>& args);

}  // namespace oscar
