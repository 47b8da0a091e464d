// Coordinator: the message table of rank 0. It collects the requests that are not in the response
// cache, and when every member of a process set has submitted a collective (ranks that joined
// count as submitted) it checks that they agree and issues the response, or an error response
// that names the tensor, the ranks and what differed.
#pragma once

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/message.h"
#include "runtime/process_sets.h"

namespace herring {

class Coordinator {
 public:
  Coordinator(int world_size, const ProcessSetTable* sets);

  void Submit(const RequestMeta& request);
  // Responses for every collective now complete, in the order they completed.
  std::vector<Response> TakeReady();

  struct Stalled {
    std::string name;
    int32_t process_set;
    std::vector<int> missing_ranks;
    double waiting_seconds;
  };
  // Collectives submitted by some members but not all, older than `min_age_seconds`.
  std::vector<Stalled> StalledEntries(double min_age_seconds) const;

  const std::set<int>& joined() const { return joined_; }

  // What is pending in the table, for the deadlock detector: who submitted each collective.
  struct Waiting {
    int32_t process_set;
    std::string name;
    OpType type;
    std::vector<int> submitted;  // ranks, sorted
    std::vector<int> missing;    // members that neither submitted it nor joined
  };
  std::vector<Waiting> Entries() const;
  // Fails these collectives (and, if `fail_join`, the pending join) on every rank with `error`:
  // the responses go out with the next coordinator round.
  void FailEntries(const std::vector<std::pair<int32_t, std::string>>& keys, bool fail_join,
                   const std::string& error);
  // A rank left the job (engine/departures.cc): the collectives of the sets it is in can never
  // complete, and every member fails its own; their entries are dropped without a response.
  void ForgetSetsWith(int rank);
  // Responses decided outside the table wait for a coordinator round.
  bool HasDecided() const { return !ready_.empty(); }

 private:
  using Key = std::pair<int32_t, std::string>;
  struct Entry {
    std::map<int, RequestMeta> by_rank;
    std::chrono::steady_clock::time_point first_seen;
  };

  bool Complete(const Entry& e, const ProcessSet& set) const;
  Response Build(const Key& key, const Entry& e, const ProcessSet& set) const;

  int world_size_;
  const ProcessSetTable* sets_;
  std::map<Key, Entry> table_;
  std::vector<Key> arrival_;       // keys in the order they were first submitted
  std::set<int> joined_;
  int last_joined_ = -1;
  std::vector<Response> ready_;    // responses decided outside the table (errors, join)
};

// "rank 3" or "ranks 0, 2": how error messages name ranks.
std::string RankList(const std::vector<int>& ranks);

// Checks the requests of one collective (one per submitting member, ordered by rank) and fills
// the response, or its error. Exposed for unit tests.
Response AgreeOnRequests(const std::vector<RequestMeta>& requests, const ProcessSet& set,
                         const std::set<int>& joined);

}  // namespace herring
