#include "ops/claimed_units.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "kernels/reduce.h"
#include "ops/shm_staging.h"

namespace herring {

void ClaimedUnits::Run(ExecContext& ctx, const AllreduceBatch& batch, const FusedLayout& layout, UnitAccess& access,
                       uint64_t round, size_t unit_bytes, const char* step) {
  try {
    ClaimAndReduce(ctx, batch, layout, access, round, unit_bytes, step);
  } catch (const Error& e) {
    QuiesceWriters(*ctx.set.arena, e.status());
    throw;
  }
}

void ClaimedUnits::ClaimAndReduce(ExecContext& ctx, const AllreduceBatch& batch, const FusedLayout& layout,
                                  UnitAccess& access, uint64_t round, size_t unit_bytes, const char* step) {
  ShmArena& arena = *ctx.set.arena;
  const int local_size = arena.local_size();
  const int64_t total = layout.total();
  const int64_t unit = std::max<int64_t>(1, static_cast<int64_t>(unit_bytes / ElementSize(batch.dtype)));
  const uint64_t units = static_cast<uint64_t>((total + unit - 1) / unit);
  // Every member runs the same batches in the same order, so the running total agrees.
  const uint64_t first = ctx.set.claimed_units;
  ctx.set.claimed_units += units;
  for (uint64_t u; (u = arena.Claim(first + units)) < first + units;) {
    const int64_t begin = static_cast<int64_t>(u - first) * unit;
    const int64_t end = std::min(total, begin + unit);
    access.LoadInputs(begin, end);
    const uint8_t* sum = ReduceUnit(batch, layout, access, local_size, begin, end, unit_bytes);
    // Inside the writes on kUnitWritesFlag, then the poison looked at again: either a failing rank
    // sees this rank writing and waits, or this rank sees its poison and writes nothing.
    uint64_t& writes = ctx.set.unit_writes;
    arena.Publish(kUnitWritesFlag, 2 * writes + 1);
    if (arena.Poisoned()) {
      arena.Publish(kUnitWritesFlag, 2 * ++writes);
      break;  // the wait below returns the poisoner's reason
    }
    access.StoreSum(begin, end, sum);
    arena.Publish(kUnitWritesFlag, 2 * ++writes);
    // After a unit is in every rank's outputs (HERRING_FAULT's "scatter": a rank gone mid-batch).
    if (ctx.faults) ctx.faults->At("scatter", &ctx.net);
  }
  // My tensors are complete once every rank finished its units.
  arena.Publish(kClaimedUnitsDoneFlag, round);
  ThrowIfArenaFailed(arena.WaitAll(kClaimedUnitsDoneFlag, round, ctx.StepDeadline()), step);
}

const uint8_t* ClaimedUnits::ReduceUnit(const AllreduceBatch& batch, const FusedLayout& layout, UnitAccess& access,
                                        int local_size, int64_t begin, int64_t end, size_t unit_bytes) {
  const size_t esz = ElementSize(batch.dtype);
  const bool prescaled = batch.prescale != 1.0;
  uint8_t* sum = sum_.Get(unit_bytes);
  uint8_t* scaled = prescaled ? scaled_.Get(unit_bytes * local_size) : nullptr;
  srcs_.resize(local_size);
  int64_t at = 0;  // the piece's first element in the unit
  layout.ForEachPiece(begin, end, [&](size_t e, int64_t offset, int64_t count) {
    for (int p = 0; p < local_size; ++p) {
      srcs_[p] = access.Input(p, e, offset, at);
      if (prescaled) {
        uint8_t* into = scaled + p * unit_bytes + at * esz;
        ScaleInto(into, srcs_[p], count, batch.dtype, batch.prescale);
        srcs_[p] = into;
      }
    }
    uint8_t* piece_sum = sum + at * esz;
    ReduceInto(piece_sum, srcs_.data(), local_size, count, batch.dtype, batch.op);
    if (batch.postscale != 1.0) ScaleInto(piece_sum, piece_sum, count, batch.dtype, batch.postscale);
    at += count;
  });
  return sum;
}

void ClaimedUnits::QuiesceWriters(ShmArena& arena, const Status& why) {
  arena.Poison(why.message());
  // The poison's store before the loads of the flags (a claimer stores its flag, then loads the poison).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const auto until = std::chrono::steady_clock::now() + kQuiesce;
  for (int m = 0; m < arena.local_size(); ++m) {
    if (m == arena.local_index()) continue;
    while (arena.Load(kUnitWritesFlag, m) % 2 == 1 && !arena.MemberGone(m) &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace herring
