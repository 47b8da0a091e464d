// PsldBalancer: dynamic parameter-server load distribution (PSLD, SoCC'20) over the partition map.
//
// Every allreduce tells it how long each shard took to return its sums, per MiB it owned. A shard
// that is slower (a loaded CPU, a slower or contended link) should own fewer bytes: the balanced
// state gives shard s a share proportional to 1 / cost_s, so all shards finish together. Each
// decision moves the shares part of the way there (exploitation) and, now and then, moves a
// little load between two random shards to re-measure what the others cost (exploration). It
// settles when the shards' finish times agree within `settle_ratio`.
//
// Only rank 0 runs it; the maps it decides reach every rank through the negotiation, which
// switches all of them at the same step boundary.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "runtime/partition_map.h"

namespace herring {

struct BalancerOptions {
  int decision_interval = 10;     // allreduce executions between two decisions
  double step = 0.5;              // fraction of the way to the target shares per decision
  double exploration = 0.1;       // probability of an exploratory move at a decision
  double exploration_share = 0.05;
  double settle_ratio = 1.15;     // slowest / fastest predicted finish time considered even
  uint64_t seed = 42;
};

class PsldBalancer {
 public:
  explicit PsldBalancer(BalancerOptions options);

  // One shard's piece of one allreduce: `seconds` from push to the sums' return, for `mib` MiB.
  void Observe(int shard, double seconds, double mib);
  // Called after every allreduce execution; returns a new map when it decides to move ranges.
  std::optional<PartitionMap> AfterExecution(const PartitionMap& current);

  // The measured cost (seconds per MiB) of each shard, for reports and tests.
  const std::vector<double>& cost_per_mib() const { return cost_; }
  bool settled() const { return settled_; }

 private:
  BalancerOptions options_;
  std::vector<double> seconds_, mib_;  // since the last decision
  std::vector<double> cost_;           // smoothed seconds per MiB
  int executions_ = 0;
  bool settled_ = false;
  std::mt19937_64 rng_;
};

}  // namespace herring
