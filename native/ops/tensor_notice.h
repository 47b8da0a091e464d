// Where a rank's tensors of a one-host pipelined batch are, told to the other local ranks before
// chunk 0 (in its arena notice area, published on kNoticeFlag), so that they can agree on reaching
// each other's tensors in place instead of passing everything through the arena:
//   - kZeroCopy: every input and output is in this rank's zero-copy pool (transport/zero_copy_pool.h);
//     the notice holds their offsets there, and the ranks sum in place (ops/zero_copy_allreduce.h);
//   - kOutputsByAddress: ordinary memory; the notice holds the outputs' addresses in this process,
//     and the others copy the sum's slices out of them (ops/peer_output_reads.h).
// The staging pipeline publishes the notice before chunk 0's kInputReady and reads everyone's once
// chunk 0 is staged, a wait it does anyway: asking costs nothing. All ranks read the same notices
// and so take the same branch.
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
};

struct TensorNoticeHeader {
  ZeroCopyPoolId pool;  // kZeroCopy: the pool the offsets are in
  uint32_t entries;     // entries that follow (0 when kStaged)
  uint32_t reach;       // TensorReach
};
struct TensorNoticeEntry {
  uint64_t input;   // kZeroCopy: offset in the pool (kOutputsByAddress: unused)
  uint64_t output;  // kZeroCopy: offset in the pool; kOutputsByAddress: address in the process
};
constexpr size_t kMaxNoticeEntries = (ShmArena::kNoticeBytes - sizeof(TensorNoticeHeader)) / sizeof(TensorNoticeEntry);

inline const TensorNoticeHeader& NoticeHeaderOf(const uint8_t* notice) {
  return *reinterpret_cast<const TensorNoticeHeader*>(notice);
}
inline const TensorNoticeEntry* NoticeEntriesOf(const uint8_t* notice) {
  return reinterpret_cast<const TensorNoticeEntry*>(notice + sizeof(TensorNoticeHeader));
}

// Writes this rank's notice for the next batch (zero-copy where every tensor is in `pool`; else
// its outputs' addresses when `offer_addresses`) and publishes it, without waiting. Returns the
// round the notice belongs to.
uint64_t OfferTensors(ExecContext& ctx, const AllreduceBatch& batch, const ZeroCopyPool* pool, bool offer_addresses);
// After every rank's notice of `round` is known to be published: what every rank offered alike
// (kStaged when they differ). The same answer on every rank.
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
