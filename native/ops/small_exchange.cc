#include "ops/small_exchange.h"

#include <cstring>
#include <vector>

#include "kernels/reduce.h"
#include "ops/shm_staging.h"

namespace herring {

bool HostSumsExchangeFits(const ExecContext& ctx, size_t bytes) {
  const auto& hosts = ctx.set.hosts;
  if (hosts.size() < 2 || ctx.config.dedicated_servers > 0) return false;
  if (static_cast<int64_t>(bytes) > ctx.config.small_message_bytes) return false;
  for (const auto& host : hosts) {
    if (host.size() != hosts[0].size()) return false;
  }
  return !ctx.set.arena || bytes <= SubSlotStride(ctx.set.arena->slot_bytes());
}

void HostSumsExchange::Execute(ExecContext& ctx, AllreduceBatch& batch) {
  const int64_t total = batch.total_count();
  const size_t esz = ElementSize(batch.dtype);
  const size_t bytes = total * esz;
  const int num_hosts = static_cast<int>(ctx.set.hosts.size());
  const int my_host = ctx.set.my_host;
  uint8_t* sums = host_sums_.Get(num_hosts * bytes);
  uint8_t* mine = sums + my_host * bytes;
  if (ctx.set.arena) {
    TimelinePhase phase(ctx.timeline, ctx.lane, "ONE_STEP_SHM_REDUCE");
    ReduceHostInOneStep(ctx, batch, mine);
  } else {  // alone on this host: its sum is this rank's input
    TimelinePhase phase(ctx.timeline, ctx.lane, "GATHER");
    if (ctx.faults) ctx.faults->At("gather", &ctx.net);
    batch.GatherInputs(0, total, mine, batch.prescale);
  }
  // Only the hosts' first ranks talk across hosts: a host's sum is the same on each of its ranks,
  // and a small collective's time is per-message costs, not bytes. Every rank sending its
  // counterparts made N (H - 1) messages per collective (3,840 at 256 ranks on 16 hosts, most of
  // a tiny allreduce's 130 ms there); the leaders make H (H - 1) and share the total in the arena.
  const bool leader = ctx.set.my_local_index == 0;
  uint8_t* result = total_.Get(bytes);
  if (leader) {
    TimelinePhase phase(ctx.timeline, ctx.lane, "EXCHANGE_HOST_SUMS");
    // Every receive posted before any send; one tag serves them all: a (peer, tag) pair is unique
    // since each peer sends this rank one message in this execution.
    const uint64_t tag = ctx.Tag(0);
    std::vector<int> leader_of(num_hosts);  // host g's first rank
    for (int g = 0; g < num_hosts; ++g) leader_of[g] = ctx.member_rank(ctx.set.hosts[g][0]);
    std::vector<CompletionPtr> transfers;
    for (int g = 0; g < num_hosts; ++g) {
      if (g != my_host) transfers.push_back(ctx.net.Recv(leader_of[g], tag, sums + g * bytes, bytes));
    }
    if (ctx.faults) ctx.faults->At("push", &ctx.net);
    for (int g = 0; g < num_hosts; ++g) {
      if (g != my_host) transfers.push_back(ctx.net.Send(leader_of[g], tag, mine, bytes));
    }
    WaitTransfers(transfers, ctx, "exchange of host sums of '" + batch.label + "'");
    std::vector<const void*> srcs(num_hosts);
    for (int g = 0; g < num_hosts; ++g) srcs[g] = sums + g * bytes;
    ReduceInto(result, srcs.data(), num_hosts, total, batch.dtype, batch.op);
  }
  if (!ctx.set.arena) {  // alone on its host: its own leader
    TimelinePhase phase(ctx.timeline, ctx.lane, "COPY_OUT");
    ScatterWholeResult(ctx, batch, result);
  } else {
    TimelinePhase phase(ctx.timeline, ctx.lane, "SHARE_TOTAL_IN_SHM");
    OneStepStaging staged(ctx);
    if (leader) std::memcpy(staged.mine(), result, bytes);
    staged.Publish();  // everyone: later buffers wait for every member's count
    if (!leader) staged.AwaitMember(0);
    ScatterWholeResult(ctx, batch, leader ? result : staged.of(0));
    staged.Release();
  }
  ctx.counters.host_sum_exchanges++;
}

}  // namespace herring
