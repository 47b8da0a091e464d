// The server side of the Herring allreduce (SC'20): a process hosting server shards receives,
// for every chunk of a fused buffer, each host's piece of the byte ranges its shards own, sums
// them in host order (the same bits whatever order the pushes arrived in) and sends the sums back.
// Workers (ops/herring_allreduce) and servers (colocated in a worker or dedicated) cut buffers the
// same way through the functions below, which are the protocol between the two sides.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/aligned_buffer.h"
#include "runtime/collective.h"
#include "runtime/partition_map.h"

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

// Sub-slots per shared-memory slot: a chunk is one of them.
constexpr uint64_t kPipelineDepth = 4;
// Chunks in flight across hosts for a rank alone on its host and for a dedicated server. With
// two, a link idles whenever a chunk's round trip (push, the slowest host, sum, pull) takes
// longer than its transfer; with four, pushes of later chunks queue behind the current one
// while pulls keep the other direction busy.
constexpr int kNetworkDepth = 4;

// Boundaries between slices and server ranges fall on 64-byte multiples so the reduction
// kernels work on aligned, whole vectors.
int64_t AlignElements(DataType dtype);
// Elements per chunk, from the knob rather than the arena, so dedicated servers (which have none)
// agree with the workers.
int64_t ChunkElements(const ExecContext& ctx, const AllreduceBatch& batch);
// The slice of an n-element chunk that each member of each host pushes: slices[host][local].
std::vector<std::vector<ElementRange>> HostSlices(const ExecContext& ctx, int64_t n, int64_t align);
// Tag of a push (direction 0) or of the reduced range coming back (direction 1).
uint64_t ShardTag(const ExecContext& ctx, int64_t chunk, int shard, int direction);
// How many shards the sub-tag space of ShardTag can address.
constexpr size_t kMaxShards = 512;

class ShardServer {
 public:
  // What a shard server posted for one chunk: receives of the hosts' pieces, then the sends of
  // the sums.
  struct Work {
    struct Served {
      int shard;
      uint8_t* staging;  // one contribution per host, one after the other
      uint8_t* sum;
    };
    int64_t chunk = 0;
    int64_t n = 0;
    std::vector<Served> served;
    std::vector<CompletionPtr> incoming;
    std::vector<CompletionPtr> outgoing;
  };

  // Posts the receives of chunk `chunk_index` (n elements) for the shards this process hosts,
  // staged in memory slot `slot` (< kNetworkDepth; reusable once the Work's sends are done).
  // Nothing to do (an empty Work) where it hosts none.
  Work Post(ExecContext& ctx, const AllreduceBatch& batch, int64_t chunk_index, int64_t n, int slot);
  // Waits for the pieces, sums them in host order and posts the sends of the sums (waited for by
  // the caller, through work->outgoing).
  void Finish(ExecContext& ctx, const AllreduceBatch& batch, Work* work);
  // A dedicated server process's part of one execution, kNetworkDepth chunks in flight. `batch`
  // carries only the layout (dtype, op, counts); a server has no tensors.
  void ServeAsDedicatedServer(ExecContext& ctx, const AllreduceBatch& batch);

 private:
  ScratchBuffer memory_[kNetworkDepth];
};

}  // namespace herring
