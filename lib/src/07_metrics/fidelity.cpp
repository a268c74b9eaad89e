// fidelity.cpp: attention-fidelity metrics (see fidelity.h), in double precision.
#include "oscar/07_metrics/fidelity.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <numeric>

#include "oscar/01_core/error.h"

namespace oscar {

namespace {
using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

MatD head_block(const HeadTensor& x, int h, int first_row, int rows) {
  MatD m(rows, x.head_dim);
  const float* p = x.head(h) + static_cast<long>(first_row) * x.head_dim;
  for (long i = 0; i < static_cast<long>(rows) * x.head_dim; ++i) m.data()[i] = p[i];
  return m;
}

double rel_sq(const HeadTensor& a, const HeadTensor& b, int h) {
  const long n = static_cast<long>(a.tokens) * a.head_dim;
  double num = 0, den = 0;
  for (long i = 0; i < n; ++i) {
    const double x = a.head(h)[i], y = b.head(h)[i];
    num += (x - y) * (x - y);
    den += x * x;
  }
  return den > 0 ? num / den : NAN;  // a zero reference: the relative error is undefined
}

std::vector<int> top_indices(const double* p, int n, int k) {
  std::vector<int> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min(k, n);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [p](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}
}  // namespace

std::vector<Fidelity> layer_fidelity(const HeadTensor& q, const HeadTensor& k, const HeadTensor& v, const HeadTensor& k_hat,
                                     const HeadTensor& v_hat, int n_queries) {
  const int T = k.tokens, d = k.head_dim, H = k.heads, group = q.heads / H;
  const int N = std::min(n_queries, T);
  if (N <= 0) fail("fidelity needs at least one query (queries: {})", n_queries);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<Fidelity> out(H);
  for (int h = 0; h < H; ++h) {
    Fidelity& f = out[h];
    f.k_rel_mse = rel_sq(k, k_hat, h);
    f.v_rel_mse = rel_sq(v, v_hat, h);
    const MatD K = head_block(k, h, 0, T), Kh = head_block(k_hat, h, 0, T);
    const MatD V = head_block(v, h, 0, T), Vh = head_block(v_hat, h, 0, T);
    double lnum = 0, lden = 0, kl = 0, oerr = 0, top = 0;
    long count = 0, ocount = 0;
    for (int g = 0; g < group; ++g) {
      const MatD Q = head_block(q, h * group + g, T - N, N);
      const MatD L = (Q * K.transpose()) * scale, Lh = (Q * Kh.transpose()) * scale;
      std::vector<double> p(T), ph(T);
      for (int i = 0; i < N; ++i) {
        const int visible = T - N + i + 1;  // causal: keys 0..position
        double m = -INFINITY, mh = -INFINITY;
        for (int j = 0; j < visible; ++j) {
          const double a = L(i, j), b = Lh(i, j);
          lnum += (a - b) * (a - b);
          lden += a * a;
          m = std::max(m, a);
          mh = std::max(mh, b);
        }
        double s = 0, sh = 0;
        for (int j = 0; j < visible; ++j) {
          p[j] = std::exp(L(i, j) - m);
          ph[j] = std::exp(Lh(i, j) - mh);
          s += p[j];
          sh += ph[j];
        }
        double kli = 0;
        Eigen::RowVectorXd o = Eigen::RowVectorXd::Zero(d), oh = Eigen::RowVectorXd::Zero(d);
        for (int j = 0; j < visible; ++j) {
          p[j] /= s;
          ph[j] /= sh;
          if (p[j] > 0) kli += p[j] * (std::log(p[j]) - std::log(std::max(ph[j], 1e-300)));
          o += p[j] * V.row(j);
          oh += ph[j] * Vh.row(j);
        }
        kl += std::max(kli, 0.0);
        const double on = o.norm();
        if (on > 0) oerr += (o - oh).norm() / on, ++ocount;  // a zero output: its relative error is undefined
        const auto a = top_indices(p.data(), visible, 8), b = top_indices(ph.data(), visible, 8);
        std::vector<int> both;
        std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
        top += static_cast<double>(both.size()) / static_cast<double>(a.size());
        ++count;
      }
    }
    f.logit_rel_mse = lden > 0 ? lnum / lden : NAN;  // as rel_sq
    f.kl = kl / static_cast<double>(count);
    f.out_rel_err = ocount > 0 ? oerr / static_cast<double>(ocount) : NAN;
    f.top8_overlap = top / static_cast<double>(count);
  }
  return out;
}

}  // namespace oscar
