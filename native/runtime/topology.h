// Topology: which host every global rank runs on, learned from the rendezvous records (each rank
// reports its hostname). Hosts are numbered in order of their lowest rank.
#pragma once

#include <string>
#include <vector>

namespace herring {

class Topology {
 public:
  Topology() = default;
  explicit Topology(std::vector<std::string> hostname_of_rank);

  int size() const { return static_cast<int>(host_of_rank_.size()); }
  int num_hosts() const { return static_cast<int>(hostnames_.size()); }
  int host_of(int rank) const { return host_of_rank_[rank]; }
  const std::string& hostname(int host) const { return hostnames_[host]; }
  const std::vector<int>& ranks_on_host(int host) const { return ranks_on_host_[host]; }
  // Index of `rank` among the ranks of its host (its local rank as the topology sees it).
  int local_index(int rank) const;

 private:
  std::vector<int> host_of_rank_;
  std::vector<std::string> hostnames_;
  std::vector<std::vector<int>> ranks_on_host_;
};

}  // namespace herring
