// The Herring parameter-server allreduce (SC'20), hierarchical:
//   1. each rank stages its part of the fused buffer in its shared-memory slot (prescaled);
//   2. reduce-scatter inside the host: local rank l sums slice l of every slot, in local order;
//   3. across hosts: local rank l pushes its reduced slice, cut along the partition map, to the
//      server shards owning those byte ranges; each shard sums the H host contributions in host
//      order and sends the sum back (the "pull");
//   4. all-gather inside the host: everyone copies the whole result out (postscaled).
// Large buffers stream through the slots in chunks, pipelined (stage, reduce, copy out). Every element is reduced exactly once, by
// one owner, in a fixed order, so the bits are identical on every rank and from run to run.
#pragma once

#include "engine/aligned_buffer.h"
#include "ops/collective.h"

namespace herring {

class HerringAllreduce : public AllreduceImpl {
 public:
  const char* name() const override { return "herring"; }
  bool Enabled(const ExecContext& ctx, const AllreduceBatch& batch) const override;
  void Execute(ExecContext& ctx, AllreduceBatch& batch) override;

 private:
  static constexpr uint64_t kPipelineDepth = 4;  // sub-slots per shared-memory slot

  void PipelineThroughSharedMemory(ExecContext& ctx, AllreduceBatch& batch, int64_t chunk_elems,
                                   int64_t chunks);
  // Step 3 for one chunk of n elements whose host-reduced slices are in `result`.
  void AcrossHosts(ExecContext& ctx, const AllreduceBatch& batch, int64_t chunk_index, int64_t n,
                   uint8_t* result);

  ScratchBuffer private_slot_;  // stands in for the shared slot when a rank is alone on its host
  ScratchBuffer server_memory_;
};

}  // namespace herring
