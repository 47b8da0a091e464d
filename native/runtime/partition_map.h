// PartitionMap: which server shard owns which part of a fused buffer. Herring cuts every buffer
// into byte ranges of equal size, one per shard, so every shard gets the same load regardless of
// how tensors are laid out (classic parameter servers place whole variables and are always
// unbalanced). Shares are kept as weights rather than fixed cuts so that ranges can move between
// shards, and shards can be added or removed, between steps: every rank switches to a new map
// (a new version) at the same step boundary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace herring {

struct ElementRange {
  int64_t begin = 0;
  int64_t end = 0;  // exclusive
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
};

ElementRange Intersect(const ElementRange& a, const ElementRange& b);

// [0, count) cut into `parts` contiguous ranges as equal as possible, every boundary a multiple of
// `align` elements (except the end). Deterministic: every rank computes the same cuts.
std::vector<ElementRange> SplitEvenly(int64_t count, int parts, int64_t align);

class PartitionMap {
 public:
  // `num_shards` equal shares.
  static PartitionMap Balanced(int num_shards);
  // Explicit weights (> 0): shard i owns a fraction weights[i] / sum(weights) of every buffer.
  static PartitionMap Weighted(std::vector<double> weights, uint64_t version);

  int num_shards() const { return static_cast<int>(weights_.size()); }
  uint64_t version() const { return version_; }
  const std::vector<double>& weights() const { return weights_; }

  // The ranges of a buffer of `count` elements owned by each shard, boundaries aligned to `align`
  // elements. Empty ranges are possible for tiny buffers.
  std::vector<ElementRange> Ranges(int64_t count, int64_t align) const;

  // A new map (version + 1) that moves `fraction` of shard `from`'s share to shard `to`.
  PartitionMap Moved(int from, int to, double fraction) const;
  // A new map (version + 1) with one more shard taking `share` of the whole (others shrink
  // proportionally), or without shard `index` (its share spread proportionally over the rest).
  PartitionMap WithShardAdded(double share) const;
  PartitionMap WithShardRemoved(int index) const;

  std::string ToString() const;

 private:
  PartitionMap(std::vector<double> weights, uint64_t version);
  std::vector<double> weights_;
  uint64_t version_ = 0;
};

}  // namespace herring
