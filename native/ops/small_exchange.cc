#include "ops/small_exchange.h"

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
  {
    TimelinePhase phase(ctx.timeline, ctx.lane, "EXCHANGE_HOST_SUMS");
    // Every receive posted before any send; one tag serves them all: a (peer, tag) pair is unique
    // since each peer sends this rank one message in this execution.
    const uint64_t tag = ctx.Tag(0);
    std::vector<int> counterpart(num_hosts);  // on host g: the member of this rank's local index
    for (int g = 0; g < num_hosts; ++g) counterpart[g] = ctx.member_rank(ctx.set.hosts[g][ctx.set.my_local_index]);
    std::vector<CompletionPtr> transfers;
    for (int g = 0; g < num_hosts; ++g) {
      if (g != my_host) transfers.push_back(ctx.net.Recv(counterpart[g], tag, sums + g * bytes, bytes));
    }
    if (ctx.faults) ctx.faults->At("push", &ctx.net);
    for (int g = 0; g < num_hosts; ++g) {
      if (g != my_host) transfers.push_back(ctx.net.Send(counterpart[g], tag, mine, bytes));
    }
    WaitTransfers(transfers, ctx, "exchange of host sums of '" + batch.label + "'");
  }
  TimelinePhase phase(ctx.timeline, ctx.lane, "COPY_OUT");
  std::vector<const void*> srcs(num_hosts);
  for (int g = 0; g < num_hosts; ++g) srcs[g] = sums + g * bytes;
  uint8_t* result = total_.Get(bytes);
  ReduceInto(result, srcs.data(), num_hosts, total, batch.dtype, batch.op);
  ScatterWholeResult(ctx, batch, result);
  ctx.counters.host_sum_exchanges++;
}

}  // namespace herring
