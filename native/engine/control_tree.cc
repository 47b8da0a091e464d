#include "engine/control_tree.h"

#include <algorithm>

#include "common/status.h"

namespace herring {
namespace {

int IndexOf(const std::vector<int>& members, int me) {
  auto it = std::find(members.begin(), members.end(), me);
  if (it == members.end()) {
    throw Error(Status::Internal("control tree: rank " + std::to_string(me) + " is not among its members"));
  }
  return static_cast<int>(it - members.begin());
}

}  // namespace

ControlTree ControlTree::Star(const std::vector<int>& members, int me) {
  ControlTree t;
  if (IndexOf(members, me) == 0) {
    t.children.assign(members.begin() + 1, members.end());
  } else {
    t.parent = members[0];
  }
  return t;
}

ControlTree ControlTree::Binomial(const std::vector<int>& members, int me) {
  ControlTree t;
  const int i = IndexOf(members, me);
  const int n = static_cast<int>(members.size());
  // The root's span is the whole power of two above n; any other member's is its lowest set bit.
  int span = 1;
  if (i == 0) {
    while (span < n) span <<= 1;
  } else {
    span = i & -i;
    t.parent = members[i - span];
  }
  // Largest subtree first: its contribution takes longest, so it is awaited first.
  for (int k = span >> 1; k >= 1; k >>= 1) {
    if (i + k < n) t.children.push_back(members[i + k]);
  }
  return t;
}

}  // namespace herring
