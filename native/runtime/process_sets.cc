#include "runtime/process_sets.h"

#include <algorithm>

namespace herring {

bool ProcessSet::contains(int rank) const { return member_index(rank) >= 0; }

int ProcessSet::member_index(int rank) const {
  auto it = std::lower_bound(ranks.begin(), ranks.end(), rank);
  return (it != ranks.end() && *it == rank) ? static_cast<int>(it - ranks.begin()) : -1;
}

std::unique_ptr<ProcessSet> ProcessSetTable::Make(int32_t id, std::vector<int> ranks, int my_rank,
                                                  const Topology& topo) {
  auto s = std::make_unique<ProcessSet>();
  std::sort(ranks.begin(), ranks.end());
  s->id = id;
  s->ranks = std::move(ranks);
  s->my_index = s->member_index(my_rank);
  std::vector<int> host_ids;  // topology host id of each entry in s->hosts
  s->host_of_member.resize(s->ranks.size());
  for (size_t m = 0; m < s->ranks.size(); ++m) {
    int h = topo.host_of(s->ranks[m]);
    auto it = std::find(host_ids.begin(), host_ids.end(), h);
    int idx = static_cast<int>(it - host_ids.begin());
    if (it == host_ids.end()) {
      host_ids.push_back(h);
      s->hosts.emplace_back();
    }
    s->hosts[idx].push_back(static_cast<int>(m));
    s->host_of_member[m] = idx;
  }
  if (s->my_index >= 0) {
    s->my_host = s->host_of_member[s->my_index];
    const auto& local = s->hosts[s->my_host];
    s->my_local_index = static_cast<int>(std::find(local.begin(), local.end(), s->my_index) - local.begin());
  }
  return s;
}

int32_t ProcessSetTable::Add(std::unique_ptr<ProcessSet> set) {
  if (FindByRanks(set->ranks) >= 0) return -1;
  int32_t id = set->id;
  next_id_ = std::max(next_id_, id + 1);
  free_ids_.erase(std::remove(free_ids_.begin(), free_ids_.end(), id), free_ids_.end());
  sets_[id] = std::move(set);
  return id;
}

bool ProcessSetTable::Remove(int32_t id) {
  if (sets_.erase(id) == 0) return false;
  if (id != 0) free_ids_.push_back(id);
  return true;
}

ProcessSet* ProcessSetTable::Find(int32_t id) {
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : it->second.get();
}

const ProcessSet* ProcessSetTable::Find(int32_t id) const {
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : it->second.get();
}

int32_t ProcessSetTable::FindByRanks(const std::vector<int>& ranks) const {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (const auto& kv : sets_) {
    if (kv.second->ranks == sorted) return kv.first;
  }
  return -1;
}

std::vector<int32_t> ProcessSetTable::ids() const {
  std::vector<int32_t> v;
  for (const auto& kv : sets_) v.push_back(kv.first);
  return v;
}

}  // namespace herring
