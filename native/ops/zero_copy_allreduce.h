// The one-host allreduce for tensors in zero-copy memory (transport/zero_copy_pool.h): the ranks
// of the host act as the server shards of the buffer (ops/claimed_units.h), each pulling a unit
// straight out of every rank's input, summing it in local rank order and pushing the sum straight
// into every rank's output, all through the other ranks' pools mapped into this process. Each byte
// is read once and written once: the least memory traffic any local allreduce can do, against
// (5 - 1/N)x the buffer per rank when staging through the arena ((5 + 1/N)x with a prescale:
// docs/zero_copy.md).
//
// Every local rank must agree on taking this path. Each one offers (ops/tensor_notice.h) where its
// tensors are in zero-copy memory, or says it cannot; the path then runs if every rank offered and
// every rank could map every other's memory; otherwise all of them stage.
#pragma once

#include <vector>

#include "ops/claimed_units.h"
#include "runtime/collective.h"
#include "transport/zero_copy_pool.h"

namespace herring {

class ZeroCopyAllreduce {
 public:
  // Below this, a batch is staged without asking: staging it costs about as much as going
  // zero-copy's extra round.
  static constexpr size_t kMinBytes = 64 << 10;
  // Units small enough that the partial sum stays in the L2 cache while it is written to every
  // rank's output.
  static constexpr size_t kUnitBytes = 128 << 10;

  // Once every rank's notice of `round` offered zero-copy memory (ops/tensor_notice.h): maps the
  // others' memory and runs the batch in place, returning true; returns false (having changed
  // nothing) when some rank could not map some other's memory, so all must stage instead.
  // Throws Error like any collective.
  bool Run(ExecContext& ctx, AllreduceBatch& batch, uint64_t round);

 private:
  struct Peer {
    uint8_t* base = nullptr;
    std::vector<std::pair<uint64_t, uint64_t>> offsets;  // (input, output) per entry
  };
  // A unit's tensors, straight in the mapped pools.
  class PoolAccess : public UnitAccess {
   public:
    PoolAccess(const std::vector<Peer>& peers, const FusedLayout& layout, size_t esz)
        : peers_(peers), layout_(layout), esz_(esz) {}
    void LoadInputs(int64_t, int64_t) override {}
    const void* Input(int member, size_t entry, int64_t offset, int64_t) override {
      const Peer& p = peers_[member];
      return p.base + p.offsets[entry].first + offset * esz_;
    }
    void StoreSum(int64_t begin, int64_t end, const uint8_t* sum) override;

   private:
    const std::vector<Peer>& peers_;
    const FusedLayout& layout_;
    const size_t esz_;
  };

  PeerPools pools_;
  std::vector<Peer> peers_;
  FusedLayout layout_;
  ClaimedUnits units_;
  bool warned_ = false;
};

}  // namespace herring
