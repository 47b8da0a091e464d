// The staging protocol of a host's shared-memory arena (transport/shm_arena.h), shared by every
// collective that passes data through its slots: the Herring allreduce's pipeline and the
// one-step paths of small allreduces, allgathers and broadcasts.
//
// Every member runs the same collectives in the same order, so they number the buffers they
// stage alike (ProcessSet::arena_sequence). Buffer `seq` lives in sub-slot seq % kPipelineDepth
// of each member's slot, at a stride fixed by the slot size, whatever the collective. A member
// writes sub-slot k again only when every member has finished reading what was staged there
// kPipelineDepth buffers earlier (kSliceDone), which keeps collectives of different kinds from
// overwriting each other's data.
#pragma once

#include <cstdint>

#include "ps/shard_server.h"
#include "runtime/collective.h"
#include "transport/shm_arena.h"

namespace herring {

// The arena's counters, per member: staged up to seq (kInputReady), done reading the others'
// staged data of seq (kSliceDone), done reading the shared result area of seq (kConsumed).
constexpr int kInputReady = 0;
constexpr int kSliceDone = 1;
constexpr int kConsumed = 2;
// The tensor notices of pipelined batches (ops/tensor_notice.h), and the rounds in which the ranks
// tell each other whether they can reach each other's memory (zero-copy mapping, cross-memory
// copies) and whether they finished their units of a batch reduced in place (ops/claimed_units.h).
constexpr int kNoticeFlag = 3;
constexpr int kReachableFlag = 4;
constexpr int kClaimedUnitsDoneFlag = 5;
// Odd while a member writes a unit's sum into the other members' outputs (ops/claimed_units.h).
constexpr int kUnitWritesFlag = 6;

// Bytes between two sub-slots of a slot of `slot_bytes` (64-byte aligned).
inline size_t SubSlotStride(size_t slot_bytes) { return (slot_bytes / kPipelineDepth) & ~size_t{63}; }

// Whether a collective of `bytes` per member may take a one-step path in this process set: one
// host with an arena, at most HERRING_SMALL_MESSAGE_BYTES and one sub-slot.
bool OneStepFits(const ExecContext& ctx, size_t bytes);
// The largest allreduce that takes one step through `arena` (null: no other rank on the host):
// the knob's HERRING_SMALL_MESSAGE_BYTES, but at most kOversubscribedOneStepBytes where some rank
// has fewer cores than the host has ranks (ShmArena::SomeMemberWithoutACore, the same answer on
// every rank, as the choice must be: ranks bound to different CPU sets took different paths and
// summed garbage while each asked its own count). There every rank's reading of every input is work the cores do in turn, and from 32
// KiB the pipeline (each rank sums a slice, then copies the others') was faster. 4 ranks on 2
// cores, 3 interleaved launches each: 32 KiB 40.5 us in one step against 34.4 staged, 64 KiB 49.3
// against 42.6 (Open MPI 45.2); 16 KiB alike (36.4 against 36.9).
constexpr int64_t kOversubscribedOneStepBytes = 16 << 10;
int64_t OneStepAllreduceBytes(int64_t small_message_bytes, const ShmArena* arena);

// One buffer staged by every member and read by the others in one step.
class OneStepStaging {
 public:
  // Numbers the buffer and waits until its sub-slot is free (every member read its previous use).
  explicit OneStepStaging(ExecContext& ctx);
  uint8_t* mine() { return at(ctx_.set.my_local_index); }
  const uint8_t* of(int local_index) { return at(local_index); }
  // Says this member's data is staged (members with nothing to stage call it too).
  void Publish();
  void AwaitEveryone();
  void AwaitMember(int local_index);
  // Says this member has read what it needed of the others' data.
  void Release();

 private:
  uint8_t* at(int local_index);

  ExecContext& ctx_;
  ShmArena& arena_;
  uint64_t seq_;
};

// The host's sum of a small batch (OneStepFits' size) in one step: every member stages its input,
// prescaled, and reduces all of them into `sum` in local-rank order, the bits the staged
// pipeline's slice owners compute. Fault points "gather" and "shm".
void ReduceHostInOneStep(ExecContext& ctx, const AllreduceBatch& batch, uint8_t* sum);

// Copies a small path's whole result into the outputs, postscaled (fault point "scatter").
void ScatterWholeResult(ExecContext& ctx, const AllreduceBatch& batch, const uint8_t* result);

}  // namespace herring
