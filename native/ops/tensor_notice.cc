#include "ops/tensor_notice.h"

#include "ops/shm_staging.h"

namespace herring {
namespace {

// The notice round travels with the reach in one store: kReachValues * round + reach. Nobody
// publishes the next round before everyone finished this batch, so the value read is this round's.
constexpr uint64_t kReachValues = 4;
static_assert(static_cast<uint64_t>(TensorReach::kTensorsByAddress) < kReachValues, "a reach must fit beside its round");

TensorReach WriteNotice(uint8_t* notice, const AllreduceBatch& batch, const ZeroCopyPool* pool, AddressOffer offer) {
  auto* header = reinterpret_cast<TensorNoticeHeader*>(notice);
  auto* entries = reinterpret_cast<TensorNoticeEntry*>(notice + sizeof(TensorNoticeHeader));
  TensorReach reach = TensorReach::kStaged;
  if (batch.entries.size() <= kMaxNoticeEntries) {
    const size_t esz = ElementSize(batch.dtype);
    bool zero_copy = pool != nullptr;
    for (size_t i = 0; zero_copy && i < batch.entries.size(); ++i) {
      const ReduceEntry& e = batch.entries[i];
      zero_copy = pool->Locate(e.input, e.count * esz, &entries[i].input) &&
                  pool->Locate(e.output, e.count * esz, &entries[i].output);
    }
    if (zero_copy) {
      reach = TensorReach::kZeroCopy;
    } else if (offer.addresses) {
      for (size_t i = 0; i < batch.entries.size(); ++i) {
        entries[i] = {reinterpret_cast<uintptr_t>(batch.entries[i].input),
                      reinterpret_cast<uintptr_t>(batch.entries[i].output)};
      }
      reach = TensorReach::kTensorsByAddress;
    }
  }
  header->pool = reach == TensorReach::kZeroCopy ? pool->id() : ZeroCopyPoolId{};
  header->entries = static_cast<uint32_t>(reach == TensorReach::kStaged ? 0 : batch.entries.size());
  header->reach = static_cast<uint32_t>(reach);
  header->vote = static_cast<uint32_t>(reach == TensorReach::kTensorsByAddress ? offer.vote : TensorReach::kStaged);
  return reach;
}

}  // namespace

uint64_t OfferTensors(ExecContext& ctx, const AllreduceBatch& batch, const ZeroCopyPool* pool, AddressOffer offer) {
  ShmArena& arena = *ctx.set.arena;
  const uint64_t round = ++ctx.set.notice_rounds;
  const TensorReach reach = WriteNotice(arena.notice(arena.local_index()), batch, pool, offer);
  arena.Publish(kNoticeFlag, kReachValues * round + static_cast<uint64_t>(reach));
  return round;
}

void AwaitNotices(ExecContext& ctx, uint64_t round) {
  ThrowIfArenaFailed(ctx.set.arena->WaitAll(kNoticeFlag, kReachValues * round, ctx.StepDeadline()),
                     "telling the local ranks where the tensors are");
}

TensorReach AgreedReach(ShmArena& arena, uint64_t round) {
  const uint64_t first = arena.Load(kNoticeFlag, 0);
  for (int i = 1; i < arena.local_size(); ++i) {
    if (arena.Load(kNoticeFlag, i) != first) return TensorReach::kStaged;
  }
  if (first / kReachValues != round) return TensorReach::kStaged;
  const auto held = static_cast<TensorReach>(first % kReachValues);
  if (held != TensorReach::kTensorsByAddress) return held;
  return static_cast<TensorReach>(NoticeHeaderOf(arena.notice(0)).vote);
}

bool EveryoneReaches(ExecContext& ctx, uint64_t round, bool i_reach_everyone, const char* step) {
  // One store carries the answer and its round (2 * round + yes): the value read is this round's,
  // since nobody answers the next round before everyone finished this batch.
  ShmArena& arena = *ctx.set.arena;
  arena.Publish(kReachableFlag, 2 * round + (i_reach_everyone ? 1 : 0));
  ThrowIfArenaFailed(arena.WaitAll(kReachableFlag, 2 * round, ctx.StepDeadline()), step);
  for (int i = 0; i < arena.local_size(); ++i) {
    if (arena.Load(kReachableFlag, i) != 2 * round + 1) return false;
  }
  return true;
}

}  // namespace herring
