// eval_steps.h: the steps of run_eval (eval.h) over a plan (eval_plan.h), in their order: the rotations of the
// calibrated recipes, the teacher-forced rows, the recall test, greedy generation, the long-context tasks, and the
// ranking of the rows by the verdict. Each step fills its part of the EvalResult.
#pragma once
#include <memory>
#include <string>

#include "oscar/01_core/progress.h"
#include "oscar/06_rotate/rotation.h"
#include "oscar/11_eval/eval_plan.h"

namespace oscar {

// Consecutive predictions resampled together in the bootstrap intervals (their losses are dependent).
inline constexpr int kBootstrapBlock = 32;

// What every step reads: the request, the model, the plan and the calibrated rotations (null when none is needed).
struct EvalContext {
  const EvalRequest& req;
  const LoadedModel& lm;
  const EvalPlan& plan;
  const CovarianceRotations* calib;
  // The cache job `j` decodes through, sized for a sequence of `tokens` tokens: the CPU reference QuantizedKvCache, or
  // GpuKvCache for a job on the GPU.
  std::unique_ptr<KvCache> cache(const Job& j, size_t tokens) const;
  // Throws Error when rows [0, rows) of `logits` hold a NaN or an infinity: a broken model or a broken recipe.
  void require_finite(const MatrixRM& logits, long rows, const std::string& who) const;
};

// The warnings of a run: each printed once above the progress bar, and kept in the result.
class EvalLog {
 public:
  EvalLog(EvalResult& res, Progress& bar) : res_(res), bar_(bar) {}
  void warn(std::string w);
  void advance() { bar_.advance(); }

 private:
  EvalResult& res_;
  Progress& bar_;
};

// The covariance rotations of the calibrated recipes (null when none is calibrated): fitted on --calib-dump, or on the
// calibration passage run through the model in memory.
std::unique_ptr<CovarianceRotations> fit_calibration(const EvalPlan& plan, const LoadedModel& lm, bool progress);
// The run's description in the result: the model, the passage, the metric, the model's local layers and the lengths the
// end-to-end checks use.
EvalResult describe_run(const EvalContext& c);
// Full precision, then every job, teacher-forced over the passage: loss, KL, top-1 with their intervals, effective bits.
void teacher_forced_rows(const EvalContext& c, EvalResult& res, EvalLog& log);
// The recall test at every --recall distance (nothing without --recall).
void recall_rows(const EvalContext& c, EvalResult& res, EvalLog& log);
// Greedy generation from the prompt after the planned other text (nothing without --generate).
void greedy_rows(const EvalContext& c, EvalResult& res, EvalLog& log);
// --tasks: every sample through full precision, then every job.
TaskResults task_rows(const EvalContext& c, Progress& bar);
// The verdict over the ranked rows, and each ranked row's paired difference to the pick.
void rank_rows(const EvalRequest& req, EvalResult& res);

}  // namespace oscar
