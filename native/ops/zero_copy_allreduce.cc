#include "ops/zero_copy_allreduce.h"

#include <algorithm>
#include <cstring>

#include "common/logging.h"
#include "kernels/reduce.h"
#include "ops/shm_staging.h"
#include "ops/tensor_notice.h"

namespace herring {
namespace {

// Units small enough that the partial sum stays in the L2 cache while it is written to every
// rank's output.
constexpr size_t kUnitBytes = 128 << 10;

}  // namespace

bool ZeroCopyAllreduce::Run(ExecContext& ctx, AllreduceBatch& batch, uint64_t round) {
  ShmArena& arena = *ctx.set.arena;
  const int local_size = arena.local_size();

  // Everyone's tensors are in zero-copy memory: map the others' (once per peer process).
  std::string why;
  bool mapped = true;
  const ZeroCopyPool* own = OwnZeroCopyPool(ctx);
  peers_.resize(local_size);
  for (int i = 0; i < local_size; ++i) {
    const TensorNoticeHeader& header = NoticeHeaderOf(arena.notice(i));
    const TensorNoticeEntry* offsets = NoticeEntriesOf(arena.notice(i));
    Peer& peer = peers_[i];
    peer.offsets.assign(header.entries, {});
    for (uint32_t e = 0; e < header.entries; ++e) peer.offsets[e] = {offsets[e].input, offsets[e].output};
    if (header.entries != batch.entries.size()) {
      throw Error(Status::Internal("zero-copy allreduce of '" + batch.label + "': local rank " + std::to_string(i) +
                                   " announced " + std::to_string(header.entries) + " tensors, this rank has " +
                                   std::to_string(batch.entries.size())));
    }
    std::string peer_why;
    peer.base = pools_.Map(header.pool, own, &peer_why);
    if (!peer.base && mapped) {
      mapped = false;
      why = "local rank " + std::to_string(i) + ": " + peer_why;
    }
  }
  if (!EveryoneReaches(ctx, round, mapped, "zero-copy memory mapping")) {
    if (!warned_) {
      HLOG(Warning) << "zero-copy memory of the other local ranks cannot be mapped"
                    << (why.empty() ? std::string(" by some rank") : " (" + why + ")")
                    << "; tensors in it are staged through shared memory instead";
      warned_ = true;
    }
    return false;
  }

  TimelinePhase phase(ctx.timeline, ctx.lane, "ZERO_COPY_REDUCE");
  if (ctx.faults) ctx.faults->At("shm", &ctx.net);
  layout_.Reset(batch);
  const int64_t total = layout_.total();
  const int64_t unit = static_cast<int64_t>(kUnitBytes / ElementSize(batch.dtype));
  const uint64_t units = static_cast<uint64_t>((total + unit - 1) / unit);
  const uint64_t first = ctx.set.zero_copy_units;
  ctx.set.zero_copy_units += units;
  for (uint64_t u; (u = arena.Claim(first + units)) < first + units;) {
    const int64_t begin = static_cast<int64_t>(u - first) * unit;
    ReduceUnit(ctx, batch, begin, std::min(total, begin + unit));
  }
  // My tensors are complete once every rank finished its units.
  arena.Publish(kZeroCopyDoneFlag, round);
  ThrowIfArenaFailed(arena.WaitAll(kZeroCopyDoneFlag, round, ctx.StepDeadline()), "zero-copy allreduce");
  ctx.counters.zero_copy_allreduces++;
  return true;
}

void ZeroCopyAllreduce::ReduceUnit(const ExecContext& ctx, const AllreduceBatch& batch, int64_t begin, int64_t end) {
  const size_t esz = ElementSize(batch.dtype);
  const int n = static_cast<int>(peers_.size());
  const bool prescaled = batch.prescale != 1.0;
  uint8_t* sum = sum_.Get(kUnitBytes);
  uint8_t* scaled = prescaled ? scaled_.Get(kUnitBytes * n) : nullptr;
  std::vector<const void*> srcs(n);
  layout_.ForEachPiece(begin, end, [&](size_t e, int64_t offset, int64_t count) {
    for (int p = 0; p < n; ++p) {
      srcs[p] = peers_[p].base + peers_[p].offsets[e].first + offset * esz;
      if (prescaled) {
        ScaleInto(scaled + p * kUnitBytes, srcs[p], count, batch.dtype, batch.prescale);
        srcs[p] = scaled + p * kUnitBytes;
      }
    }
    ReduceInto(sum, srcs.data(), n, count, batch.dtype, batch.op);
    if (batch.postscale != 1.0) ScaleInto(sum, sum, count, batch.dtype, batch.postscale);
    for (int p = 0; p < n; ++p) {
      std::memcpy(peers_[p].base + peers_[p].offsets[e].second + offset * esz, sum, count * esz);
    }
  });
}

}  // namespace herring
