// FusedLayout (runtime/collective.h): the pieces of a range of a fused buffer, tensor by tensor,
// with empty tensors among them and ranges on and across their edges.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "runtime/collective.h"

namespace herring {
namespace {

using Piece = std::tuple<size_t, int64_t, int64_t>;  // entry, offset, count

std::vector<Piece> Pieces(const FusedLayout& layout, int64_t begin, int64_t end) {
  std::vector<Piece> out;
  layout.ForEachPiece(begin, end, [&](size_t e, int64_t offset, int64_t count) { out.emplace_back(e, offset, count); });
  return out;
}

FusedLayout LayoutOf(const std::vector<int64_t>& counts) {
  AllreduceBatch batch;
  for (int64_t c : counts) batch.entries.push_back({nullptr, nullptr, c});
  FusedLayout layout;
  layout.Reset(batch);
  return layout;
}

TEST(FusedLayout, PiecesFollowTheTensorsAndSkipEmptyOnes) {
  const FusedLayout layout = LayoutOf({10, 0, 5, 0, 0, 7});
  EXPECT_EQ(layout.total(), 22);
  EXPECT_EQ(Pieces(layout, 0, 22), (std::vector<Piece>{{0, 0, 10}, {2, 0, 5}, {5, 0, 7}}));
  EXPECT_EQ(Pieces(layout, 8, 17), (std::vector<Piece>{{0, 8, 2}, {2, 0, 5}, {5, 0, 2}}));
  EXPECT_EQ(Pieces(layout, 10, 15), (std::vector<Piece>{{2, 0, 5}}));  // starts where empty ones start
  EXPECT_EQ(Pieces(layout, 16, 17), (std::vector<Piece>{{5, 1, 1}}));
}

TEST(FusedLayout, EmptyRangesAndRangesAtTheEndVisitNothing) {
  const FusedLayout layout = LayoutOf({4, 4});
  EXPECT_TRUE(Pieces(layout, 3, 3).empty());
  EXPECT_TRUE(Pieces(layout, 8, 8).empty());
  EXPECT_TRUE(Pieces(layout, 8, 12).empty());
  EXPECT_TRUE(Pieces(LayoutOf({}), 0, 0).empty());
  EXPECT_TRUE(Pieces(LayoutOf({0, 0}), 0, 1).empty());
}

}  // namespace
}  // namespace herring
