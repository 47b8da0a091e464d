// The one-host allreduce for tensors in ordinary memory without staging: the ranks of the host act
// as the buffer's server shards (ops/claimed_units.h), and a claimer reaches the other ranks'
// tensors in their own processes through cross-memory copies (ops/cross_memory_copy.h). For a
// unit, it copies every other rank's input into its cache (process_vm_readv), sums them with its
// own input in local rank order, and writes the sum into its own output and every other rank's
// (process_vm_writev).
//
// Why: memory traffic. The staged pipeline copies each rank's input into the arena and the sums
// back out, (5 - 1/N)x the buffer per rank; the result-area all-gather moves the sum's lines
// between the cores at every chunk. Here a rank touches only the units it claims: every rank's
// input and output there, once, with the unit's copies and sum in its L2 cache. Measured with a
// two-process model of this path on this 2-vCPU Xeon (a 4 MiB copy takes 280-300 us here): np=2
// 4 MiB 373-393 us and 16 MiB 1.42-1.67 ms, against 556 us and 2.31 ms for the staged pipeline
// and 458 us and 1.87 ms for Open MPI's allreduce (its CMA single copy) in the same hour. With
// 4 ranks on 2 cores the ranks that hold the cores claim the units.
//
// Every local rank must agree: each offers its tensors' addresses in its notice
// (TensorReach::kTensorsByAddress), and the set's first such batch asks, in one round, whether
// every rank can read and write every other's memory; the answer holds for the set's life.
// Otherwise the batch is staged.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/claimed_units.h"
#include "ops/cross_memory_copy.h"
#include "runtime/aligned_buffer.h"
#include "runtime/collective.h"

namespace herring {

class CrossMemoryAllreduce {
 public:
  // At most this much per unit: a unit's copies of the other ranks' inputs and its sum stay in
  // the L2 cache. Smaller batches are cut into at least two units per rank, so that every rank
  // that holds a core has a share.
  static constexpr size_t kMaxUnitBytes = 128 << 10;
  static constexpr size_t kMinUnitBytes = 16 << 10;

  // Once every rank's notice of `round` gave its tensors' addresses: runs the batch in place and
  // returns true; returns false (having changed nothing) when some rank cannot reach some other's
  // memory, so that all stage instead. Throws Error like any collective, naming the rank whose
  // memory could not be copied.
  bool Run(ExecContext& ctx, AllreduceBatch& batch, uint64_t round);

 private:
  // A unit's tensors: mine in place, the others' through copies.
  class ProcessAccess : public UnitAccess {
   public:
    ProcessAccess(CrossMemoryAllreduce& owner, ExecContext& ctx, const AllreduceBatch& batch, size_t unit_bytes);
    void LoadInputs(int64_t begin, int64_t end) override;
    const void* Input(int member, size_t entry, int64_t offset, int64_t at) override;
    void StoreSum(int64_t begin, int64_t end, const uint8_t* sum) override;

   private:
    // The pieces of [begin, end) in member's tensors (inputs or outputs), paired with `local`
    // (a contiguous unit) in local_ and remote_.
    void Pair(int member, bool inputs, int64_t begin, int64_t end, uint8_t* local);
    void Copy(int member, CrossMemory direction, const char* what);

    CrossMemoryAllreduce& owner_;
    ExecContext& ctx_;
    const AllreduceBatch& batch_;
    const size_t esz_;
    const size_t unit_bytes_;
    const int me_;
    uint8_t* copies_;  // a unit per local member (mine unused)
  };
  static size_t UnitBytes(const AllreduceBatch& batch, int local_size);

  std::vector<PeerTensors> peers_;
  FusedLayout layout_;
  ClaimedUnits units_;
  ScratchBuffer copies_;
  std::vector<iovec> local_, remote_;
};

}  // namespace herring
