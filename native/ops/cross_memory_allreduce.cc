#include "ops/cross_memory_allreduce.h"

#include <algorithm>
#include <cstring>

namespace herring {

size_t CrossMemoryAllreduce::UnitBytes(const AllreduceBatch& batch, int local_size) {
  // At least two units per rank below kMaxUnitBytes * 2 * local_size, on 4 KiB boundaries.
  const size_t share = batch.total_bytes() / (2 * static_cast<size_t>(std::max(1, local_size)));
  return std::clamp(share & ~size_t{4095}, kMinUnitBytes, kMaxUnitBytes);
}

bool CrossMemoryAllreduce::Run(ExecContext& ctx, AllreduceBatch& batch, uint64_t round) {
  ReadPeerTensors(ctx, batch, &peers_);
  if (!EveryoneCanCopy(ctx, batch, peers_, round, /*write=*/true, &ctx.set.peers_writable, "copy each other's tensors",
                       "one-host allreduces are staged through shared memory instead")) {
    return false;
  }
  layout_.Reset(batch);
  TimelinePhase phase(ctx.timeline, ctx.lane, "CROSS_MEMORY_REDUCE");
  if (ctx.faults) ctx.faults->At("shm", &ctx.net);
  const size_t unit_bytes = UnitBytes(batch, ctx.set.arena->local_size());
  ProcessAccess access(*this, ctx, batch, unit_bytes);
  units_.Run(ctx, batch, layout_, access, round, unit_bytes, "cross-memory allreduce");
  ctx.counters.cross_memory_allreduces++;
  return true;
}

CrossMemoryAllreduce::ProcessAccess::ProcessAccess(CrossMemoryAllreduce& owner, ExecContext& ctx,
                                                   const AllreduceBatch& batch, size_t unit_bytes)
    : owner_(owner),
      ctx_(ctx),
      batch_(batch),
      esz_(ElementSize(batch.dtype)),
      unit_bytes_(unit_bytes),
      me_(ctx.set.my_local_index),
      copies_(owner.copies_.Get(unit_bytes * owner.peers_.size())) {}

void CrossMemoryAllreduce::ProcessAccess::Pair(int member, bool inputs, int64_t begin, int64_t end, uint8_t* local) {
  owner_.local_.clear();
  owner_.remote_.clear();
  const PeerTensors& peer = owner_.peers_[member];
  owner_.layout_.ForEachPiece(begin, end, [&](size_t e, int64_t offset, int64_t count) {
    const size_t bytes = static_cast<size_t>(count) * esz_;
    const uint64_t base = inputs ? peer.addresses[e].first : peer.addresses[e].second;
    owner_.local_.push_back({local, bytes});
    owner_.remote_.push_back({reinterpret_cast<void*>(base + offset * esz_), bytes});
    local += bytes;
  });
}

void CrossMemoryAllreduce::ProcessAccess::Copy(int member, CrossMemory direction, const char* what) {
  const Status s = CopyCrossMemory(owner_.peers_[member].pid, direction, owner_.local_.data(), owner_.remote_.data(),
                                   owner_.local_.size());
  if (!s.ok()) {
    throw Error(Status(s.code(), std::string(what) + " " + LocalRankName(ctx_, member) + "'s tensors of '" +
                                     batch_.label + "' (" + s.message() + ")"));
  }
}

void CrossMemoryAllreduce::ProcessAccess::LoadInputs(int64_t begin, int64_t end) {
  for (int p = 0; p < static_cast<int>(owner_.peers_.size()); ++p) {
    if (p == me_) continue;
    Pair(p, /*inputs=*/true, begin, end, copies_ + p * unit_bytes_);
    Copy(p, CrossMemory::kRead, "copying a unit of the input out of");
  }
}

const void* CrossMemoryAllreduce::ProcessAccess::Input(int member, size_t entry, int64_t offset, int64_t at) {
  if (member == me_) return static_cast<const uint8_t*>(batch_.entries[entry].input) + offset * esz_;
  return copies_ + member * unit_bytes_ + at * esz_;
}

void CrossMemoryAllreduce::ProcessAccess::StoreSum(int64_t begin, int64_t end, const uint8_t* sum) {
  const uint8_t* from = sum;
  owner_.layout_.ForEachPiece(begin, end, [&](size_t e, int64_t offset, int64_t count) {
    std::memcpy(static_cast<uint8_t*>(batch_.entries[e].output) + offset * esz_, from, count * esz_);
    from += count * esz_;
  });
  for (int p = 0; p < static_cast<int>(owner_.peers_.size()); ++p) {
    if (p == me_) continue;
    // The pairs point into `sum` (read by the call, never written).
    Pair(p, /*inputs=*/false, begin, end, const_cast<uint8_t*>(sum));
    Copy(p, CrossMemory::kWrite, "writing a unit of the sum into");
  }
}

}  // namespace herring
