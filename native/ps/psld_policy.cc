#include "ps/psld_policy.h"

namespace herring {

PsldPolicy::PsldPolicy(bool enabled, bool decides, int decision_interval)
    : enabled_(enabled), decision_interval_(decision_interval) {
  if (enabled && decides) {
    BalancerOptions options;
    options.decision_interval = decision_interval;
    balancer_ = std::make_unique<PsldBalancer>(options);
  }
}

void PsldPolicy::Observe(int shard, double seconds, double mib) {
  if (balancer_) {
    balancer_->Observe(shard, seconds, mib);
    return;
  }
  for (auto& sample : samples_) {
    if (sample.shard == shard) {
      sample.seconds += seconds;
      sample.mib += mib;
      return;
    }
  }
  samples_.push_back({shard, seconds, mib});
}

std::vector<ShardSample> PsldPolicy::TakeSamples() {
  std::vector<ShardSample> out;
  out.swap(samples_);
  return out;
}

void PsldPolicy::Receive(const std::vector<ShardSample>& samples) {
  if (!balancer_) return;
  for (const auto& s : samples) balancer_->Observe(s.shard, s.seconds, s.mib);
}

void PsldPolicy::AfterAllreduce(int32_t process_set, size_t hosts, const PartitionMap& current) {
  // A set on one host has no server shards to balance.
  if (!balancer_ || process_set != kBalancedSet || hosts <= 1) return;
  if (auto next = balancer_->AfterExecution(current)) {
    decision_ = MapUpdate{kBalancedSet, next->version(), next->weights()};
  }
}

std::optional<MapUpdate> PsldPolicy::TakeDecision() {
  std::optional<MapUpdate> out;
  out.swap(decision_);
  return out;
}

void PsldPolicy::RestartMeasurements() {
  if (balancer_) balancer_ = std::make_unique<PsldBalancer>(BalancerOptions{decision_interval_});
}

}  // namespace herring
