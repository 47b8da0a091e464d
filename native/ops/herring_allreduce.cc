#include "ops/herring_allreduce.h"

#include <algorithm>

#include "kernels/reduce.h"
#include "ps/partition_map.h"

namespace herring {
namespace {

// Arena flags used by this collective; sequences count chunks staged through the arena.
constexpr int kInputReady = 0;
constexpr int kSliceDone = 1;
constexpr int kConsumed = 2;

// Boundaries between slices and server ranges fall on 64-byte multiples so the reduction
// kernels work on aligned, whole vectors.
int64_t AlignElements(DataType dtype) { return std::max<int64_t>(1, 64 / ElementSize(dtype)); }

// Tag of a push (direction 0) or of the reduced range coming back (direction 1).
uint64_t ShardTag(const ExecContext& ctx, int64_t chunk, int shard, int direction) {
  uint64_t sub = ((static_cast<uint64_t>(chunk) & 0x3ff) << 10) | (static_cast<uint64_t>(shard) << 1) |
                 static_cast<uint64_t>(direction);
  return ctx.Tag(sub);
}

void CheckArena(const Status& s, const std::string& step) {
  if (!s.ok()) throw Error(Status(s.code(), s.message() + " (during " + step + ")"));
}

}  // namespace

bool HerringAllreduce::Enabled(const ExecContext& ctx, const AllreduceBatch& batch) const {
  return ctx.n() > 1 && ctx.set.servers.shard_member.size() < 512;  // sub-tag space, see ShardTag
}

void HerringAllreduce::Execute(ExecContext& ctx, AllreduceBatch& batch) {
  const int64_t total = batch.total_count();
  if (total == 0) return;
  const size_t esz = ElementSize(batch.dtype);
  const size_t slot_bytes = ctx.set.arena ? ctx.set.arena->slot_bytes() : ctx.config.shm_slot_bytes;
  int64_t chunk_elems = static_cast<int64_t>(slot_bytes / esz);
  chunk_elems -= chunk_elems % AlignElements(batch.dtype);
  int64_t chunk = 0;
  for (int64_t begin = 0; begin < total; begin += chunk_elems, ++chunk) {
    ReduceChunk(ctx, batch, chunk, begin, std::min(total, begin + chunk_elems));
  }
  ctx.counters.herring_allreduces++;
}

void HerringAllreduce::ReduceChunk(ExecContext& ctx, AllreduceBatch& batch, int64_t chunk_index,
                                   int64_t begin, int64_t end) {
  const int64_t n = end - begin;
  const size_t esz = ElementSize(batch.dtype);
  ShmArena* arena = ctx.set.arena.get();
  const int local_size = static_cast<int>(ctx.set.local_members().size());
  const int me = ctx.set.my_local_index;
  uint8_t* slot = arena ? arena->slot(me) : private_slot_.Get(n * esz);
  uint8_t* result = arena ? arena->result() : slot;
  const uint64_t seq = arena ? ++ctx.set.arena_sequence : 0;

  // 1. Stage my data (prescaled) where my neighbours can read it.
  {
    TimelinePhase phase(ctx.timeline, ctx.lane, "GATHER_INTO_SHM");
    if (ctx.faults) ctx.faults->At("gather", &ctx.net);
    batch.GatherInputs(begin, end, slot, batch.prescale);
  }

  // 2. Reduce-scatter inside the host: I own slice `me` of the chunk.
  auto slices = SplitEvenly(n, local_size, AlignElements(batch.dtype));
  const ElementRange mine = slices[me];
  if (arena) {
    TimelinePhase phase(ctx.timeline, ctx.lane, "SHM_REDUCE_SCATTER");
    if (ctx.faults) ctx.faults->At("shm", &ctx.net);
    arena->Publish(kInputReady, seq);
    CheckArena(arena->WaitAll(kInputReady, seq, ctx.StepDeadline()), "staging in shared memory");
    // Nobody may still be copying out the previous chunk's result that I am about to overwrite.
    if (seq > 1) CheckArena(arena->WaitAll(kConsumed, seq - 1, ctx.StepDeadline()), "shared-memory reuse");
    if (!mine.empty()) {
      std::vector<const void*> srcs(local_size);
      for (int i = 0; i < local_size; ++i) srcs[i] = arena->slot(i) + mine.begin * esz;
      ReduceInto(result + mine.begin * esz, srcs.data(), local_size, mine.size(), batch.dtype, batch.op);
    }
    ctx.counters.shm_chunks++;
  }

  // 3. Across hosts through the server shards.
  if (ctx.set.hosts.size() > 1) {
    TimelinePhase phase(ctx.timeline, ctx.lane, "PUSH_PULL_SERVERS");
    AcrossHosts(ctx, batch, chunk_index, n, result);
  }

  // 4. All-gather inside the host.
  TimelinePhase phase(ctx.timeline, ctx.lane, "COPY_OUT");
  if (arena) {
    arena->Publish(kSliceDone, seq);
    CheckArena(arena->WaitAll(kSliceDone, seq, ctx.StepDeadline()), "all-gather in shared memory");
  }
  batch.ScatterOutputs(begin, end, result, batch.postscale);
  if (ctx.faults && !batch.entries.empty()) {
    ctx.faults->At("scatter", &ctx.net, batch.entries[0].output, batch.entries[0].count ? 1 : 0);
  }
  if (arena) arena->Publish(kConsumed, seq);
}

void HerringAllreduce::AcrossHosts(ExecContext& ctx, const AllreduceBatch& batch, int64_t chunk_index,
                                   int64_t n, uint8_t* result) {
  const size_t esz = ElementSize(batch.dtype);
  const int64_t align = AlignElements(batch.dtype);
  const ServerLayout& servers = ctx.set.servers;
  const auto ranges = servers.map.Ranges(n, align);
  const int num_hosts = static_cast<int>(ctx.set.hosts.size());
  std::vector<std::vector<ElementRange>> host_slices(num_hosts);
  for (int g = 0; g < num_hosts; ++g) {
    host_slices[g] = SplitEvenly(n, static_cast<int>(ctx.set.hosts[g].size()), align);
  }
  const ElementRange mine = host_slices[ctx.set.my_host][ctx.set.my_local_index];

  if (ctx.faults) ctx.faults->At("push", &ctx.net);
  std::vector<CompletionPtr> transfers;
  // Push my slice, cut along the shard ranges, and post the receives of the sums.
  for (int s = 0; s < servers.map.num_shards(); ++s) {
    ElementRange piece = Intersect(mine, ranges[s]);
    if (piece.empty()) continue;
    int server_rank = ctx.member_rank(servers.shard_member[s]);
    uint8_t* at = result + piece.begin * esz;
    transfers.push_back(ctx.net.Send(server_rank, ShardTag(ctx, chunk_index, s, 0), at, piece.size() * esz));
    transfers.push_back(ctx.net.Recv(server_rank, ShardTag(ctx, chunk_index, s, 1), at, piece.size() * esz));
  }

  // Serve the shards I host: receive every host's contribution, sum in host order, send back.
  struct Served {
    int shard;
    uint8_t* staging;  // num_hosts contributions, one after the other
    uint8_t* sum;
  };
  std::vector<Served> served;
  size_t need = 0;
  for (int s = 0; s < servers.map.num_shards(); ++s) {
    if (servers.shard_member[s] == ctx.me() && !ranges[s].empty()) need += (num_hosts + 1) * ranges[s].size() * esz;
  }
  uint8_t* memory = need ? server_memory_.Get(need) : nullptr;
  std::vector<CompletionPtr> incoming;
  for (int s = 0; s < servers.map.num_shards(); ++s) {
    const ElementRange r = ranges[s];
    if (servers.shard_member[s] != ctx.me() || r.empty()) continue;
    Served sv{s, memory, memory + num_hosts * r.size() * esz};
    memory += (num_hosts + 1) * r.size() * esz;
    for (int g = 0; g < num_hosts; ++g) {
      for (size_t i = 0; i < ctx.set.hosts[g].size(); ++i) {
        ElementRange piece = Intersect(host_slices[g][i], r);
        if (piece.empty()) continue;
        uint8_t* at = sv.staging + (g * r.size() + (piece.begin - r.begin)) * esz;
        incoming.push_back(ctx.net.Recv(ctx.member_rank(ctx.set.hosts[g][i]), ShardTag(ctx, chunk_index, s, 0),
                                        at, piece.size() * esz));
      }
    }
    served.push_back(sv);
  }
  WaitTransfers(incoming, ctx, "server shard receiving pushes of '" + batch.label + "'");
  if (ctx.faults && !served.empty()) ctx.faults->At("serve", &ctx.net);
  for (const Served& sv : served) {
    const ElementRange r = ranges[sv.shard];
    std::vector<const void*> srcs(num_hosts);
    for (int g = 0; g < num_hosts; ++g) srcs[g] = sv.staging + g * r.size() * esz;
    ReduceInto(sv.sum, srcs.data(), num_hosts, r.size(), batch.dtype, batch.op);
    for (int g = 0; g < num_hosts; ++g) {
      for (size_t i = 0; i < ctx.set.hosts[g].size(); ++i) {
        ElementRange piece = Intersect(host_slices[g][i], r);
        if (piece.empty()) continue;
        transfers.push_back(ctx.net.Send(ctx.member_rank(ctx.set.hosts[g][i]), ShardTag(ctx, chunk_index, sv.shard, 1),
                                         sv.sum + (piece.begin - r.begin) * esz, piece.size() * esz));
      }
    }
    ctx.counters.server_ranges++;
  }
  if (ctx.faults) ctx.faults->At("pull", &ctx.net);
  WaitTransfers(transfers, ctx, "push/pull of '" + batch.label + "' with the server shards");
}

}  // namespace herring
