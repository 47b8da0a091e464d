// The Herring parameter-server allreduce (SC'20), hierarchical:
//   1. each rank stages its part of the fused buffer in its shared-memory slot (prescaled;
//      without a prescale, all but its own slice, which it reads from its tensors in step 2);
//   2. reduce-scatter inside the host: local rank l sums slice l of every slot, in local order;
//   3. across hosts: local rank l pushes its reduced slice, cut along the partition map, to the
//      server shards owning those byte ranges; each shard sums the H host contributions in host
//      order and sends the sum back (the "pull");
//   4. all-gather inside the host: everyone copies the whole result out (postscaled). On one host
//      a rank copies its own slice out right after summing it, while the sum and its tensors are
//      still in its cache, and only the others' slices at this step: from their tensors where
//      it can read them (ops/herring/peer_output_reads.h), else from the shared result area.
// Large buffers stream through the slots in chunks, pipelined (stage, reduce, copy out). Every element is reduced exactly once, by
// one owner, in a fixed order, so the bits are identical on every rank and from run to run.
#pragma once

#include "ops/cross_memory_allreduce.h"
#include "ops/herring/one_host_routes.h"
#include "ops/herring/peer_output_reads.h"
#include "ops/herring/small_exchange.h"
#include "ops/zero_copy_allreduce.h"
#include "ps/shard_server.h"
#include "runtime/aligned_buffer.h"
#include "runtime/collective.h"
#include "runtime/partition_map.h"

namespace herring {

class HerringAllreduce : public AllreduceImpl {
 public:
  const char* name() const override { return "herring"; }
  bool Enabled(const ExecContext& ctx, const AllreduceBatch& batch) const override;
  void Execute(ExecContext& ctx, AllreduceBatch& batch) override;
  // A dedicated server process's part of the same execution (ps/shard_server.h).
  void ServeAsDedicatedServer(ExecContext& ctx, const AllreduceBatch& batch) { server_.ServeAsDedicatedServer(ctx, batch); }

 private:
  // The pushes and pulls of one chunk in flight, and what the load balancer measures of them.
  struct PullWork {
    std::vector<CompletionPtr> transfers;
    std::vector<size_t> pull_index;  // which transfers are the pulls ...
    std::vector<int> pull_shard;     // ... from which shard ...
    std::vector<double> pull_mib;    // ... of how much
    Clock::time_point posted;
  };

  // A small batch on one host (HERRING_SMALL_MESSAGE_BYTES, at most one chunk): every rank
  // stages its input and reduces all of them itself; one hand-off instead of two.
  void ReduceInOneStep(ExecContext& ctx, AllreduceBatch& batch);
  // With offer_tensors (one host), the ranks first find out (at chunk 0) where every one of them
  // has its tensors (ops/tensor_notice.h): in zero-copy memory, they reduce them in place instead
  // of staging; in memory the others can read, the all-gather copies out of the others' tensors.
  void PipelineThroughSharedMemory(ExecContext& ctx, AllreduceBatch& batch, int64_t chunk_elems,
                                   int64_t chunks, bool offer_tensors);
  // Worker side of one chunk across hosts: pushes this rank's host-reduced slice (in `result`)
  // to the shards and posts the receives of the sums into the same place.
  PullWork PushAndPostPull(ExecContext& ctx, const AllreduceBatch& batch, int64_t chunk_index, int64_t n,
                           uint8_t* result);
  void AwaitPull(ExecContext& ctx, const AllreduceBatch& batch, const PullWork& work);
  ZeroCopyAllreduce zero_copy_;     // one host, tensors in zero-copy memory: no staging
  CrossMemoryAllreduce cross_memory_;  // one host, ordinary tensors reached in the others' processes: no staging
  PeerOutputReads peer_reads_;      // one host, ordinary tensors: the all-gather reads the others' outputs
  OneHostRoutes routes_;            // which of those an ordinary one-host batch takes
  ScratchBuffer own_sum_;           // then this rank's slice of a chunk's sum, before its outputs
  ScratchBuffer private_slot_[kNetworkDepth];  // stand in for the shared slot when a rank is alone on its host
  ScratchBuffer one_step_sum_;  // the small path's result before it is scaled into the outputs
  HostSumsExchange host_sums_;  // small batches across hosts (ops/herring/small_exchange.h)
  ShardServer server_;  // the shards this rank hosts when servers are colocated with the workers
};

}  // namespace herring
