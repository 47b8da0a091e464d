#include "tuning/gaussian_process.h"

#include <cmath>
#include <limits>

namespace herring {
namespace {

// Solves L z = b (forward) then L^T out = z (backward) for the lower-triangular L (n x n).
std::vector<double> CholeskySolve(const std::vector<double>& l, size_t n, const std::vector<double>& b) {
  std::vector<double> z(n);
  for (size_t i = 0; i < n; ++i) {
    double s = b[i];
    for (size_t k = 0; k < i; ++k) s -= l[i * n + k] * z[k];
    z[i] = s / l[i * n + i];
  }
  std::vector<double> out(n);
  for (size_t i = n; i-- > 0;) {
    double s = z[i];
    for (size_t k = i + 1; k < n; ++k) s -= l[k * n + i] * out[k];
    out[i] = s / l[i * n + i];
  }
  return out;
}

}  // namespace

double GaussianProcess::Kernel(const std::vector<double>& a, const std::vector<double>& b) const {
  double d2 = 0;
  for (size_t i = 0; i < a.size(); ++i) d2 += (a[i] - b[i]) * (a[i] - b[i]);
  return std::exp(-0.5 * d2 / (length_scale_ * length_scale_));
}

bool GaussianProcess::Factor() {
  const size_t n = x_.size();
  chol_.assign(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j <= i; ++j) {
      double s = Kernel(x_[i], x_[j]) + (i == j ? noise_ + 1e-9 : 0.0);
      for (size_t k = 0; k < j; ++k) s -= chol_[i * n + k] * chol_[j * n + k];
      if (i == j) {
        if (!(s > 0)) return false;
        chol_[i * n + i] = std::sqrt(s);
      } else {
        chol_[i * n + j] = s / chol_[j * n + j];
      }
    }
  }
  alpha_ = CholeskySolve(chol_, n, y_);
  return true;
}

double GaussianProcess::LogMarginalLikelihood() const {
  const size_t n = x_.size();
  double fit = 0, logdet = 0;
  for (size_t i = 0; i < n; ++i) {
    fit += y_[i] * alpha_[i];
    logdet += std::log(chol_[i * n + i]);
  }
  return -0.5 * fit - logdet;
}

void GaussianProcess::Fit(const std::vector<std::vector<double>>& x, const std::vector<double>& y) {
  x_ = x;
  const size_t n = y.size();
  y_mean_ = 0;
  for (double v : y) y_mean_ += v / static_cast<double>(n);
  double var = 0;
  for (double v : y) var += (v - y_mean_) * (v - y_mean_) / static_cast<double>(n);
  y_scale_ = var > 0 ? std::sqrt(var) : 1.0;
  y_.resize(n);
  for (size_t i = 0; i < n; ++i) y_[i] = (y[i] - y_mean_) / y_scale_;

  double best = -std::numeric_limits<double>::infinity(), best_scale = 0.25;
  for (double scale : {0.05, 0.1, 0.15, 0.25, 0.4, 0.6, 1.0}) {
    length_scale_ = scale;
    if (!Factor()) continue;
    const double ll = LogMarginalLikelihood();
    if (ll > best) {
      best = ll;
      best_scale = scale;
    }
  }
  length_scale_ = best_scale;
  Factor();
}

void GaussianProcess::Predict(const std::vector<double>& point, double* mean, double* stddev) const {
  const size_t n = x_.size();
  std::vector<double> k(n);
  double m = 0;
  for (size_t i = 0; i < n; ++i) {
    k[i] = Kernel(point, x_[i]);
    m += k[i] * alpha_[i];
  }
  // var = k(x,x) - k^T (K + noise I)^-1 k, with v = L^-1 k.
  std::vector<double> v(n);
  double explained = 0;
  for (size_t i = 0; i < n; ++i) {
    double s = k[i];
    for (size_t j = 0; j < i; ++j) s -= chol_[i * n + j] * v[j];
    v[i] = s / chol_[i * n + i];
    explained += v[i] * v[i];
  }
  const double var = std::max(0.0, 1.0 - explained);
  *mean = y_mean_ + m * y_scale_;
  *stddev = std::sqrt(var) * y_scale_;
}

}  // namespace herring
