// ServerLayout: where the server shards of a process set live and how buffers are cut over them.
// Colocated shards are placed host-major within each local index (shard s -> local index s / H
// on host s % H), so the H pieces of one local rank's slice go to H different hosts and every
// host's link carries the same load.
#pragma once

#include <vector>

#include "ps/partition_map.h"

namespace herring {

struct ServerLayout {
  std::vector<int> shard_member;  // process-set member index hosting each shard
  PartitionMap map = PartitionMap::Balanced(1);

  // hosts[g] lists the member indices on host g. num_shards <= 0: one shard per member.
  static ServerLayout Colocated(const std::vector<std::vector<int>>& hosts, int num_shards);
};

}  // namespace herring
