#include "ops/herring/small_exchange.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/reduce.h"
#include "ops/shm_staging.h"

namespace herring {

bool HostSumsExchangeFits(const ProcessSet& set, const Config& config, size_t bytes) {
  const auto& hosts = set.hosts;
  if (hosts.size() < 2 || config.dedicated_servers > 0) return false;
  if (static_cast<int64_t>(bytes) > config.small_message_bytes) return false;
  for (const auto& host : hosts) {
    if (host.size() != hosts[0].size()) return false;
  }
  return !set.arena || bytes <= SubSlotStride(set.arena->slot_bytes());
}

namespace {

// Bruck's allgather of the hosts' sums among the hosts' first ranks. Before round k this leader
// holds d = 2^k blocks (hosts my_host .. my_host + d - 1, mod H); it sends the first min(d, H - d)
// of them to host my_host - d and receives as many from host my_host + d, which are the next
// blocks. Every receive is posted before the first send, so no message waits unexpected; each
// peer sends this leader at most one message, so one tag serves them all.
void GatherHostSums(ExecContext& ctx, uint8_t* blocks, size_t bytes, const std::string& step) {
  const int num_hosts = static_cast<int>(ctx.set.hosts.size());
  const int my_host = ctx.set.my_host;
  const uint64_t tag = ctx.Tag(0);
  auto leader_of = [&](int host) { return ctx.member_rank(ctx.set.hosts[(host + num_hosts) % num_hosts][0]); };
  std::vector<CompletionPtr> receives;
  for (int d = 1; d < num_hosts; d *= 2) {
    const size_t count = std::min(d, num_hosts - d);
    receives.push_back(ctx.net.Recv(leader_of(my_host + d), tag, blocks + d * bytes, count * bytes));
  }
  if (ctx.faults) ctx.faults->At("push", &ctx.net);
  std::vector<CompletionPtr> sends;
  size_t round = 0;
  for (int d = 1; d < num_hosts; d *= 2, ++round) {
    const size_t count = std::min(d, num_hosts - d);
    sends.push_back(ctx.net.Send(leader_of(my_host - d), tag, blocks, count * bytes));
    WaitTransfers({receives[round]}, ctx, step);  // the next round sends what this one brings
  }
  WaitTransfers(sends, ctx, step);
}

}  // namespace

void HostSumsExchange::Execute(ExecContext& ctx, AllreduceBatch& batch) {
  if (batch.total_with_bits) {
    TimelinePhase phase(ctx.timeline, ctx.lane, "COPY_OUT");
    if (ctx.faults) ctx.faults->At("gather", &ctx.net);
    if (!batch.posted_inputs.empty()) ctx.counters.inputs_with_bits++;  // the host's sum came from them
    ScatterWholeResult(ctx, batch, batch.total_with_bits);
    ctx.counters.totals_with_bits++;
    ctx.counters.host_sum_exchanges++;
    return;
  }
  const int64_t total = batch.total_count();
  const size_t esz = ElementSize(batch.dtype);
  const size_t bytes = total * esz;
  const int num_hosts = static_cast<int>(ctx.set.hosts.size());
  const int my_host = ctx.set.my_host;
  // Block i holds host (my_host + i) mod H's sum: this host's first, as Bruck's allgather keeps them.
  uint8_t* sums = host_sums_.Get(num_hosts * bytes);
  uint8_t* mine = sums;
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
  // a tiny allreduce's 130 ms there). The leaders gather the host sums with Bruck's allgather,
  // ceil(log2 H) rounds of one send and one receive each, and share the total in the arena.
  const bool leader = ctx.set.my_local_index == 0;
  uint8_t* result = total_.Get(bytes);
  if (leader) {
    TimelinePhase phase(ctx.timeline, ctx.lane, "EXCHANGE_HOST_SUMS");
    GatherHostSums(ctx, sums, bytes, "exchange of host sums of '" + batch.label + "'");
    // Reduced in host order, whichever host this is: the same bits on every host.
    std::vector<const void*> srcs(num_hosts);
    for (int g = 0; g < num_hosts; ++g) srcs[g] = sums + ((g - my_host + num_hosts) % num_hosts) * bytes;
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
