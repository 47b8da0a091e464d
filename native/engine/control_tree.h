// Who a rank talks to in a cycle's TCP negotiation: its parent (contributions up, results down)
// and its children. Rank 0 is always the root, so its authority (the coordinator, PSLD's maps,
// membership announcements) reaches everyone with the result it sends down.
//
// Two shapes:
//  - the star (HERRING_CONTROL_PLANE=tcp, and whenever the hierarchical plane cannot be used):
//    rank 0 is every rank's parent; it handles O(N) messages per cycle;
//  - a binomial tree over the hosts' leaders (the hierarchical plane): member i's parent is i
//    with its lowest set bit cleared, its children i + 2^k for every 2^k below that bit. Depth
//    and fan-out are both ceil(log2(hosts)), so no leader handles more than that many messages
//    each way per cycle, and a cycle's AND takes 2 * depth hops on the critical path.
#pragma once

#include <vector>

namespace herring {

struct ControlTree {
  int parent = -1;             // -1: the root
  std::vector<int> children;   // ranks, in the order their contributions are combined

  bool root() const { return parent < 0; }
  // `members` lists the participating ranks, root first; `me` must be one of them.
  static ControlTree Star(const std::vector<int>& members, int me);
  static ControlTree Binomial(const std::vector<int>& members, int me);
};

}  // namespace herring
