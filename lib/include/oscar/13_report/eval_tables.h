// eval_tables.h: oscar-eval's outputs: the Markdown tables (main, recall, greedy), the CSVs, the JSON and the recall
// plot; with --tasks the task tables (task_tables.h).
#pragma once
#include <string>

#include "oscar/11_eval/eval_types.h"

namespace oscar {

// A row's recipe as the tables show it: "NAME (gpu)" when it attended on the GPU.
std::string eval_label(const std::string& recipe, bool gpu);
std::string eval_markdown(const EvalRequest& req, const EvalResult& r);
std::string eval_csv(const EvalResult& r);    // eval.csv
std::string recall_csv(const EvalResult& r);  // recall.csv
// eval.json: the version and date of the run, the request's budget and metric, every row with its intervals, the
// recall and greedy rows, the verdict and the warnings.
std::string eval_json(const EvalRequest& req, const EvalResult& r);

// OUT/eval.csv, eval.md, eval.json, recall.csv, recall.png (when a recall test ran); with --tasks OUT/tasks.md,
// tasks.csv (the cells) and answers.jsonl (every sample's answer and score) instead; all or nothing.
void write_eval_outputs(const EvalRequest& req, const EvalResult& r, const std::string& out_dir);

}  // namespace oscar
