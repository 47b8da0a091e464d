// ServerLayout: where the server shards of a process set live and how buffers are cut over them.
// Colocated shards run inside the workers and are placed host-major within each local index
// (shard s -> local index s / H on host s % H), so the H pieces of one local rank's slice go to H
// different hosts and every host's link carries the same load. Dedicated shards run in server
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

  // hosts[g] lists the member indices on host g; member_ranks maps them to transport ranks.
  // num_shards <= 0: one shard per member.
  static ServerLayout Colocated(const std::vector<std::vector<int>>& hosts, const std::vector<int>& member_ranks,
                                int num_shards);
  // One shard per dedicated server process.
  static ServerLayout Dedicated(const std::vector<int>& server_ranks);
};

}  // namespace herring
