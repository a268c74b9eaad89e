// fidelity.cpp: attention-fidelity metrics (see fidelity.h), in double precision.
#include "oscar/08_metrics/fidelity.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

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
                                     const HeadTensor& v_hat, int n_queries, const LayerAttention& att) {
  const int T = k.tokens, d = k.head_dim, H = k.heads, group = q.heads / H;
  const int N = std::min(n_queries, T);
  if (N <= 0) fail("fidelity needs at least one query (queries: {})", n_queries);
  if (!(std::isfinite(att.scaling) && att.scaling > 0) || !(att.softcap >= 0) || att.sliding_window < 0 ||
      (!att.sinks.empty() && static_cast<int>(att.sinks.size()) != q.heads))
    fail("internal: fidelity of a layer with an invalid attention description (scaling {}, softcap {}, window {}, {} sinks "
         "for {} query heads)",
         att.scaling, att.softcap, att.sliding_window, att.sinks.size(), q.heads);
  const bool sinks = !att.sinks.empty();
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
      const int qh = h * group + g;
      const MatD Q = head_block(q, qh, T - N, N);
      const MatD D = Q * K.transpose(), Dh = Q * Kh.transpose();  // raw dot products
      const double sink = sinks ? static_cast<double>(att.sinks[qh]) : -INFINITY;
      std::vector<double> l(T), lh(T), p(T), ph(T);
      for (int i = 0; i < N; ++i) {
        const long pos = T - N + i;  // the query's position; keys first..pos are visible
        const int first = att.sliding_window > 0 ? static_cast<int>(std::max<long>(0, pos - att.sliding_window + 1)) : 0;
        const int visible = static_cast<int>(pos) + 1 - first;
        double m = sink, mh = sink;
        for (int j = 0; j < visible; ++j) {
          const double a = att.logit(D(i, first + j)), b = att.logit(Dh(i, first + j));
          l[j] = a;
          lh[j] = b;
          lnum += (a - b) * (a - b);
          lden += a * a;
          m = std::max(m, a);
          mh = std::max(mh, b);
        }
        // The sink is one more term of the denominator (sinks empty: exp(-inf) = 0).
        double s = std::exp(sink - m), sh = std::exp(sink - mh);
        const double s_sink = s, sh_sink = sh;
        for (int j = 0; j < visible; ++j) {
          p[j] = std::exp(l[j] - m);
          ph[j] = std::exp(lh[j] - mh);
          s += p[j];
          sh += ph[j];
        }
        double kli = 0;
        if (sinks) {
          const double ps = s_sink / s, phs = sh_sink / sh;
          if (ps > 0) kli += ps * (std::log(ps) - std::log(std::max(phs, 1e-300)));
        }
        Eigen::RowVectorXd o = Eigen::RowVectorXd::Zero(d), oh = Eigen::RowVectorXd::Zero(d);
        for (int j = 0; j < visible; ++j) {
          p[j] /= s;
          ph[j] /= sh;
          if (p[j] > 0) kli += p[j] * (std::log(p[j]) - std::log(std::max(ph[j], 1e-300)));
          o += p[j] * V.row(first + j);
          oh += ph[j] * Vh.row(first + j);
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
