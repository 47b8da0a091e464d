#include "tuning/bayesian_optimizer.h"

#include <algorithm>
#include <cmath>

namespace herring {
namespace {

// Random candidates per proposal, then a local refinement around the best of them: a few
// thousand evaluations of a GP of at most a few dozen points cost well under a millisecond.
constexpr int kCandidates = 2000;
constexpr int kRefineSteps = 200;
// Exploration margin in standardised score units: Horovod's autotuner explores with 0.1 too.
constexpr double kXi = 0.1;

}  // namespace

BayesianOptimizer::BayesianOptimizer(std::vector<std::pair<double, double>> bounds, double noise, uint64_t seed)
    : bounds_(std::move(bounds)), gp_(noise), rng_(seed) {}

std::vector<double> BayesianOptimizer::Scaled(const std::vector<double>& point) const {
  std::vector<double> out(point.size());
  for (size_t i = 0; i < point.size(); ++i) {
    const double span = bounds_[i].second - bounds_[i].first;
    out[i] = span > 0 ? (point[i] - bounds_[i].first) / span : 0.0;
  }
  return out;
}

std::vector<double> BayesianOptimizer::Unscaled(const std::vector<double>& unit) const {
  std::vector<double> out(unit.size());
  for (size_t i = 0; i < unit.size(); ++i) {
    out[i] = bounds_[i].first + std::clamp(unit[i], 0.0, 1.0) * (bounds_[i].second - bounds_[i].first);
  }
  return out;
}

void BayesianOptimizer::AddSample(const std::vector<double>& point, double score) {
  points_.push_back(Scaled(point));
  scores_.push_back(score);
}

double BayesianOptimizer::ExpectedImprovement(double mean, double stddev, double best, double xi) {
  if (stddev <= 0) return 0.0;
  const double z = (mean - best - xi) / stddev;
  const double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
  const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2.0 * M_PI);
  return (mean - best - xi) * cdf + stddev * pdf;
}

std::vector<double> BayesianOptimizer::NextPoint() {
  gp_.Fit(points_, scores_);
  // EI is computed in the scores' units; the margin scales with their spread.
  double lo = *std::min_element(scores_.begin(), scores_.end());
  const double best = *std::max_element(scores_.begin(), scores_.end());
  const double xi = kXi * std::max(best - lo, std::abs(best) * 1e-3);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const size_t d = bounds_.size();
  auto ei_at = [&](const std::vector<double>& p) {
    double m, s;
    gp_.Predict(p, &m, &s);
    return ExpectedImprovement(m, s, best, xi);
  };
  std::vector<double> best_point(d), p(d);
  double best_ei = -1;
  for (int c = 0; c < kCandidates; ++c) {
    for (size_t i = 0; i < d; ++i) p[i] = unit(rng_);
    const double ei = ei_at(p);
    if (ei > best_ei) {
      best_ei = ei;
      best_point = p;
    }
  }
  std::normal_distribution<double> step(0.0, 0.05);
  for (int s = 0; s < kRefineSteps; ++s) {
    for (size_t i = 0; i < d; ++i) p[i] = std::clamp(best_point[i] + step(rng_), 0.0, 1.0);
    const double ei = ei_at(p);
    if (ei > best_ei) {
      best_ei = ei;
      best_point = p;
    }
  }
  return Unscaled(best_point);
}

}  // namespace herring
