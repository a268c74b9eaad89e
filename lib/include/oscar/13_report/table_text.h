// table_text.h: what every table, CSV and JSON writer of report/ shares: a number as a cell ("undefined" for an
// undefined value, never 0), as a CSV field (empty when undefined), a Markdown header row, and the header of every JSON
// output (the tool, oscar-kv's version and the date).
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace oscar {

// `v` in fmt `spec` ("{:.4f}"); "undefined" (or, in a CSV, "") when it is NaN.
std::string metric_text(double v, const char* spec, bool csv);
// `v` with `prec` decimals right-aligned in `width` columns; "undefined" when it is NaN.
std::string number_cell(double v, int width, int prec);
// `v` for a CSV field ({:.6g}); empty when it is NaN.
std::string csv_number(double v);
// "| a | b |\n|---|---|\n".
std::string markdown_header(const std::vector<std::string>& columns);
// {"tool": tool, "version": oscar-kv's version}: the first fields of every JSON output (no date, so that a rerun
// rewrites its outputs bit for bit).
nlohmann::json json_header(const std::string& tool);
// `j` as the JSON file's text (`indent` spaces, invalid UTF-8 replaced), with a final line break.
std::string json_text(const nlohmann::json& j, int indent = 2);

}  // namespace oscar
