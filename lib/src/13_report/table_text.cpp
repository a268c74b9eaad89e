// table_text.cpp: cells, headers and JSON headers shared by the writers (table_text.h).
#include "oscar/13_report/table_text.h"

#include <cmath>

#include <fmt/format.h>

#include "oscar/01_core/file_io.h"
#include "oscar/01_core/version.h"

namespace oscar {

std::string metric_text(double v, const char* spec, bool csv) {
  if (std::isnan(v)) return csv ? std::string() : std::string("undefined");
  return fmt::format(fmt::runtime(spec), v);
}

std::string number_cell(double v, int width, int prec) {
  if (std::isnan(v)) return fmt::format("{:>{}}", "undefined", width);
  return fmt::format("{:>{}.{}f}", v, width, prec);
}

std::string csv_number(double v) { return metric_text(v, "{:.6g}", true); }

std::string markdown_header(const std::vector<std::string>& columns) {
  std::string head = "|", rule = "|";
  for (const std::string& c : columns) head += " " + c + " |", rule += "---|";
  return head + "\n" + rule + "\n";
}

nlohmann::json json_header(const std::string& tool) { return {{"tool", tool}, {"version", version()}}; }

std::string json_text(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace oscar
