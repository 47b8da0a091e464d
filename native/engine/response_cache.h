// ResponseCache: the responses of collectives already negotiated, by (process set, name), each at
// a fixed bit position. Every rank inserts, touches and evicts in the same order (they all see the
// same responses in the same order), so positions mean the same collective on every rank and one
// bitwise AND of "I have position p ready" bits replaces the coordinator in steady state.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/message.h"

namespace herring {

class ResponseCache {
 public:
  explicit ResponseCache(uint32_t capacity);

  enum class Match { kMiss, kHit, kStale };
  // kHit: `req`, as submitted by process-set member `member`, is exactly what the cached response
  // at *position describes. kStale: cached, but something changed (shape, dtype, op...).
  Match Lookup(const RequestMeta& req, int member, uint32_t* position) const;

  uint32_t capacity() const { return capacity_; }
  bool occupied(uint32_t position) const { return position < entries_.size() && entries_[position].used; }
  const Response& at(uint32_t position) const { return entries_[position].response; }
  // The occupied positions, least recently used first: a cycle visits these, not every position.
  const std::list<uint32_t>& occupied_positions() const { return lru_; }

  // Marks the entry most recently used.
  void Touch(uint32_t position);
  // Inserts a response (replacing the entry of the same key if any). When full, evicts the least
  // recently used entry; *evicted is its position, or -1.
  uint32_t Put(const Response& response, int64_t* evicted);
  void Erase(uint32_t position);

  // The whole state (positions, LRU order, free positions), for a process that joins a running
  // job and must take part in the same bit-vector negotiation as everyone else.
  std::string Serialize() const;
  void Restore(const std::string& blob);

  // Whether a response may be cached at all: errors, joins and process-set changes are not.
  static bool Cacheable(const Response& response);
  // Whether `req` from member `member` is what `response` describes.
  static bool Describes(const Response& response, const RequestMeta& req, int member);

 private:
  using Key = CollectiveKey;
  struct Entry {
    bool used = false;
    Response response;
    std::list<uint32_t>::iterator lru;  // position in lru_
  };

  uint32_t capacity_;
  std::vector<Entry> entries_;
  std::unordered_map<Key, uint32_t, CollectiveKeyHash> by_key_;
  std::list<uint32_t> lru_;            // front: least recently used
  std::vector<uint32_t> free_;         // free positions, lowest last
};

}  // namespace herring
