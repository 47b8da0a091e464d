#include "engine/stall_inspector.h"

#include <map>
#include <sstream>
#include <vector>

#include "common/logging.h"

namespace herring {

StallInspector::StallInspector(const Config& config)
    : enabled_(!config.stall_check_disabled),
      check_seconds_(config.stall_check_seconds),
      shutdown_seconds_(config.stall_shutdown_seconds) {}

bool StallInspector::ShouldUncache(std::chrono::steady_clock::time_point since,
                                   std::chrono::steady_clock::time_point now) const {
  return enabled_ && std::chrono::duration<double>(now - since).count() > check_seconds_ / 2;
}

Status StallInspector::Inspect(const Coordinator& coordinator, std::chrono::steady_clock::time_point now) {
  if (!enabled_) return Status::OK();
  if (now - last_inspection_ < std::chrono::milliseconds(500)) return Status::OK();
  last_inspection_ = now;

  double threshold = check_seconds_;
  if (shutdown_seconds_ > 0) threshold = std::min(threshold, shutdown_seconds_);
  auto stalled = coordinator.StalledEntries(threshold);
  if (stalled.empty()) return Status::OK();

  // Group by missing rank, as Horovod does: "missing ranks: 2: ['a', 'b']".
  std::map<int, std::vector<std::string>> by_rank;
  double oldest = 0;
  bool due = false;
  for (const auto& s : stalled) {
    oldest = std::max(oldest, s.waiting_seconds);
    for (int r : s.missing_ranks) by_rank[r].push_back(s.name);
    auto key = std::make_pair(s.process_set, s.name);
    auto it = warned_.find(key);
    if (it == warned_.end() || now - it->second >= std::chrono::duration<double>(check_seconds_)) {
      due = true;
      warned_[key] = now;
    }
  }
  std::ostringstream report;
  report << "One or more collectives were submitted by a subset of ranks and have waited for the "
            "other ranks for up to "
         << static_cast<int>(oldest) << " s (HOROVOD_STALL_CHECK_TIME_SECONDS=" << check_seconds_
         << "). Missing ranks:";
  for (const auto& kv : by_rank) {
    report << " " << kv.first << ": [";
    for (size_t i = 0; i < kv.second.size() && i < 8; ++i) report << (i ? ", " : "") << "'" << kv.second[i] << "'";
    if (kv.second.size() > 8) report << ", ... " << kv.second.size() - 8 << " more";
    report << "]";
  }
  last_report_ = report.str();
  if (shutdown_seconds_ > 0 && oldest >= shutdown_seconds_) {
    std::ostringstream why;
    why << "stalled for more than HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=" << shutdown_seconds_ << " s: " << last_report_;
    return Status::Aborted(why.str());
  }
  if (due && oldest >= check_seconds_) {
    ++warnings_;
    HLOG(Warning) << last_report_;
  }
  return Status::OK();
}

}  // namespace herring
