// task_tables.h: oscar-eval --tasks' outputs: the Markdown (a pooled table over tasks, recipe x length, and one table per
// task), the CSV of the cells and the JSONL of every answer (answers.jsonl).
#pragma once
#include <string>

#include "oscar/11_eval/task_eval.h"

namespace oscar {

// Markdown: the pooled table (recipe x length) and one table per task; CSV of the cells; JSONL of every answer (answers.jsonl).
std::string tasks_markdown(const TaskResults& r, const std::string& model_name);
std::string tasks_csv(const TaskResults& r);
std::string tasks_outcomes_jsonl(const TaskResults& r);

}  // namespace oscar
