#include "ops/zero_copy_allreduce.h"

#include <algorithm>
#include <cstring>

#include "common/logging.h"
#include "ops/tensor_notice.h"

namespace herring {

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
  PoolAccess access(peers_, layout_, ElementSize(batch.dtype));
  units_.Run(ctx, batch, layout_, access, round, kUnitBytes, "zero-copy allreduce");
  ctx.counters.zero_copy_allreduces++;
  return true;
}

void ZeroCopyAllreduce::PoolAccess::StoreSum(int64_t begin, int64_t end, const uint8_t* sum) {
  const uint8_t* from = sum;
  layout_.ForEachPiece(begin, end, [&](size_t e, int64_t offset, int64_t count) {
    for (const Peer& p : peers_) std::memcpy(p.base + p.offsets[e].second + offset * esz_, from, count * esz_);
    from += count * esz_;
  });
}

}  // namespace herring
