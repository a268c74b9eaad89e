// metrics.h: what oscar-eval measures from logits: next-token loss over a span, KL(reference || other) of
// the next-token distributions and top-1 agreement, and the shared prefix of two generations.
#pragma once
#include <Eigen/Core>
#include <span>
#include <vector>

#include "oscar/02_model/formats/checkpoint.h"

namespace oscar {

// log softmax of one logit row, in double.
Eigen::VectorXd log_softmax(const Eigen::RowVectorXf& logits);

// Over rows [0, rows) of two logit matrices of the same shape: mean KL(ref || other) of the softmax
// distributions, and the fraction of rows whose argmax agrees; both per row, and each row's argmax ids.
struct LogitAgreement {
  double kl = 0, top1 = 0;
  std::vector<double> kl_rows, top1_rows;
  std::vector<int> argmax_ref, argmax_other;
};
LogitAgreement compare_logits(const MatrixRM& ref, const MatrixRM& other, long rows);

// Mean next-token loss (nats) predicting tokens[first .. first+count) from the rows before them.
double span_loss(const MatrixRM& logits, std::span<const int> tokens, int first, int count);

// The first row of logits[0, rows) holding a NaN or an infinity, or -1 when every value is finite.
long first_nonfinite_row(const MatrixRM& logits, long rows);

// Number of leading ids that a and b share.
int shared_prefix(const std::vector<int>& a, const std::vector<int>& b);

}  // namespace oscar
