// Process sets: subsets of the global ranks that run collectives together. Every rank keeps the
// same table (ids are assigned in the same order everywhere: at init, then by negotiated
// add/remove), so an id means the same ranks on every rank.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "runtime/topology.h"
#include "runtime/server_layout.h"
#include "transport/shm_arena.h"

namespace herring {

struct ProcessSet {
  int32_t id = 0;
  std::vector<int> ranks;          // sorted global ranks
  int my_index = -1;               // this rank's index in `ranks`, -1 if not a member

  // Hierarchy as seen from this rank (meaningful when my_index >= 0).
  std::vector<std::vector<int>> hosts;  // member indices per host, hosts ordered by lowest member
  std::vector<int> host_of_member;      // index into `hosts`
  int my_host = -1;
  int my_local_index = -1;              // index within hosts[my_host]

  std::unique_ptr<ShmArena> arena;      // shared memory with the members on my host (if > 1)
  uint64_t arena_sequence = 0;          // buffers passed through the arena so far
  uint64_t notice_rounds = 0;           // batches whose ranks told each other where their tensors are
  // Whether every local member can read every other's memory (process_vm_readv): -1 not asked yet.
  int peers_readable = -1;
  // Whether every local member can read and write every other's memory (process_vm_readv and
  // process_vm_writev, ops/cross_memory_allreduce.h): -1 not asked yet.
  int peers_writable = -1;
  uint64_t claimed_units = 0;           // work units of claimed-unit batches handed out so far (ops/claimed_units.h)
  uint64_t unit_writes = 0;             // units whose sums this rank wrote into the others' outputs (kUnitWritesFlag)
  ServerLayout servers;                 // server shards of the PS allreduce over this set

  bool contains(int rank) const;
  int member_index(int rank) const;     // -1 if not a member
  int size() const { return static_cast<int>(ranks.size()); }
  const std::vector<int>& local_members() const { return hosts[my_host]; }
};

class ProcessSetTable {
 public:
  // Builds the layout for `ranks` as seen from `my_rank` (no arena yet).
  static std::unique_ptr<ProcessSet> Make(int32_t id, std::vector<int> ranks, int my_rank,
                                          const Topology& topo);

  // Registers a set; returns its id, or -1 if a set with the same ranks exists.
  int32_t Add(std::unique_ptr<ProcessSet> set);
  bool Remove(int32_t id);
  ProcessSet* Find(int32_t id);
  const ProcessSet* Find(int32_t id) const;
  int32_t FindByRanks(const std::vector<int>& ranks) const;  // -1 if none
  // The id the next added set takes: as in Horovod (horovod/common/process_set.cc), the id of the
  // set removed longest ago, if any, else one past the largest ever used. Every rank adds and
  // removes sets in the same negotiated order, so every rank picks the same id.
  int32_t next_id() const { return free_ids_.empty() ? next_id_ : free_ids_.front(); }
  std::vector<int32_t> ids() const;
  // What next_id() is made of, for the join snapshot: a joiner must pick the ids the job picks.
  int32_t id_limit() const { return next_id_; }
  std::vector<int32_t> free_ids() const { return {free_ids_.begin(), free_ids_.end()}; }
  void RestoreIds(int32_t id_limit, const std::vector<int32_t>& free_ids) {
    next_id_ = id_limit;
    free_ids_.assign(free_ids.begin(), free_ids.end());
  }

 private:
  std::map<int32_t, std::unique_ptr<ProcessSet>> sets_;
  int32_t next_id_ = 0;
  std::deque<int32_t> free_ids_;  // ids of removed sets, oldest first
};

}  // namespace herring
