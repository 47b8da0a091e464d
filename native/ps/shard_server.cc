#include "ps/shard_server.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "kernels/reduce.h"

namespace herring {

size_t SlotBytes(const Config& config, bool spans_hosts) {
  if (!spans_hosts) return config.shm_slot_bytes;
  const size_t floor = config.dedicated_servers > 0 ? kDedicatedServerSlotBytes : kCrossHostSlotBytes;
  return std::max<size_t>(config.shm_slot_bytes, floor);
}

int64_t AlignElements(DataType dtype) { return std::max<int64_t>(1, 64 / ElementSize(dtype)); }

int64_t ChunkElements(const ExecContext& ctx, const AllreduceBatch& batch) {
  // A chunk is one of kPipelineDepth sub-slots: small enough that a chunk's copy-in, reduction and
  // copy-out find it in the shared L3 cache, deep enough that ranks rarely wait for each other.
  const int64_t align = AlignElements(batch.dtype);
  int64_t elems = static_cast<int64_t>(SlotBytes(ctx.config, ctx.set.hosts.size() > 1) / kPipelineDepth /
                                       ElementSize(batch.dtype));
  return std::max<int64_t>(align, elems - elems % align);
}

std::vector<std::vector<ElementRange>> HostSlices(const ExecContext& ctx, int64_t n, int64_t align) {
  std::vector<std::vector<ElementRange>> slices(ctx.set.hosts.size());
  for (size_t g = 0; g < ctx.set.hosts.size(); ++g) {
    slices[g] = SplitEvenly(n, static_cast<int>(ctx.set.hosts[g].size()), align);
  }
  return slices;
}

uint64_t ShardTag(const ExecContext& ctx, int64_t chunk, int shard, int direction) {
  uint64_t sub = ((static_cast<uint64_t>(chunk) & 0x3ff) << 10) | (static_cast<uint64_t>(shard) << 1) |
                 static_cast<uint64_t>(direction);
  return ctx.Tag(sub);
}

ShardServer::Work ShardServer::Post(ExecContext& ctx, const AllreduceBatch& batch, int64_t chunk_index, int64_t n,
                                    int slot) {
  Work work;
  work.chunk = chunk_index;
  work.n = n;
  const size_t esz = ElementSize(batch.dtype);
  const int64_t align = AlignElements(batch.dtype);
  const ServerLayout& servers = ctx.set.servers;
  const auto ranges = servers.Ranges(n, align);
  const auto host_slices = HostSlices(ctx, n, align);
  const int num_hosts = static_cast<int>(ctx.set.hosts.size());
  size_t need = 0;
  for (int s = 0; s < servers.map.num_shards(); ++s) {
    if (servers.shard_rank[s] == ctx.my_rank) need += (num_hosts + 1) * ranges[s].size() * esz;
  }
  uint8_t* mem = need ? memory_[slot].Get(need) : nullptr;
  for (int s = 0; s < servers.map.num_shards(); ++s) {
    const ElementRange r = ranges[s];
    if (servers.shard_rank[s] != ctx.my_rank || r.empty()) continue;
    Work::Served sv{s, mem, mem + num_hosts * r.size() * esz};
    mem += (num_hosts + 1) * r.size() * esz;
    for (int g = 0; g < num_hosts; ++g) {
      for (size_t i = 0; i < ctx.set.hosts[g].size(); ++i) {
        ElementRange piece = Intersect(host_slices[g][i], r);
        if (piece.empty()) continue;
        uint8_t* at = sv.staging + (g * r.size() + (piece.begin - r.begin)) * esz;
        work.incoming.push_back(ctx.net.Recv(ctx.member_rank(ctx.set.hosts[g][i]),
                                             ShardTag(ctx, chunk_index, s, 0), at, piece.size() * esz));
      }
    }
    work.served.push_back(sv);
  }
  return work;
}

void ShardServer::Finish(ExecContext& ctx, const AllreduceBatch& batch, Work* work) {
  if (work->served.empty()) return;
  const size_t esz = ElementSize(batch.dtype);
  const int64_t align = AlignElements(batch.dtype);
  const auto ranges = ctx.set.servers.Ranges(work->n, align);
  const auto host_slices = HostSlices(ctx, work->n, align);
  const int num_hosts = static_cast<int>(ctx.set.hosts.size());
  WaitTransfers(work->incoming, ctx, "server shard receiving pushes of '" + batch.label + "'");
  if (ctx.faults) ctx.faults->At("serve", &ctx.net);
  for (const Work::Served& sv : work->served) {
    const ElementRange r = ranges[sv.shard];
    // Host order, whatever order the pushes arrived in: the same bits on every run.
    std::vector<const void*> srcs(num_hosts);
    for (int g = 0; g < num_hosts; ++g) srcs[g] = sv.staging + g * r.size() * esz;
    ReduceInto(sv.sum, srcs.data(), num_hosts, r.size(), batch.dtype, batch.op);
    if (ctx.my_rank == ctx.config.slowdown_rank) {
      // HERRING_SLOWDOWN: a server made slow on purpose, as a loaded CPU would be (PSLD's stragglers).
      std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(
          ctx.config.slowdown_us_per_mib * r.size() * esz / 1048576.0));
    }
    for (int g = 0; g < num_hosts; ++g) {
      for (size_t i = 0; i < ctx.set.hosts[g].size(); ++i) {
        ElementRange piece = Intersect(host_slices[g][i], r);
        if (piece.empty()) continue;
        work->outgoing.push_back(ctx.net.Send(ctx.member_rank(ctx.set.hosts[g][i]),
                                              ShardTag(ctx, work->chunk, sv.shard, 1),
                                              sv.sum + (piece.begin - r.begin) * esz, piece.size() * esz));
      }
    }
    ctx.counters.server_ranges++;
  }
}

void ShardServer::ServeAsDedicatedServer(ExecContext& ctx, const AllreduceBatch& batch) {
  const int64_t total = batch.total_count();
  if (total == 0 || ctx.set.hosts.size() < 2) return;
  const int64_t chunk_elems = ChunkElements(ctx, batch);
  const int64_t chunks = (total + chunk_elems - 1) / chunk_elems;
  // kNetworkDepth chunks in flight: receives for chunks up to c + depth - 1 are posted before
  // chunk c is summed, so the pushes of later chunks land in place while this one is reduced and
  // sent back.
  constexpr int depth = kNetworkDepth;
  Work work[depth];
  auto n_of = [&](int64_t c) { return std::min(total, (c + 1) * chunk_elems) - c * chunk_elems; };
  for (int64_t c = 0; c < std::min<int64_t>(depth - 1, chunks); ++c) {
    work[c] = Post(ctx, batch, c, n_of(c), static_cast<int>(c));
  }
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t next = c + depth - 1;
    if (next < chunks) {
      Work& slot = work[next % depth];  // chunk c - 1's: its answers must be gone first
      WaitTransfers(slot.outgoing, ctx, "server shard answering '" + batch.label + "'");
      slot = Post(ctx, batch, next, n_of(next), static_cast<int>(next % depth));
    }
    Finish(ctx, batch, &work[c % depth]);
  }
  for (auto& w : work) WaitTransfers(w.outgoing, ctx, "server shard answering '" + batch.label + "'");
}

}  // namespace herring
