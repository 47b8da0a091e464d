// StallInspector (Horovod's knobs): finds collectives that some ranks submitted long ago while
// others never did, and says who is missing what; optionally ends the job.
//
// Only rank 0's coordinator sees who submitted what, but steady-state collectives never reach it
// (the response cache answers). So every rank sends a cached request that has waited more than
// half the check time back through the coordinator (as if its cache entry were stale), where the
// report can name the missing ranks.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <utility>

#include "common/knobs.h"
#include "common/status.h"
#include "engine/coordinator.h"

namespace herring {

class StallInspector {
 public:
  explicit StallInspector(const Config& config);

  bool enabled() const { return enabled_; }
  // Whether a cached request pending since `since` should go through the coordinator. `now`: the
  // caller's reading of the clock (the engine reads it once per look for work).
  bool ShouldUncache(std::chrono::steady_clock::time_point since,
                     std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) const;
  // Rank 0, at most about once a second: logs a warning for stalled collectives (once per check
  // period each). Returns Aborted with the report when HOROVOD_STALL_SHUTDOWN_TIME_SECONDS passed.
  Status Inspect(const Coordinator& coordinator,
                 std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());
  // The last report logged (empty if none): tests and the Python front can show it.
  const std::string& last_report() const { return last_report_; }
  uint64_t warnings() const { return warnings_; }

 private:
  bool enabled_;
  double check_seconds_;
  double shutdown_seconds_;
  std::chrono::steady_clock::time_point last_inspection_{};
  std::map<std::pair<int32_t, std::string>, std::chrono::steady_clock::time_point> warned_;
  std::string last_report_;
  uint64_t warnings_ = 0;
};

}  // namespace herring
