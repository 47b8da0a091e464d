#include "engine/deadlock_detector.h"

#include <algorithm>
#include <set>
#include <sstream>

namespace herring {

void DeadlockDetector::Report(int rank, std::vector<AwaitedCollective> awaited, Clock::time_point now) {
  if (awaited.empty()) {
    blocked_.erase(rank);
    return;
  }
  blocked_[rank] = Blocked{std::move(awaited), now};
}

std::optional<DeadlockDetector::Verdict> DeadlockDetector::Check(const Coordinator& coordinator, int world_size,
                                                                 Clock::time_point now) {
  if (blocked_.empty()) return std::nullopt;
  std::map<std::pair<int32_t, std::string>, Coordinator::Waiting> table;
  for (auto& w : coordinator.Entries()) table[{w.process_set, w.name}] = w;
  std::vector<int> not_joined;
  for (int r = 0; r < world_size; ++r) {
    if (!coordinator.joined().count(r)) not_joined.push_back(r);
  }

  // Who could still submit each awaited collective. A report the table does not confirm yet (its
  // cached requests are still on their way to the coordinator) means: not decided this time.
  std::map<int, std::vector<std::vector<int>>> missing_by_rank;
  for (const auto& [rank, blocked] : blocked_) {
    for (const auto& a : blocked.awaited) {
      if (a.type == OpType::kJoin) {
        if (!coordinator.joined().count(rank)) return std::nullopt;
        missing_by_rank[rank].push_back(not_joined);
        continue;
      }
      auto it = table.find({a.process_set, a.name});
      if (it == table.end()) return std::nullopt;
      const auto& submitted = it->second.submitted;
      if (!std::binary_search(submitted.begin(), submitted.end(), rank)) return std::nullopt;
      missing_by_rank[rank].push_back(it->second.missing);
    }
  }

  // The largest set of blocked ranks none of whose awaited collectives could be completed by a
  // rank outside the set: remove every rank that waits on something only free ranks miss.
  std::set<int> stuck;
  for (const auto& kv : blocked_) stuck.insert(kv.first);
  for (bool changed = true; changed;) {
    changed = false;
    for (auto it = stuck.begin(); it != stuck.end();) {
      bool can_complete = false;
      for (const auto& missing : missing_by_rank[*it]) {
        if (std::none_of(missing.begin(), missing.end(), [&](int m) { return stuck.count(m) > 0; })) {
          can_complete = true;
        }
      }
      if (can_complete) {
        it = stuck.erase(it);
        changed = true;
      } else {
        ++it;
      }
    }
  }
  if (stuck.empty()) return std::nullopt;
  // Each rank reported after half the time blocked; the other half passes here, so the error
  // comes once every rank involved has been blocked for the whole HERRING_DEADLOCK_TIME_SECONDS,
  // or half that time later while ranks that have not reported miss its collectives (see Check).
  bool unreported_missing = false;
  for (int r : stuck) {
    for (const auto& missing : missing_by_rank[r]) {
      for (int m : missing) unreported_missing = unreported_missing || !blocked_.count(m);
    }
  }
  const double wait = unreported_missing ? deadlock_seconds_ : deadlock_seconds_ / 2;
  for (int r : stuck) {
    if (std::chrono::duration<double>(now - blocked_[r].since).count() < wait) return std::nullopt;
  }

  Verdict v;
  bool includes_join = false;
  std::ostringstream m;
  m << "Deadlock: " << RankList(std::vector<int>(stuck.begin(), stuck.end()))
    << " are blocked on collectives that none of them can complete (each waits on one that another has "
       "not submitted: the ranks called collectives in different orders or skipped one):";
  for (int r : stuck) {
    const auto& blocked = blocked_[r];
    for (size_t i = 0; i < blocked.awaited.size(); ++i) {
      const auto& a = blocked.awaited[i];
      m << (i ? " and " : " rank " + std::to_string(r) + " waits on ") << OpTypeName(a.type) << " '" << a.name
        << "'";
      const auto& missing = missing_by_rank[r][i];
      if (!missing.empty()) m << " (not submitted by " << RankList(missing) << ")";
      if (a.type == OpType::kJoin) {
        includes_join = true;
      } else if (std::find(v.collectives.begin(), v.collectives.end(), std::make_pair(a.process_set, a.name)) ==
                 v.collectives.end()) {
        v.collectives.push_back({a.process_set, a.name});
      }
    }
    m << ";";
  }
  m << " blocked for " << deadlock_seconds_ << " s (HERRING_DEADLOCK_TIME_SECONDS)";

  // The collective more of the stuck ranks wait on than on any other stays pending; the ranks that
  // went elsewhere get the error. When ranks diverge (one left a loop early after a failed
  // assertion, or skipped a collective), the minority is where the program went astray: its error
  // sends it on, to the collective the majority waits on, and the ranks are in step again.
  // Failing everyone's instead would leave them as far apart as before, for good (every later
  // collective then deadlocks). A tie (two ranks, each on its own) fails them all.
  // Collectives paired by program position (torch.distributed's) are left out: there a rank whose
  // collective differs did not go astray, its call at the same position differs (a shape mismatch),
  // so there is nothing to catch up to, and every rank fails, naming it, as c10d's peers would.
  std::map<std::pair<int32_t, std::string>, int> waiting_ranks;
  bool positional = false;
  for (int r : stuck) {
    for (const auto& a : blocked_[r].awaited) {
      positional = positional || a.in_program_order;
      if (a.type != OpType::kJoin) waiting_ranks[{a.process_set, a.name}]++;
    }
  }
  if (positional) waiting_ranks.clear();
  int most = 0, holders = 0;
  std::pair<int32_t, std::string> kept;
  for (const auto& [key, n] : waiting_ranks) {
    if (n > most) {
      most = n;
      holders = 1;
      kept = key;
    } else if (n == most) {
      ++holders;
    }
  }
  if (holders == 1 && most > 1 && v.collectives.size() > 1) {
    v.collectives.erase(std::remove(v.collectives.begin(), v.collectives.end(), kept), v.collectives.end());
    m << "; '" << kept.second << "', which " << most
      << " of them wait on, stays pending: the other collectives fail, so that their ranks can catch up";
  }
  v.message = m.str();
  v.fail_join = includes_join && v.collectives.empty();
  for (int r : stuck) {
    // A rank none of whose collectives failed is still blocked: its report stands for the next check.
    const auto& awaited = blocked_[r].awaited;
    const bool failed = std::any_of(awaited.begin(), awaited.end(), [&](const AwaitedCollective& a) {
      return a.type == OpType::kJoin ? v.fail_join
                                     : std::find(v.collectives.begin(), v.collectives.end(),
                                                 std::make_pair(a.process_set, a.name)) != v.collectives.end();
    });
    if (failed) blocked_.erase(r);
  }
  return v;
}

}  // namespace herring
