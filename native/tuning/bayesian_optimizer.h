// BayesianOptimizer: proposes the next settings to try by maximising the expected improvement of a
// Gaussian process fitted on the scores seen so far (Horovod's autotuner does the same over fusion
// threshold and cycle time). Deterministic: the candidates come from a seeded generator, so the
// proposals depend only on the scores.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "tuning/gaussian_process.h"

namespace herring {

class BayesianOptimizer {
 public:
  // `bounds`: [low, high] of each dimension, in the settings' own units.
  BayesianOptimizer(std::vector<std::pair<double, double>> bounds, double noise, uint64_t seed = 7);

  void AddSample(const std::vector<double>& point, double score);
  // The point with the highest expected improvement over the best score so far (needs a sample).
  std::vector<double> NextPoint();
  size_t samples() const { return points_.size(); }

  // Expected improvement of a posterior N(mean, stddev^2) over `best`, with exploration margin xi.
  static double ExpectedImprovement(double mean, double stddev, double best, double xi);

 private:
  std::vector<double> Scaled(const std::vector<double>& point) const;
  std::vector<double> Unscaled(const std::vector<double>& unit) const;

  std::vector<std::pair<double, double>> bounds_;
  GaussianProcess gp_;
  std::mt19937_64 rng_;
  std::vector<std::vector<double>> points_;  // scaled to [0, 1]
  std::vector<double> scores_;
};

}  // namespace herring
