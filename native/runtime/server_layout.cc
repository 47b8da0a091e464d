#include "runtime/server_layout.h"

#include <algorithm>

namespace herring {

ServerLayout ServerLayout::Colocated(const std::vector<std::vector<int>>& hosts, const std::vector<int>& member_ranks,
                                     int num_shards) {
  std::vector<int> interleaved;  // local index 0 of every host, then local index 1...
  size_t widest = 0;
  for (const auto& h : hosts) widest = std::max(widest, h.size());
  for (size_t i = 0; i < widest; ++i) {
    for (const auto& h : hosts) {
      if (i < h.size()) interleaved.push_back(member_ranks[h[i]]);
    }
  }
  int shards = num_shards > 0 ? num_shards : static_cast<int>(interleaved.size());
  ServerLayout layout;
  for (int s = 0; s < shards; ++s) layout.shard_rank.push_back(interleaved[s % interleaved.size()]);
  layout.map = PartitionMap::Balanced(shards);
  return layout;
}

ServerLayout ServerLayout::Dedicated(const std::vector<int>& server_ranks) {
  ServerLayout layout;
  layout.shard_rank = server_ranks;
  layout.dedicated = true;
  layout.map = PartitionMap::Balanced(static_cast<int>(server_ranks.size()));
  return layout;
}

}  // namespace herring
