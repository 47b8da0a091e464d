// Where a rank's tensors of a one-host pipelined batch are, told to the other local ranks before
// anything is staged (in its arena notice area, published on kNoticeFlag), so that they can agree
// on reaching each other's tensors in place instead of passing everything through the arena. A
// notice holds:
//   - kZeroCopy: every input and output is in this rank's zero-copy pool (transport/zero_copy_pool.h);
//     the notice holds their offsets there, and the ranks sum in place (ops/zero_copy_allreduce.h);
//   - kTensorsByAddress: ordinary memory; the notice holds the inputs' and outputs' addresses in
//     this process, and the route this rank votes for: the cross-memory allreduce
//     (kTensorsByAddress, ops/cross_memory_allreduce.h), the all-gather out of the others' outputs
//     (kOutputsByAddress, ops/herring/peer_output_reads.h), or staging (kStaged);
//   - kStaged: nothing.
// Every rank reads the same notices and so takes the same route: zero-copy where all offered it;
// where all gave their addresses, the route local rank 0 voted for (its measurements decide, so
// that ranks whose own measurements differ still agree); otherwise staging.
#pragma once

#include <cstdint>

#include "runtime/collective.h"
#include "transport/shm_arena.h"
#include "transport/zero_copy_pool.h"

namespace herring {

enum class TensorReach : uint32_t {
  kStaged = 0,            // nothing offered: this batch goes through the arena
  kZeroCopy = 1,
  kOutputsByAddress = 2,
  kTensorsByAddress = 3,
};

struct TensorNoticeHeader {
  ZeroCopyPoolId pool;  // kZeroCopy: the pool the offsets are in
  uint32_t entries;     // entries that follow (0 when kStaged)
  uint32_t reach;       // TensorReach: what the notice holds (kStaged, kZeroCopy or kTensorsByAddress)
  uint32_t vote;        // kTensorsByAddress: the route this rank votes for
};
struct TensorNoticeEntry {
  uint64_t input;   // kZeroCopy: offset in the pool; kTensorsByAddress: address in the process
  uint64_t output;  // kZeroCopy: offset in the pool; kOutputsByAddress, kTensorsByAddress: address
};
constexpr size_t kMaxNoticeEntries = (ShmArena::kNoticeBytes - sizeof(TensorNoticeHeader)) / sizeof(TensorNoticeEntry);

inline const TensorNoticeHeader& NoticeHeaderOf(const uint8_t* notice) {
  return *reinterpret_cast<const TensorNoticeHeader*>(notice);
}
inline const TensorNoticeEntry* NoticeEntriesOf(const uint8_t* notice) {
  return reinterpret_cast<const TensorNoticeEntry*>(notice + sizeof(TensorNoticeHeader));
}

// What a rank offers when its tensors are not all in zero-copy memory: its tensors' addresses or
// not, and the route it votes for (kStaged, kOutputsByAddress or kTensorsByAddress).
struct AddressOffer {
  bool addresses = false;
  TensorReach vote = TensorReach::kStaged;
};

// Writes this rank's notice for the next batch (zero-copy where every tensor is in `pool`; else
// as `offer` says) and publishes it, without waiting. Returns the round the notice belongs to.
uint64_t OfferTensors(ExecContext& ctx, const AllreduceBatch& batch, const ZeroCopyPool* pool, AddressOffer offer);
// Waits until every local rank has published its notice of `round` (throws Error on a failure).
void AwaitNotices(ExecContext& ctx, uint64_t round);
// After every rank's notice of `round` is known to be published: the route (above). The same
// answer on every rank.
TensorReach AgreedReach(ShmArena& arena, uint64_t round);
// Every rank says (on kReachableFlag) whether it can reach every other's memory for the batch of
// notice round `round`, and waits for the others' answers: true when all can. `step` names the
// wait in errors.
bool EveryoneReaches(ExecContext& ctx, uint64_t round, bool i_reach_everyone, const char* step);
// This process's zero-copy pool, from the context (the engine's owner hands it over); null if none yet.
inline const ZeroCopyPool* OwnZeroCopyPool(const ExecContext& ctx) {
  return ctx.zero_copy ? ctx.zero_copy->pool() : nullptr;
}

}  // namespace herring
