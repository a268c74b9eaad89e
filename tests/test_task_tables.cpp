// test_task_tables.cpp: the long-context task tables (13_report/task_tables.h) on made-up results: counts in words
// that agree with them, a pooled table only when there is more than one task, and a sentence wherever a recipe's
// interval overlaps the best one's at a length.
#include <catch2/catch.hpp>

#include "oscar/13_report/task_tables.h"

using namespace oscar;

namespace {

TaskCell cell(const std::string& recipe, const std::string& task, int length, int n, double score, double lo, double hi) {
  TaskCell c;
  c.recipe = recipe, c.task = task, c.length = length, c.n = n, c.score = score, c.ci = {lo, hi};
  return c;
}

// One passkey sample at 1K per recipe, or `n` of them, with the given intervals.
TaskResults results(const std::vector<std::string>& tasks, int n, Interval full, Interval quantized) {
  TaskResults r;
  r.file = "tasks.jsonl";
  r.recipes = {"fp16", "kivi@2"};
  r.tasks = tasks;
  r.lengths = {1024};
  for (const std::string& recipe : r.recipes)
    for (const std::string& t : tasks)
      for (int i = 0; i < n; ++i) r.outcomes.push_back(TaskOutcome{.recipe = recipe, .task = t, .length = 1024});
  std::vector<std::string> all = tasks;
  all.push_back("all");
  for (const std::string& t : all) {
    r.cells.push_back(cell("fp16", t, 1024, n, n, full.lo, full.hi));
    r.cells.push_back(cell("kivi@2", t, 1024, n, n - 1, quantized.lo, quantized.hi));
  }
  return r;
}

}  // namespace

TEST_CASE("task tables: one task gets no pooled table, counts agree in number", "[task_tables]") {
  const std::string md = tasks_markdown(results({"passkey"}, 1, {0.2, 1.0}, {0.0, 0.8}), "m");
  CHECK(md.find("(1 sample;") != std::string::npos);
  CHECK(md.find("pooled") == std::string::npos);
  CHECK(md.find("`passkey`:") != std::string::npos);
  const std::string two = tasks_markdown(results({"passkey", "niah_single"}, 6, {0.6, 1.0}, {0.3, 0.9}), "m");
  CHECK(two.find("(12 samples;") != std::string::npos);
  CHECK(two.find("All tasks pooled (2 tasks, at least 6 samples per task and length):") != std::string::npos);
}

TEST_CASE("task tables: overlapping intervals are said not to rank the recipes", "[task_tables]") {
  const std::string tied = tasks_markdown(results({"passkey"}, 6, {0.6, 1.0}, {0.3, 0.9}), "m");
  CHECK(tied.find("At 1K the 95% intervals of kivi@2 overlap that of fp16, the highest there: these samples cannot rank them") !=
        std::string::npos);
  const std::string apart = tasks_markdown(results({"passkey"}, 6, {0.6, 1.0}, {0.0, 0.4}), "m");
  CHECK(apart.find("cannot rank") == std::string::npos);
}
