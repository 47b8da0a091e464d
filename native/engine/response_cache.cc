#include "engine/response_cache.h"

#include <algorithm>

#include "runtime/wire.h"

namespace herring {

ResponseCache::ResponseCache(uint32_t capacity) : capacity_(capacity) {
  entries_.resize(capacity);
  for (uint32_t p = capacity; p > 0; --p) free_.push_back(p - 1);
}

bool ResponseCache::Cacheable(const Response& r) {
  if (!r.ok() || !r.joined.empty()) return false;
  switch (r.type) {
    case OpType::kJoin:
    case OpType::kAddProcessSet:
    case OpType::kRemoveProcessSet:
    case OpType::kLeave: return false;
    default: return true;
  }
}

bool ResponseCache::Describes(const Response& r, const RequestMeta& q, int member) {
  if (r.type != q.type || r.dtype != q.dtype || r.reduce_op != q.reduce_op ||
      r.prescale != q.prescale || r.postscale != q.postscale || r.root != q.root ||
      r.shapes.size() != q.tensors.size()) {
    return false;
  }
  for (size_t t = 0; t < q.tensors.size(); ++t) {
    const auto& mine = q.tensors[t].shape;
    const auto& agreed = r.shapes[t];
    if (mine.size() != agreed.size()) return false;
    switch (r.type) {
      case OpType::kAllgather:
        // The first dimension may differ per member; the cached response remembers everyone's.
        if (!std::equal(mine.begin() + (mine.empty() ? 0 : 1), mine.end(),
                        agreed.begin() + (agreed.empty() ? 0 : 1)))
          return false;
        if (!mine.empty() && r.per_member[t][member] != mine[0]) return false;
        break;
      case OpType::kAlltoall:
        if (!std::equal(mine.begin() + 1, mine.end(), agreed.begin() + 1)) return false;
        if (r.per_member[member] != q.tensors[t].splits) return false;
        break;
      default:
        if (mine != agreed) return false;
    }
  }
  return true;
}

ResponseCache::Match ResponseCache::Lookup(const RequestMeta& req, int member,
                                           uint32_t* position) const {
  auto it = by_key_.find({req.process_set, req.name});
  if (it == by_key_.end()) return Match::kMiss;
  *position = it->second;
  return Describes(entries_[it->second].response, req, member) ? Match::kHit : Match::kStale;
}

std::string ResponseCache::Serialize() const {
  WireWriter w;
  w.U32(capacity_);
  w.U32(static_cast<uint32_t>(lru_.size()));
  for (uint32_t p : lru_) {  // least recently used first
    w.U32(p);
    EncodeResponse(entries_[p].response, &w);
  }
  w.U32(static_cast<uint32_t>(free_.size()));
  for (uint32_t p : free_) w.U32(p);
  return w.Take();
}

void ResponseCache::Restore(const std::string& blob) {
  WireReader r(blob, "response cache");
  if (r.U32() != capacity_) throw Error(Status::InvalidArgument("HOROVOD_CACHE_CAPACITY differs from the job's"));
  *this = ResponseCache(capacity_);
  free_.clear();
  uint32_t n = r.Count(8);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t p = r.U32();
    if (p >= capacity_) throw Error(Status::Internal("response cache snapshot names position " + std::to_string(p)));
    Entry& e = entries_[p];
    e.used = true;
    e.response = DecodeResponse(&r);
    e.lru = lru_.insert(lru_.end(), p);
    by_key_[{e.response.process_set, e.response.name}] = p;
  }
  uint32_t f = r.Count(4);
  for (uint32_t i = 0; i < f; ++i) free_.push_back(r.U32());
  r.ExpectEnd();
}

void ResponseCache::Touch(uint32_t position) {
  Entry& e = entries_[position];
  lru_.splice(lru_.end(), lru_, e.lru);
}

uint32_t ResponseCache::Put(const Response& response, int64_t* evicted) {
  *evicted = -1;
  auto it = by_key_.find({response.process_set, response.name});
  if (it != by_key_.end()) {
    entries_[it->second].response = response;
    Touch(it->second);
    return it->second;
  }
  if (free_.empty()) {
    uint32_t victim = lru_.front();
    *evicted = victim;
    Erase(victim);
  }
  uint32_t p = free_.back();
  free_.pop_back();
  Entry& e = entries_[p];
  e.used = true;
  e.response = response;
  e.lru = lru_.insert(lru_.end(), p);
  by_key_[{response.process_set, response.name}] = p;
  return p;
}

void ResponseCache::Erase(uint32_t position) {
  Entry& e = entries_[position];
  if (!e.used) return;
  by_key_.erase({e.response.process_set, e.response.name});
  lru_.erase(e.lru);
  e.used = false;
  e.response = Response();
  // Keep free_ sorted so the lowest free position is reused first, identically on every rank.
  free_.insert(std::upper_bound(free_.begin(), free_.end(), position, std::greater<uint32_t>()),
               position);
}

}  // namespace herring
