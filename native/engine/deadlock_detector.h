// DeadlockDetector (rank 0): tells a deadlock from a stall. A stall is a collective some ranks
// submitted while others are busy elsewhere; it may still complete, and the stall inspector only
// warns. A deadlock is a set of ranks that are all blocked (a thread waits on a handle, or a
// framework kernel waits on a callback) on collectives that only ranks of the same set could
// complete: nobody in it will ever submit again, so each waits forever. Horovod hangs there
// (ranks that diverged, e.g. one skipped a collective after a failed assertion); we raise on every
// rank, naming each rank and the collective it waits on.
//
// Every rank reports to rank 0 what it waits on once it has been blocked for half of
// HERRING_DEADLOCK_TIME_SECONDS with nothing new submitted (and an empty report when that ends);
// its cached requests go through the coordinator then, so rank 0 sees who submitted what.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/control_messages.h"
#include "engine/coordinator.h"
#include "runtime/message.h"

namespace herring {

class DeadlockDetector {
 public:
  using Clock = std::chrono::steady_clock;
  explicit DeadlockDetector(double deadlock_seconds) : deadlock_seconds_(deadlock_seconds) {}

  // A rank's latest report; empty: it is no longer blocked.
  void Report(int rank, std::vector<AwaitedCollective> awaited, Clock::time_point now = Clock::now());

  struct Verdict {
    std::vector<std::pair<int32_t, std::string>> collectives;  // to fail on every rank
    // A rank in join waits, by design, for the others to join: when other ranks are stuck on
    // collectives of their own, failing those lets them go on (and join, as Horovod's programs do
    // after such an error), and the join completes. Failing the join too would release the joined
    // ranks into their next step while the others still head for the join: the ranks would be out
    // of step for good (a failed test then fails every test after it). So the join fails only when
    // nothing else is stuck.
    bool fail_join = false;
    std::string message;
  };
  // A deadlock among the reporting ranks, if the coordinator's table proves one (see the header
  // comment); the reports involved are consumed. A proven deadlock is announced once its ranks
  // have been blocked for HERRING_DEADLOCK_TIME_SECONDS; when ranks that have not reported miss
  // its collectives, it waits up to half that time more for them: ranks seldom block at the same
  // moment (a loaded host delays some by seconds), and one error naming every diverged rank is
  // what a user can act on, where two partial ones, a few seconds apart, mislead.
  std::optional<Verdict> Check(const Coordinator& coordinator, int world_size, Clock::time_point now = Clock::now());

 private:
  struct Blocked {
    std::vector<AwaitedCollective> awaited;
    Clock::time_point since;
  };
  double deadlock_seconds_;
  std::map<int, Blocked> blocked_;
};

}  // namespace herring
