// One rendezvous round per host through horovodrun's store (HERRING_RENDEZVOUS=host): instead of
// every rank reading every rank's record (N^2 requests to one HTTP server in the launcher), the
// ranks of a host meet in a shared-memory arena (transport/shm_arena.h) named after the store, the
// round and the host; its local rank 0 reads their records there and stores them in the store as
// one host record; the leader of host 0 reads the H host records and stores the world (every record
// by rank); each host's leader reads it once and hands it to its host's ranks in the arena. About
// 3H requests instead of N^2, and nobody but the H leaders polls the store.
#pragma once

#include <string>
#include <vector>

#include "common/deadline.h"
#include "rendezvous/http_store.h"
#include "rendezvous/launch_env.h"

namespace herring {

// Whether the launcher told this rank enough to group by host: horovodrun's local and cross ranks
// (a host's local rank 0 has the host's index as its cross rank, and the number of hosts as its
// cross size) and host name.
bool CanGroupByHost(const LaunchInfo& launch);

// Every rank's `mine` by rank, as HttpStore::AllGather returns them. Throws Error(Timeout) naming
// the key still missing at the deadline, Error(Internal) naming the ranks that no host reported.
std::vector<std::string> HostGroupedAllGather(HttpStore& store, const std::string& prefix, const LaunchInfo& launch,
                                              const std::string& mine, Deadline deadline);

// The name of the shared-memory arena where a host's ranks meet for the round `prefix`: the same
// for every rank of the host, which know nothing else in common before the rendezvous (the job's
// store, the round, the host name, the user), and unique while the job runs.
std::string HostArenaName(const HttpStore& store, const std::string& prefix, const LaunchInfo& launch);

// The packing of (rank, record) lists in host and world records: "<rank> <bytes>\n<record>"...
std::string PackRecords(const std::vector<std::pair<int, std::string>>& records);
std::vector<std::pair<int, std::string>> UnpackRecords(const std::string& text);

}  // namespace herring
