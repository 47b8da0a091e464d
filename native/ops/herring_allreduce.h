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
#include "ops/zero_copy_allreduce.h"
#include "ps/partition_map.h"

namespace herring {

// Chunks of a set that spans hosts are also what goes to the server shards. With colocated
// shards every chunk costs a round trip through the hosts' own (busy) processes: there, larger
// chunks (4 MiB) pay off more than staying in cache. Dedicated servers answer at once, and there
// the first and last chunk's push/pull, which cannot overlap, are what keeps the links from
// their bound: 1 MiB chunks (the sensitivity table of docs/benchmarks_cluster.md). The
// shared-memory slot of such a set is sized for them.
constexpr size_t kCrossHostSlotBytes = 16u << 20;
constexpr size_t kDedicatedServerSlotBytes = 4u << 20;
size_t SlotBytes(const Config& config, bool spans_hosts);

class HerringAllreduce : public AllreduceImpl {
 public:
  const char* name() const override { return "herring"; }
  bool Enabled(const ExecContext& ctx, const AllreduceBatch& batch) const override;
  void Execute(ExecContext& ctx, AllreduceBatch& batch) override;
  // A dedicated server process's part of the same execution: receive the hosts' pieces of the
  // ranges its shards own, sum them in host order, send the sums back. `batch` carries only the
  // layout (dtype, op, counts); a server has no tensors.
  void ServeAsDedicatedServer(ExecContext& ctx, const AllreduceBatch& batch);

 private:
  static constexpr uint64_t kPipelineDepth = 4;  // sub-slots per shared-memory slot
  // Chunks in flight across hosts for a rank alone on its host and for a dedicated server. With
  // two, a link idles whenever a chunk's round trip (push, the slowest host, sum, pull) takes
  // longer than its transfer; with four, pushes of later chunks queue behind the current one
  // while pulls keep the other direction busy.
  static constexpr int kNetworkDepth = 4;

  struct Served {
    int shard;
    uint8_t* staging;  // one contribution per host, one after the other
    uint8_t* sum;
  };
  // What a shard server posted for one chunk: receives of the hosts' pieces, then the sends of
  // the sums.
  struct ServeWork {
    int64_t chunk = 0;
    int64_t n = 0;
    std::vector<Served> served;
    std::vector<CompletionPtr> incoming;
    std::vector<CompletionPtr> outgoing;
  };

  // The pushes and pulls of one chunk in flight, and what the load balancer measures of them.
  struct PullWork {
    std::vector<CompletionPtr> transfers;
    std::vector<size_t> pull_index;  // which transfers are the pulls ...
    std::vector<int> pull_shard;     // ... from which shard ...
    std::vector<double> pull_mib;    // ... of how much
    Clock::time_point posted;
  };

  static int64_t ChunkElements(const ExecContext& ctx, const AllreduceBatch& batch);
  static std::vector<std::vector<ElementRange>> HostSlices(const ExecContext& ctx, int64_t n, int64_t align);

  // With offer_zero_copy, the ranks first find out (at chunk 0) whether every one of them has
  // its tensors in zero-copy memory, and if so reduce them in place instead of staging.
  void PipelineThroughSharedMemory(ExecContext& ctx, AllreduceBatch& batch, int64_t chunk_elems,
                                   int64_t chunks, bool offer_zero_copy);
  // Worker side of one chunk across hosts: pushes this rank's host-reduced slice (in `result`)
  // to the shards and posts the receives of the sums into the same place.
  PullWork PushAndPostPull(ExecContext& ctx, const AllreduceBatch& batch, int64_t chunk_index, int64_t n,
                           uint8_t* result);
  void AwaitPull(ExecContext& ctx, const AllreduceBatch& batch, const PullWork& work);
  // Server side of one chunk for the shards this process hosts.
  ServeWork PostServe(ExecContext& ctx, const AllreduceBatch& batch, int64_t chunk_index, int64_t n,
                      ScratchBuffer* memory);
  void FinishServe(ExecContext& ctx, const AllreduceBatch& batch, ServeWork* work);

  ZeroCopyAllreduce zero_copy_;     // one host, tensors in zero-copy memory: no staging
  ScratchBuffer private_slot_[kNetworkDepth];  // stand in for the shared slot when a rank is alone on its host
  ScratchBuffer server_memory_[kNetworkDepth];
};

}  // namespace herring
