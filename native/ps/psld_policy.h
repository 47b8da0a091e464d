// PsldPolicy: who measures, who decides, and when, for the PSLD balancer (ps/psld_balancer.h).
//
// A policy object beside the balancer so that the engine's execution only asks it questions
// ("time this allreduce's shards?", "a buffer ran: anything to announce?") instead of carrying
// PSLD's rules itself. The rules: only the global process set's shards are balanced (its map is
// the one every rank switches in the same cycle); every rank times the shards it pushes to; rank 0
// alone runs the balancer, folding in the other ranks' samples, which travel with their bit-vector
// contributions; a decision is announced with the next cycle's result; and a change of the
// servers (elastic membership) starts the measurements over, since they describe other shards.
//
// Used by the engine's loop thread only (the allreduce reports its timings on the thread that
// runs it, which is the loop's): no locking.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "ps/psld_balancer.h"
#include "runtime/control_messages.h"
#include "runtime/partition_map.h"

namespace herring {

class PsldPolicy {
 public:
  // The process set whose map PSLD moves: the global one.
  static constexpr int32_t kBalancedSet = 0;

  // `enabled`: HERRING_BALANCER=psld; `decides`: this is rank 0; `decision_interval`:
  // HERRING_BALANCE_INTERVAL (allreduce executions between two decisions).
  PsldPolicy(bool enabled, bool decides, int decision_interval);

  // Whether the shards of an allreduce on `process_set` are timed for the balancer.
  bool Measures(int32_t process_set) const { return enabled_ && process_set == kBalancedSet; }
  // One shard's piece of an allreduce measured here: into the balancer on rank 0, else kept (one
  // running total per shard, so the report to rank 0 stays a few bytes per cycle).
  void Observe(int shard, double seconds, double mib);
  // Not rank 0: what was measured since the last report, to send with the next contribution.
  std::vector<ShardSample> TakeSamples();
  // Rank 0: another rank's samples, from its contribution.
  void Receive(const std::vector<ShardSample>& samples);
  // After an allreduce on `process_set` (spanning `hosts` hosts, whose map is `current`) ran:
  // rank 0's balancer may decide to move ranges; the decision waits for TakeDecision.
  void AfterAllreduce(int32_t process_set, size_t hosts, const PartitionMap& current);
  // The map update to announce with this cycle's result, if one was decided.
  std::optional<MapUpdate> TakeDecision();
  // The dedicated servers changed: what was measured describes shards that no longer exist.
  void RestartMeasurements();

 private:
  const bool enabled_;
  const int decision_interval_;
  std::unique_ptr<PsldBalancer> balancer_;  // rank 0 with HERRING_BALANCER=psld
  std::vector<ShardSample> samples_;        // the others: measured here, for rank 0
  std::optional<MapUpdate> decision_;       // decided, announced with the next cycle's result
};

}  // namespace herring
