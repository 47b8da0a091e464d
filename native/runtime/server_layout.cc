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
  const size_t locals = hosts.empty() ? 0 : hosts[0].size();
  const bool equal_hosts = std::all_of(hosts.begin(), hosts.end(), [&](const auto& h) { return h.size() == locals; });
  if (equal_hosts && locals > 0 && shards == static_cast<int>(interleaved.size())) {
    layout.slice_locals = static_cast<int>(locals);
    layout.slice_hosts = static_cast<int>(hosts.size());
  }
  return layout;
}

std::vector<ElementRange> ServerLayout::Ranges(int64_t n, int64_t align) const {
  const auto& w = map.weights();
  const bool balanced = std::all_of(w.begin(), w.end(), [&](double x) { return x == w[0]; });
  if (slice_locals <= 0 || !balanced || map.num_shards() != slice_locals * slice_hosts) return map.Ranges(n, align);
  // Local slice l is cut exactly as the workers cut it (HostSlices: SplitEvenly over the local
  // size), then into one range per host for the shards of local index l (host-major order).
  std::vector<ElementRange> out;
  out.reserve(map.num_shards());
  for (const ElementRange& slice : SplitEvenly(n, slice_locals, align)) {
    for (const ElementRange& part : SplitEvenly(slice.size(), slice_hosts, align)) {
      out.push_back({slice.begin + part.begin, slice.begin + part.end});
    }
  }
  return out;
}

ServerLayout ServerLayout::Dedicated(const std::vector<int>& server_ranks) {
  ServerLayout layout;
  layout.shard_rank = server_ranks;
  layout.dedicated = true;
  layout.map = PartitionMap::Balanced(static_cast<int>(server_ranks.size()));
  return layout;
}

}  // namespace herring
