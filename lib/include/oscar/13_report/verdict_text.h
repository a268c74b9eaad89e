// verdict_text.h: the verdict (08_metrics/verdict.h) as the tables and the terminal say it.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "oscar/08_metrics/verdict.h"

namespace oscar {

// A short paragraph for the terminal and the Markdown: the pick, the runner-up, the margin with its interval,
// and what was left out and why.
std::string verdict_text(const Verdict& v, const Budget& budget, const VerdictMetric& metric);
// The verdict's fields in eval.json and summary.json: found, pick, value, runner_up, margin_lo/hi, significant,
// over_budget, mostly_full_precision and its paragraph (undefined numbers as null).
nlohmann::json verdict_json(const Verdict& v, const Budget& budget, const VerdictMetric& metric);

}  // namespace oscar
