// The one-host allreduce for tensors in zero-copy memory (transport/zero_copy_pool.h): the ranks
// of the host act as the server shards of the buffer, each pulling a unit straight out of every
// rank's input, summing it in local rank order and pushing the sum straight into every rank's
// output. Each byte is read once and written once: the least memory traffic any local allreduce
// can do, against (5 - 1/N)x the buffer per rank when staging through the arena ((5 + 1/N)x with
// a prescale: docs/zero_copy.md).
//
// Units are handed out by the arena's claim counter rather than split in fixed shares: with more
// ranks than cores (4 ranks on 2 cores here) the ranks that hold a core do the work instead of
// waiting for the descheduled ones. Which rank sums a unit does not change its bits: the order of
// the sum is fixed by local rank.
//
// Every local rank must agree on taking this path. Each one offers (ops/tensor_notice.h) where its
// tensors are in zero-copy memory, or says it cannot; the staging pipeline publishes the offer
// before chunk 0 and reads everyone's once chunk 0 is staged, a wait it does anyway, so ordinary
// tensors pay nothing for the question. The path then runs if every rank offered and every rank
// could map every other's memory; otherwise all of them stage.
#pragma once

#include <vector>

#include "runtime/aligned_buffer.h"
#include "runtime/collective.h"
#include "transport/zero_copy_pool.h"

namespace herring {

class ZeroCopyAllreduce {
 public:
  // Below this, a batch is staged without asking: staging it costs about as much as going
  // zero-copy's extra round.
  static constexpr size_t kMinBytes = 64 << 10;

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
  void ReduceUnit(const ExecContext& ctx, const AllreduceBatch& batch, int64_t begin, int64_t end);

  PeerPools pools_;
  std::vector<Peer> peers_;
  FusedLayout layout_;
  ScratchBuffer sum_;
  ScratchBuffer scaled_;
  bool warned_ = false;
};

}  // namespace herring
