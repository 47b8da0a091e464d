#include "ps/psld_balancer.h"

#include <algorithm>
#include <numeric>

namespace herring {

PsldBalancer::PsldBalancer(BalancerOptions options) : options_(options), rng_(options.seed) {}

void PsldBalancer::Observe(int shard, double seconds, double mib) {
  if (shard >= static_cast<int>(seconds_.size())) {
    seconds_.resize(shard + 1, 0.0);
    mib_.resize(shard + 1, 0.0);
  }
  seconds_[shard] += seconds;
  mib_[shard] += mib;
}

std::optional<PartitionMap> PsldBalancer::AfterExecution(const PartitionMap& current) {
  if (++executions_ < options_.decision_interval) return std::nullopt;
  executions_ = 0;
  const int n = current.num_shards();
  if (n < 2) return std::nullopt;
  seconds_.resize(n, 0.0);
  mib_.resize(n, 0.0);
  cost_.resize(n, 0.0);
  // Fold this window's measurements into the smoothed costs; shards without data keep theirs.
  bool any = false;
  for (int s = 0; s < n; ++s) {
    if (mib_[s] <= 0) continue;
    double c = seconds_[s] / mib_[s];
    cost_[s] = cost_[s] > 0 ? 0.5 * cost_[s] + 0.5 * c : c;
    any = true;
  }
  std::fill(seconds_.begin(), seconds_.end(), 0.0);
  std::fill(mib_.begin(), mib_.end(), 0.0);
  if (!any || std::any_of(cost_.begin(), cost_.end(), [](double c) { return c <= 0; })) return std::nullopt;

  const std::vector<double>& w = current.weights();
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  // Predicted finish time of each shard: its share of the bytes times its cost per byte.
  double slowest = 0, fastest = 1e300;
  for (int s = 0; s < n; ++s) {
    double t = w[s] / total * cost_[s];
    slowest = std::max(slowest, t);
    fastest = std::min(fastest, t);
  }
  settled_ = slowest <= fastest * options_.settle_ratio;

  std::uniform_real_distribution<double> coin(0.0, 1.0);
  if (settled_) {
    if (coin(rng_) >= options_.exploration) return std::nullopt;
    // Explore: shift a little load between two shards, to learn whether costs changed.
    std::uniform_int_distribution<int> pick(0, n - 1);
    int from = pick(rng_), to = pick(rng_);
    if (from == to) to = (to + 1) % n;
    return current.Moved(from, to, options_.exploration_share);
  }
  // Exploit: shares toward 1 / cost, part of the way.
  double inverse_sum = 0;
  for (double c : cost_) inverse_sum += 1.0 / c;
  std::vector<double> next(n);
  for (int s = 0; s < n; ++s) {
    double target = total * (1.0 / cost_[s]) / inverse_sum;
    next[s] = std::max(total * 1e-3, w[s] + options_.step * (target - w[s]));
  }
  return PartitionMap::Weighted(next, current.version() + 1);
}

}  // namespace herring
