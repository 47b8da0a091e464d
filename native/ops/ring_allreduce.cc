#include "ops/ring_allreduce.h"

#include <algorithm>

#include "kernels/reduce.h"
#include "runtime/partition_map.h"

namespace herring {

void RingAllreduce::Execute(ExecContext& ctx, AllreduceBatch& batch) {
  const int64_t total = batch.total_count();
  if (total == 0) return;
  const size_t esz = ElementSize(batch.dtype);
  const int n = ctx.n(), me = ctx.me();
  uint8_t* buf = buffer_.Get(total * esz);
  batch.GatherInputs(0, total, buf, batch.prescale);

  auto segs = SplitEvenly(total, n, std::max<int64_t>(1, 64 / esz));
  int64_t widest = 0;
  for (const auto& s : segs) widest = std::max(widest, s.size());
  uint8_t* incoming = incoming_.Get(widest * esz);
  const int next = ctx.member_rank((me + 1) % n), prev = ctx.member_rank((me - 1 + n) % n);

  TimelinePhase phase(ctx.timeline, ctx.lane, "RING_ALLREDUCE");
  for (int k = 0; k < n - 1; ++k) {  // reduce-scatter
    const ElementRange out = segs[(me - k + n) % n], in = segs[(me - k - 1 + n) % n];
    std::vector<CompletionPtr> t = {
        ctx.net.Send(next, ctx.Tag(k), buf + out.begin * esz, out.size() * esz),
        ctx.net.Recv(prev, ctx.Tag(k), incoming, in.size() * esz)};
    WaitTransfers(t, ctx, "ring reduce-scatter of '" + batch.label + "'");
    const void* srcs[2] = {buf + in.begin * esz, incoming};
    ReduceInto(buf + in.begin * esz, srcs, 2, in.size(), batch.dtype, batch.op);
  }
  for (int k = 0; k < n - 1; ++k) {  // all-gather
    const ElementRange out = segs[(me + 1 - k + n) % n], in = segs[(me - k + n) % n];
    std::vector<CompletionPtr> t = {
        ctx.net.Send(next, ctx.Tag(n + k), buf + out.begin * esz, out.size() * esz),
        ctx.net.Recv(prev, ctx.Tag(n + k), buf + in.begin * esz, in.size() * esz)};
    WaitTransfers(t, ctx, "ring all-gather of '" + batch.label + "'");
  }
  batch.ScatterOutputs(0, total, buf, batch.postscale);
  ctx.counters.ring_allreduces++;
}

void LocalAllreduce::Execute(ExecContext& ctx, AllreduceBatch& batch) {
  // Two passes, like every other path: prescale before the reduction, postscale after it.
  for (const auto& e : batch.entries) {
    ScaleInto(e.output, e.input, e.count, batch.dtype, batch.prescale);
    ScaleInto(e.output, e.output, e.count, batch.dtype, batch.postscale);
  }
}

}  // namespace herring
