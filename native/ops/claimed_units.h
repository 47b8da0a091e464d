// The one-host allreduce in which the ranks of a host act as the buffer's server shards, with no
// staging: the fused buffer is cut into units, each handed by the arena's claim counter to
// whichever rank asks first; the claimer reads that unit of every rank's input, sums it in local
// rank order and writes the sum into every rank's output. Each byte of every tensor is read once
// and written once, by one rank.
//
// Units are claimed rather than split in fixed shares: with more ranks than cores (4 ranks on 2
// cores here) the ranks that hold a core do the work instead of waiting for the descheduled ones.
// Which rank sums a unit does not change its bits: the order of the sum is fixed by local rank, as
// in the staged pipeline.
//
// How a claimer reaches the other ranks' tensors is the caller's (UnitAccess): mapped zero-copy
// memory (ops/zero_copy_allreduce.h) or the other processes' memory through the kernel's
// cross-memory copies (ops/cross_memory_allreduce.h).
//
// A rank writes into the others' outputs, so a failed batch must not return while another rank
// may still be writing into its tensors: its caller would free them, and the late write would land
// in whatever the memory holds next. A claimer says so on kUnitWritesFlag around a unit's writes
// and looks for the arena's poison in between; a rank whose batch fails poisons the arena (no
// new unit starts anywhere), then waits, a bounded time, until no live rank is inside a unit's
// writes. A rank stopped inside a unit's writes (SIGSTOP) for longer than that bound is the one
// case left: the job fails anyway, and the launcher ends that process.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "runtime/aligned_buffer.h"
#include "runtime/collective.h"
#include "transport/shm_arena.h"

namespace herring {

// Where one claimer finds the local ranks' tensors of a unit [begin, end) of the fused layout.
class UnitAccess {
 public:
  virtual ~UnitAccess() = default;
  // Called once per unit before Input: whatever must be fetched for it (copies of the other
  // ranks' inputs). Throws Error naming the rank and the tensors.
  virtual void LoadInputs(int64_t begin, int64_t end) = 0;
  // Local member `member`'s input of the piece of tensor `entry` that starts at element `offset`
  // of that tensor and at element `at` of the unit.
  virtual const void* Input(int member, size_t entry, int64_t offset, int64_t at) = 0;
  // The unit's sum (`sum` holds elements [begin, end), contiguous) into every member's outputs.
  virtual void StoreSum(int64_t begin, int64_t end, const uint8_t* sum) = 0;
};

class ClaimedUnits {
 public:
  // How long a failed batch waits for the other ranks to leave their units' writes.
  static constexpr std::chrono::milliseconds kQuiesce{500};

  // Reduces `batch` (laid out by `layout`) unit by unit, claiming units of at most `unit_bytes`
  // from the arena until none is left, then says so on the done flag with `round` and waits until
  // every local rank did: then every rank's outputs hold the result. Every local rank calls it
  // for the same batches in the same order (the claim counter's running total is the set's).
  // Throws Error (step names the collective); by then no live rank writes into this rank's tensors.
  void Run(ExecContext& ctx, const AllreduceBatch& batch, const FusedLayout& layout, UnitAccess& access,
           uint64_t round, size_t unit_bytes, const char* step);

 private:
  void ClaimAndReduce(ExecContext& ctx, const AllreduceBatch& batch, const FusedLayout& layout, UnitAccess& access,
                      uint64_t round, size_t unit_bytes, const char* step);
  // After a failure: poisons the arena and waits (kQuiesce at most) until no live member is
  // inside a unit's writes.
  static void QuiesceWriters(ShmArena& arena, const Status& why);

  // The unit's sum, postscaled (in sum_).
  const uint8_t* ReduceUnit(const AllreduceBatch& batch, const FusedLayout& layout, UnitAccess& access, int local_size,
                            int64_t begin, int64_t end, size_t unit_bytes);

  ScratchBuffer sum_;
  ScratchBuffer scaled_;
  std::vector<const void*> srcs_;
};

}  // namespace herring
