// Tests of ControlTree: the binomial tree over the hosts' leaders reaches every member exactly
// once from rank 0, with depth and fan-out at most ceil(log2(members)); the star is rank 0's.
#include <map>
#include <vector>

#include "engine/control_tree.h"
#include <gtest/gtest.h>

using namespace herring;

namespace {

int CeilLog2(int n) {
  int d = 0;
  while ((1 << d) < n) ++d;
  return d;
}

}  // namespace

TEST(ControlTree, BinomialSpansEveryMemberOnceWithLogDepthAndFanOut) {
  for (int n = 1; n <= 70; ++n) {
    std::vector<int> members;
    for (int i = 0; i < n; ++i) members.push_back(i * 3);  // leaders' ranks: 0, 3, 6, ...
    std::map<int, ControlTree> trees;
    for (int m : members) trees[m] = ControlTree::Binomial(members, m);
    EXPECT_TRUE(trees[0].root());
    std::map<int, int> parents_seen;
    for (auto& [m, t] : trees) {
      EXPECT_LE(static_cast<int>(t.children.size()), CeilLog2(n)) << "member " << m << " of " << n;
      for (int c : t.children) {
        parents_seen[c]++;
        EXPECT_EQ(trees[c].parent, m) << "child " << c << " of " << m;
      }
      // Depth: hops from m to the root.
      int depth = 0;
      for (int x = m; !trees[x].root(); x = trees[x].parent) ++depth;
      EXPECT_LE(depth, CeilLog2(n));
    }
    EXPECT_EQ(static_cast<int>(parents_seen.size()), n - 1);
    for (auto& [c, count] : parents_seen) EXPECT_EQ(count, 1) << "member " << c << " has two parents";
  }
}

TEST(ControlTree, BinomialOfFourHosts) {
  const std::vector<int> leaders{0, 2, 4, 6};
  EXPECT_EQ(ControlTree::Binomial(leaders, 0).children, (std::vector<int>{4, 2}));
  EXPECT_EQ(ControlTree::Binomial(leaders, 4).children, (std::vector<int>{6}));
  EXPECT_EQ(ControlTree::Binomial(leaders, 6).parent, 4);
  EXPECT_EQ(ControlTree::Binomial(leaders, 2).parent, 0);
}

TEST(ControlTree, StarAndUnknownMember) {
  const std::vector<int> world{0, 1, 2, 3};
  EXPECT_EQ(ControlTree::Star(world, 0).children, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(ControlTree::Star(world, 2).parent, 0);
  EXPECT_THROW(ControlTree::Binomial(world, 7), std::exception);
}
