// The network a job runs on (HERRING_TOPOLOGY) and the placement of a process set's members on
// the positions of the halving-doubling allreduce, so that its exchanges go over links that no
// other exchange of the same step uses (EFLOPS, HPCA'20: the BiGraph rank mapping).
//
// The description is the simulated cluster's JSON (docs/cluster.md), or its minimal form:
//   {"groups": {"a": ["host0", "host1"], "b": ["host2", "host3"]},
//    "rate": "1gbit",                                  // each host's own link (default 1gbit)
//    "intra": {"link": "shared", "rate": "500mbit"},   // pairs of hosts in the same group
//    "cross": {"link": "direct", "rate": "1gbit"}}     // pairs in different groups
// A class of pairs goes through "switch" (each host's own link only), "shared" (intra: one link
// per group carries all of the group's internal traffic; cross: one uplink per group and
// direction) or "direct" (a link of its own per pair and direction, bypassing the host links).
//
// The mapping is chosen with a bottleneck model of those links: a step of the algorithm is a set
// of concurrent flows; its time is that of the most loaded link (bytes / rate); the allreduce
// takes the sum over its steps. Among the rank order, the BiGraph parity mapping (two groups:
// position v goes to the group given by the parity of the number of 1 bits of v, so that v and
// v XOR 2^j are in different groups for every j: every exchange crosses between the parts) and the
// group-contiguous order (only the last, smallest exchange crosses between the groups, for the
// reverse topology), each improved by pairwise swaps while the model improves, the one with the
// least modeled time is taken. Everything is deterministic: every rank computes the same mapping.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/json.h"

namespace herring {

enum class LinkKind { kSwitch, kShared, kDirect };
const char* LinkKindName(LinkKind kind);

struct PathClass {
  LinkKind link = LinkKind::kSwitch;
  double rate_bps = 0;  // 0: not constrained
};

struct NetworkTopology {
  std::string source;                      // the file, for messages
  std::vector<std::string> group_names;    // in order of first appearance
  std::map<std::string, int> group_of_host;
  std::map<std::string, double> host_rate_bps;  // each host's own link (0: not constrained)
  PathClass intra, cross;

  // Reads either form described above. Throws Error(InvalidArgument) naming the file and field.
  static NetworkTopology FromJson(const Json& doc, const std::string& source);
  static NetworkTopology Load(const std::string& path);
  int GroupOf(const std::string& host) const;  // -1 if the description does not name it
};

// tc's rate units ("1gbit", "500mbit", "100mbps" = megaBYTES per second, a bare number = bits
// per second); "none" / "unlimited" -> 0 (not constrained). Throws Error naming `what`.
double ParseRateBps(const std::string& text, const std::string& what);

// Positions of the halving-doubling allreduce over n members: p = the largest power of two <= n
// "core" positions 0..p-1 exchange with v XOR 2^j at step j; the n - p "extra" positions p + i
// first hand their whole buffer to core position i and get the result back at the end.
struct HalvingDoublingPlan {
  int n = 0;
  int p = 0;
  std::vector<int> member_at;    // position -> member index in the process set
  std::vector<int> position_of;  // member index -> position

  int extras() const { return n - p; }
  int rounds() const;            // log2(p): exchanges of the reduce-scatter (and of the all-gather)
  static HalvingDoublingPlan RankOrder(int n);
  static HalvingDoublingPlan FromOrder(std::vector<int> member_at);  // validates a permutation
};

// One transfer of a step: member `src` sends `bytes` to member `dst`.
struct Flow {
  int src;
  int dst;
  double bytes;
};

// The steps of one allreduce of `bytes` under `plan`, in order: the fold of the extras (if any),
// the reduce-scatter rounds, the all-gather rounds, the unfold (if any). Every flow of a step
// runs at the same time as the others of that step.
std::vector<std::vector<Flow>> AllreduceSteps(const HalvingDoublingPlan& plan, double bytes);

// The links of the topology as the members of one process set use them. Not thread-safe (it
// keeps scratch space); every rank builds its own.
class LinkModel {
 public:
  // host_of_member[m]: the host name of member m. Throws Error naming the host (and the member's
  // global rank, from global_rank_of_member) when the description does not place it in a group.
  LinkModel(const NetworkTopology& topology, std::vector<std::string> host_of_member,
            const std::vector<int>& global_rank_of_member);

  int members() const { return static_cast<int>(host_of_member_.size()); }
  int group_of_member(int m) const { return group_of_host_[host_index_[m]]; }
  const std::string& host_of_member(int m) const { return host_of_member_[m]; }
  int host_index(int m) const { return host_index_[m]; }  // members on one host share it
  int num_groups() const { return num_groups_; }

  // Seconds until the most loaded link of the step has carried its flows.
  double StepSeconds(const std::vector<Flow>& step) const;
  double AllreduceSeconds(const HalvingDoublingPlan& plan, double bytes) const;
  // The number of flows on the busiest link of each step (1 everywhere: no link is shared).
  std::vector<int> MostFlowsPerLink(const HalvingDoublingPlan& plan) const;

 private:
  void BuildRoutes();
  struct StepLoad {
    double seconds = 0;  // of the busiest link
    int most_flows = 0;  // on any one link
  };
  StepLoad Load(const std::vector<Flow>& step) const;

  PathClass intra_, cross_;
  std::vector<std::string> host_of_member_;
  std::vector<int> host_index_;          // member -> host index (hosts deduplicated)
  std::vector<int> group_of_host_;       // host index -> group
  std::vector<double> host_rate_;        // host index -> rate (0: not constrained)
  int num_groups_ = 0;
  std::vector<double> link_rate_;           // link id -> rate
  std::vector<std::vector<int>> routes_;    // host a * hosts + host b -> the links a -> b crosses
  // Scratch of Load (per link; only the touched entries are non-zero between calls): a model is
  // used by one thread at a time.
  mutable std::vector<double> seconds_;
  mutable std::vector<int> flows_;
  mutable std::vector<int> touched_;
};

struct TopologyMapping {
  HalvingDoublingPlan plan;
  std::string strategy;          // which start it came from: "rank order", "bigraph", "group-contiguous"
  int swaps = 0;                 // pairwise swaps that improved that start
  double modeled_seconds_per_byte = 0;
  double rank_order_seconds_per_byte = 0;
};

// Chooses the positions of the members for the model (see the top of this file).
TopologyMapping MapOntoTopology(const LinkModel& model);

// One line for logs: positions, their hosts and groups, and the modeled gain over rank order.
std::string DescribeMapping(const TopologyMapping& mapping, const LinkModel& model);

}  // namespace herring
