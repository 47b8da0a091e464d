// GaussianProcess: regression of a noisy score over a box of settings, for the autotuner's
// Bayesian optimisation (as Horovod's autotuner does it). Inputs are scaled to [0, 1] per
// dimension by the caller; outputs are standardised here. Squared-exponential kernel whose length
// scale is fitted by maximising the log marginal likelihood over a grid (a handful of samples:
// a grid is exact enough and cannot diverge as a gradient method can).
#pragma once

#include <vector>

namespace herring {

class GaussianProcess {
 public:
  // `noise`: variance of the observation noise relative to the scores' variance (Horovod's
  // HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE, 0.8 by default: samples of a training job are noisy).
  explicit GaussianProcess(double noise) : noise_(noise) {}

  // Fits on points x[i] (each in [0, 1]^d) with scores y[i]. At least one point.
  void Fit(const std::vector<std::vector<double>>& x, const std::vector<double>& y);

  // Posterior mean and standard deviation of the score at `point`, in the scores' units.
  void Predict(const std::vector<double>& point, double* mean, double* stddev) const;

  double length_scale() const { return length_scale_; }

 private:
  double Kernel(const std::vector<double>& a, const std::vector<double>& b) const;
  // Cholesky factor of K + noise*I for the current length scale; false if not positive definite.
  bool Factor();
  double LogMarginalLikelihood() const;

  double noise_;
  double length_scale_ = 0.25;
  std::vector<std::vector<double>> x_;
  std::vector<double> y_;  // standardised
  double y_mean_ = 0, y_scale_ = 1;
  std::vector<double> chol_;   // lower triangle, row-major n x n
  std::vector<double> alpha_;  // (K + noise I)^-1 y
};

}  // namespace herring
