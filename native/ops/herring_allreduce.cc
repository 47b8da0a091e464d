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
  // A chunk is one of kPipelineDepth sub-slots: small enough that a chunk's copy-in, reduction and
  // copy-out find it in the shared L3 cache, deep enough that ranks rarely wait for each other.
  const size_t slot_bytes = ctx.set.arena ? ctx.set.arena->slot_bytes() : ctx.config.shm_slot_bytes;
  int64_t chunk_elems = static_cast<int64_t>(slot_bytes / kPipelineDepth / esz);
  chunk_elems = std::max<int64_t>(AlignElements(batch.dtype), chunk_elems - chunk_elems % AlignElements(batch.dtype));
  const int64_t chunks = (total + chunk_elems - 1) / chunk_elems;
  if (ctx.set.arena) {
    PipelineThroughSharedMemory(ctx, batch, chunk_elems, chunks);
  } else {
    // Alone on this host: nothing to share; chunks go through a private buffer to the servers.
    uint8_t* buf = private_slot_.Get(chunk_elems * esz);
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = c * chunk_elems, end = std::min(total, begin + chunk_elems);
      {
        TimelinePhase phase(ctx.timeline, ctx.lane, "GATHER");
        if (ctx.faults) ctx.faults->At("gather", &ctx.net);
        batch.GatherInputs(begin, end, buf, batch.prescale);
      }
      {
        TimelinePhase phase(ctx.timeline, ctx.lane, "PUSH_PULL_SERVERS");
        AcrossHosts(ctx, batch, c, end - begin, buf);
      }
      TimelinePhase phase(ctx.timeline, ctx.lane, "COPY_OUT");
      batch.ScatterOutputs(begin, end, buf, batch.postscale);
      if (ctx.faults) ctx.faults->At("scatter", &ctx.net, batch.entries[0].output, batch.entries[0].count ? 1 : 0);
    }
  }
  ctx.counters.herring_allreduces++;
}

void HerringAllreduce::PipelineThroughSharedMemory(ExecContext& ctx, AllreduceBatch& batch, int64_t chunk_elems,
                                                   int64_t chunks) {
  const int64_t total = batch.total_count();
  const size_t esz = ElementSize(batch.dtype);
  ShmArena& arena = *ctx.set.arena;
  const int local_size = static_cast<int>(ctx.set.local_members().size());
  const int me = ctx.set.my_local_index;
  const size_t sub_slot_bytes = chunk_elems * esz;
  // Every member runs the same batches in the same order, so sequence numbers agree.
  const uint64_t base = ctx.set.arena_sequence;
  ctx.set.arena_sequence += chunks;
  auto seq = [&](int64_t c) { return base + static_cast<uint64_t>(c) + 1; };
  auto offset = [&](int64_t c) { return (seq(c) % kPipelineDepth) * sub_slot_bytes; };
  auto range = [&](int64_t c) { return ElementRange{c * chunk_elems, std::min(total, (c + 1) * chunk_elems)}; };
  auto check = [](const Status& s, const char* step) { CheckArena(s, step); };

  // Stage 1: my chunk into my sub-slot, once every owner finished reading it kPipelineDepth ago.
  auto copy_in = [&](int64_t c) {
    TimelinePhase phase(ctx.timeline, ctx.lane, "GATHER_INTO_SHM");
    if (ctx.faults) ctx.faults->At("gather", &ctx.net);
    if (seq(c) > kPipelineDepth) {
      check(arena.WaitAll(kSliceDone, seq(c) - kPipelineDepth, ctx.StepDeadline()), "shared-memory slot reuse");
    }
    const ElementRange r = range(c);
    batch.GatherInputs(r.begin, r.end, arena.slot(me) + offset(c), batch.prescale);
    arena.Publish(kInputReady, seq(c));
  };
  // Stage 2: reduce my slice of everyone's chunk (in local order), then across hosts.
  auto reduce = [&](int64_t c) {
    const ElementRange r = range(c);
    uint8_t* result = arena.result() + offset(c);
    {
      TimelinePhase phase(ctx.timeline, ctx.lane, "SHM_REDUCE_SCATTER");
      if (ctx.faults) ctx.faults->At("shm", &ctx.net);
      check(arena.WaitAll(kInputReady, seq(c), ctx.StepDeadline()), "staging in shared memory");
      if (seq(c) > kPipelineDepth) {
        check(arena.WaitAll(kConsumed, seq(c) - kPipelineDepth, ctx.StepDeadline()), "shared-memory result reuse");
      }
      const ElementRange mine = SplitEvenly(r.size(), local_size, AlignElements(batch.dtype))[me];
      if (!mine.empty()) {
        std::vector<const void*> srcs(local_size);
        for (int i = 0; i < local_size; ++i) srcs[i] = arena.slot(i) + offset(c) + mine.begin * esz;
        ReduceInto(result + mine.begin * esz, srcs.data(), local_size, mine.size(), batch.dtype, batch.op);
      }
      ctx.counters.shm_chunks++;
    }
    if (ctx.set.hosts.size() > 1) {
      TimelinePhase phase(ctx.timeline, ctx.lane, "PUSH_PULL_SERVERS");
      AcrossHosts(ctx, batch, c, r.size(), result);
    }
    arena.Publish(kSliceDone, seq(c));
  };
  // Stage 3: the whole reduced chunk out to my tensors.
  auto copy_out = [&](int64_t c) {
    TimelinePhase phase(ctx.timeline, ctx.lane, "COPY_OUT");
    check(arena.WaitAll(kSliceDone, seq(c), ctx.StepDeadline()), "all-gather in shared memory");
    const ElementRange r = range(c);
    batch.ScatterOutputs(r.begin, r.end, arena.result() + offset(c), batch.postscale);
    if (ctx.faults && !batch.entries.empty()) {
      ctx.faults->At("scatter", &ctx.net, batch.entries[0].output, batch.entries[0].count ? 1 : 0);
    }
    arena.Publish(kConsumed, seq(c));
  };

  // Software pipeline: while the others still reduce chunk c, stage chunk c + 1 and copy out
  // chunk c - 1. Each stage only waits for what other ranks did earlier in their own program
  // order, so this cannot deadlock (kPipelineDepth >= 3).
  copy_in(0);
  for (int64_t c = 0; c < chunks; ++c) {
    if (c + 1 < chunks) copy_in(c + 1);
    reduce(c);
    if (c >= 1) copy_out(c - 1);
  }
  copy_out(chunks - 1);
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
