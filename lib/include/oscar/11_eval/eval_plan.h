// eval_plan.h: what oscar-eval will run, decided before any decoding (plan_eval): every option checked, the jobs (every
// recipe at every width, jobs.h; --gpu's support checked for each), the evaluated passage, the other text that the recall
// test and the greedy prompt read, and where the calibrated recipes' rotations come from (a calibration passage of the
// same model, or --calib-dump), checked by content against the evaluated data. Each error names the option to change.
#pragma once
#include <memory>
#include <vector>

#include "oscar/02_model/loaded_model.h"
#include "oscar/03_dump/layer_source.h"
#include "oscar/10_plan/jobs.h"
#include "oscar/11_eval/eval_types.h"

namespace oscar {

// Where the calibrated recipes' rotations come from (none is needed when no recipe is calibrated).
struct CalibrationSource {
  bool needed = false, per_kv_head = false;
  PassageOrigin passage;                  // the calibration passage, run through the model in memory
  std::unique_ptr<DumpLayerSource> dump;  // or --calib-dump
};

struct EvalPlan {
  std::vector<Job> jobs;
  std::vector<TaskSample> tasks;  // --tasks: the samples (then no passage rows, recall or greedy)
  Passage passage;                // the evaluated passage, BOS first
  Passage filler;                 // other text for the recall test and the greedy context (empty when neither runs)
  int newline = 0;                // the newline token, when `filler` is set
  int recall_lead = 0;            // tokens of other text before the recalled passage (past every recipe's sink)
  std::vector<int> prompt;        // --prompt, encoded
  int generate_context = 0;       // tokens of other text before the greedy prompt
  CalibrationSource calibration;
};

// The checks that need no file: each bad value is one Error naming its option (--recall, --recall-span,
// --prompt/--generate, --bits, --tokens, --calib-tokens, --tasks with --recall/--generate/--gpu, --metric).
void validate_eval_options(const EvalRequest& req);
// Checks the options, the output folder and the task file, then plans the run on the loaded model: no decoding.
EvalPlan plan_eval(const EvalRequest& req, const LoadedModel& lm);

}  // namespace oscar
