#include "runtime/partition_map.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "common/status.h"

namespace herring {

ElementRange Intersect(const ElementRange& a, const ElementRange& b) {
  ElementRange r{std::max(a.begin, b.begin), std::min(a.end, b.end)};
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

std::vector<ElementRange> SplitEvenly(int64_t count, int parts, int64_t align) {
  std::vector<ElementRange> out(parts);
  int64_t units = (count + align - 1) / align;  // aligned units, the last may be partial
  int64_t pos = 0;
  for (int i = 0; i < parts; ++i) {
    int64_t end_unit = units * (i + 1) / parts;
    int64_t end = std::min(count, end_unit * align);
    out[i] = {pos, end};
    pos = end;
  }
  return out;
}

PartitionMap::PartitionMap(std::vector<double> weights, uint64_t version)
    : weights_(std::move(weights)), version_(version) {
  if (weights_.empty()) throw Error(Status::InvalidArgument("a partition map needs at least one shard"));
  for (double w : weights_) {
    if (!(w > 0)) throw Error(Status::InvalidArgument("partition map weights must be positive"));
  }
}

PartitionMap PartitionMap::Balanced(int num_shards) {
  return PartitionMap(std::vector<double>(num_shards, 1.0), 0);
}

PartitionMap PartitionMap::Weighted(std::vector<double> weights, uint64_t version) {
  return PartitionMap(std::move(weights), version);
}

std::vector<ElementRange> PartitionMap::Ranges(int64_t count, int64_t align) const {
  const int n = num_shards();
  bool equal = std::all_of(weights_.begin(), weights_.end(), [&](double w) { return w == weights_[0]; });
  if (equal) return SplitEvenly(count, n, align);
  double total = std::accumulate(weights_.begin(), weights_.end(), 0.0);
  int64_t units = (count + align - 1) / align;
  std::vector<ElementRange> out(n);
  double cum = 0;
  int64_t pos = 0;
  for (int i = 0; i < n; ++i) {
    cum += weights_[i];
    int64_t end_unit = (i == n - 1) ? units : static_cast<int64_t>(units * (cum / total) + 0.5);
    int64_t end = std::min(count, std::max(pos, end_unit * align));
    out[i] = {pos, end};
    pos = end;
  }
  return out;
}

PartitionMap PartitionMap::Moved(int from, int to, double fraction) const {
  std::vector<double> w = weights_;
  double delta = w[from] * fraction;
  w[from] -= delta;
  w[to] += delta;
  return PartitionMap(w, version_ + 1);
}

PartitionMap PartitionMap::WithShardAdded(double share) const {
  double total = std::accumulate(weights_.begin(), weights_.end(), 0.0);
  std::vector<double> w;
  for (double x : weights_) w.push_back(x * (1.0 - share));
  w.push_back(total * share);
  return PartitionMap(w, version_ + 1);
}

PartitionMap PartitionMap::WithShardRemoved(int index) const {
  std::vector<double> w = weights_;
  w.erase(w.begin() + index);
  return PartitionMap(w, version_ + 1);
}

std::string PartitionMap::ToString() const {
  std::ostringstream s;
  double total = std::accumulate(weights_.begin(), weights_.end(), 0.0);
  s << "v" << version_ << " [";
  for (size_t i = 0; i < weights_.size(); ++i) s << (i ? ", " : "") << weights_[i] / total;
  s << "]";
  return s.str();
}

}  // namespace herring
