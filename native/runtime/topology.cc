#include "runtime/topology.h"

#include <algorithm>

namespace herring {

Topology::Topology(std::vector<std::string> hostname_of_rank) {
  host_of_rank_.resize(hostname_of_rank.size());
  for (size_t r = 0; r < hostname_of_rank.size(); ++r) {
    auto it = std::find(hostnames_.begin(), hostnames_.end(), hostname_of_rank[r]);
    int host = static_cast<int>(it - hostnames_.begin());
    if (it == hostnames_.end()) {
      hostnames_.push_back(hostname_of_rank[r]);
      ranks_on_host_.emplace_back();
    }
    host_of_rank_[r] = host;
    ranks_on_host_[host].push_back(static_cast<int>(r));
  }
}

int Topology::local_index(int rank) const {
  const auto& v = ranks_on_host_[host_of_rank_[rank]];
  return static_cast<int>(std::find(v.begin(), v.end(), rank) - v.begin());
}

}  // namespace herring
