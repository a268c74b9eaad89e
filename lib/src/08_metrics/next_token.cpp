// metrics.cpp: loss, KL and top-1 agreement from logits.
#include "oscar/08_metrics/next_token.h"

#include <algorithm>
#include <cmath>

#include "oscar/01_core/error.h"
#include "oscar/02_model/forward/model.h"

namespace oscar {

Eigen::VectorXd log_softmax(const Eigen::RowVectorXf& x) {
  Eigen::VectorXd d = x.transpose().cast<double>();
  const double m = d.maxCoeff();
  const double lse = m + std::log((d.array() - m).exp().sum());
  return d.array() - lse;
}

LogitAgreement compare_logits(const MatrixRM& ref, const MatrixRM& q, long rows) {
  if (ref.rows() != q.rows() || ref.cols() != q.cols() || rows <= 0 || rows > ref.rows())
    fail("internal: comparing logits of {}x{} and {}x{} over {} rows", ref.rows(), ref.cols(), q.rows(), q.cols(), rows);
  LogitAgreement r;
  for (long t = 0; t < rows; ++t) {
    if (!ref.row(t).allFinite() || !q.row(t).allFinite())  // no metric on NaN rows (argmax of two NaN rows "agrees")
      fail("the logits at position {} are not finite (NaN or infinity); no agreement is computed on them: the model or "
           "the recipe's cache is broken",
           t);
    const Eigen::VectorXd a = log_softmax(ref.row(t)), b = log_softmax(q.row(t));
    r.kl_rows.push_back((a.array().exp() * (a - b).array()).sum());
    Eigen::Index ia, ib;
    ref.row(t).maxCoeff(&ia);
    q.row(t).maxCoeff(&ib);
    r.top1_rows.push_back(ia == ib ? 1.0 : 0.0);
    r.argmax_ref.push_back(static_cast<int>(ia));
    r.argmax_other.push_back(static_cast<int>(ib));
    r.kl += r.kl_rows.back();
    r.top1 += r.top1_rows.back();
  }
  r.kl /= static_cast<double>(rows);
  r.top1 /= static_cast<double>(rows);
  return r;
}

long first_nonfinite_row(const MatrixRM& logits, long rows) {
  for (long t = 0; t < std::min<long>(rows, logits.rows()); ++t)
    if (!logits.row(t).allFinite()) return t;
  return -1;
}

double span_loss(const MatrixRM& logits, std::span<const int> tokens, int first, int count) {
  if (first < 1 || count < 1 || static_cast<size_t>(first + count) > tokens.size())
    fail("internal: span loss over tokens {}..{} of {}", first, first + count, tokens.size());
  const std::vector<double> l = next_token_losses(logits, tokens);
  double s = 0;
  for (int t = first; t < first + count; ++t) s += l[t - 1];
  return s / count;
}

int shared_prefix(const std::vector<int>& a, const std::vector<int>& b) {
  int n = 0;
  while (n < static_cast<int>(std::min(a.size(), b.size())) && a[n] == b[n]) ++n;
  return n;
}

}  // namespace oscar
