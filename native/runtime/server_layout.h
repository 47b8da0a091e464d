// ServerLayout: where the server shards of a process set live and how buffers are cut over them.
// Colocated shards run inside the workers and are placed host-major within each local index
// (shard s -> local index s / H on host s % H), so the H pieces of one local rank's slice go to H
// different hosts and every host's link carries the same load. With one shard per member and
// hosts of equal size L (the default), Ranges() cuts each local slice l into the H ranges of the
// shards l*H .. l*H+H-1, which all sit on local index l: a rank's data peers across hosts are
// then only the same local rank of the other hosts (H - 1 peers, not N - 1), which is what lets
// lazy connections (HERRING_CONNECTIONS) stay few. Dedicated shards run in server
// processes of their own (HERRING_DEDICATED_SERVERS), as in Herring and BytePS: workers then send
// their whole slice out and receive the whole sum back, and servers' links carry the rest.
#pragma once

#include <vector>

#include "runtime/partition_map.h"

namespace herring {

struct ServerLayout {
  std::vector<int> shard_rank;  // transport rank hosting each shard
  bool dedicated = false;
  PartitionMap map = PartitionMap::Balanced(1);
  // Set by Colocated when every host has the same number of members L and there is one shard per
  // member: L and the number of hosts H. 0: no slice-aligned cut.
  int slice_locals = 0;
  int slice_hosts = 0;

  // The ranges of an n-element chunk each shard owns. Slice-aligned (above) while the map is
  // balanced; a map PSLD moved (unequal weights) cuts the whole chunk by its weights, so a rank
  // may then reach shards on other local indices (whose connections open on first use).
  std::vector<ElementRange> Ranges(int64_t n, int64_t align) const;

  // hosts[g] lists the member indices on host g; member_ranks maps them to transport ranks.
  // num_shards <= 0: one shard per member.
  static ServerLayout Colocated(const std::vector<std::vector<int>>& hosts, const std::vector<int>& member_ranks,
                                int num_shards);
  // One shard per dedicated server process.
  static ServerLayout Dedicated(const std::vector<int>& server_ranks);
};

}  // namespace herring
