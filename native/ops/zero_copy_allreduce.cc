#include "ops/zero_copy_allreduce.h"

#include <algorithm>
#include <cstring>

#include "common/logging.h"
#include "kernels/reduce.h"

namespace herring {
namespace {

// Arena flags of this path (the staging pipeline uses 0-2). Values count rounds; the notice and
// mapping rounds publish 2 * round + yes/no, so one store carries the answer and its round.
constexpr int kNoticeFlag = 3;
constexpr int kMappedFlag = 4;
constexpr int kDoneFlag = 5;

// Units small enough that the partial sum stays in the L2 cache while it is written to every
// rank's output.
constexpr size_t kUnitBytes = 128 << 10;

struct NoticeHeader {
  ZeroCopyPoolId pool;
  uint32_t entries;
  uint32_t in_zero_copy_memory;  // 1: every input and output of the batch is in `pool`
};
struct EntryOffsets {
  uint64_t input;
  uint64_t output;
};
constexpr size_t kMaxEntries = (ShmArena::kNoticeBytes - sizeof(NoticeHeader)) / sizeof(EntryOffsets);

// Writes this rank's notice; returns whether the batch can go zero-copy from this rank's side.
bool WriteNotice(uint8_t* notice, const AllreduceBatch& batch, const ZeroCopyPool* pool) {
  auto* header = reinterpret_cast<NoticeHeader*>(notice);
  auto* offsets = reinterpret_cast<EntryOffsets*>(notice + sizeof(NoticeHeader));
  bool ok = pool != nullptr && batch.entries.size() <= kMaxEntries;
  const size_t esz = ElementSize(batch.dtype);
  for (size_t i = 0; ok && i < batch.entries.size(); ++i) {
    const ReduceEntry& e = batch.entries[i];
    ok = pool->Locate(e.input, e.count * esz, &offsets[i].input) &&
         pool->Locate(e.output, e.count * esz, &offsets[i].output);
  }
  header->pool = ok ? pool->id() : ZeroCopyPoolId{};
  header->entries = static_cast<uint32_t>(ok ? batch.entries.size() : 0);
  header->in_zero_copy_memory = ok ? 1 : 0;
  return ok;
}

// Whether every member published 2 * round + 1 on `flag` (each is known to have published this
// round's value). Nobody can publish the next round before everyone finished this batch, so the
// value read is this round's.
bool AllSaidYes(ShmArena& arena, int flag, uint64_t round) {
  for (int i = 0; i < arena.local_size(); ++i) {
    if (arena.Load(flag, i) != 2 * round + 1) return false;
  }
  return true;
}

// This process's pool, from the context (the engine's owner hands it over); null if none yet.
const ZeroCopyPool* OwnPool(const ExecContext& ctx) { return ctx.zero_copy ? ctx.zero_copy->pool() : nullptr; }

}  // namespace

void ZeroCopyAllreduce::Offer(ExecContext& ctx, const AllreduceBatch& batch) {
  ShmArena& arena = *ctx.set.arena;
  const uint64_t round = ++ctx.set.zero_copy_rounds;
  const bool mine = WriteNotice(arena.notice(arena.local_index()), batch, OwnPool(ctx));
  arena.Publish(kNoticeFlag, 2 * round + (mine ? 1 : 0));
}

bool ZeroCopyAllreduce::EveryoneOffered(ExecContext& ctx) {
  return AllSaidYes(*ctx.set.arena, kNoticeFlag, ctx.set.zero_copy_rounds);
}

bool ZeroCopyAllreduce::Run(ExecContext& ctx, AllreduceBatch& batch) {
  ShmArena& arena = *ctx.set.arena;
  const int local_size = arena.local_size();
  const uint64_t round = ctx.set.zero_copy_rounds;

  // Everyone's tensors are in zero-copy memory: map the others' (once per peer process).
  std::string why;
  bool mapped = true;
  const ZeroCopyPool* own = OwnPool(ctx);
  peers_.resize(local_size);
  for (int i = 0; i < local_size; ++i) {
    const uint8_t* notice = arena.notice(i);
    const auto* header = reinterpret_cast<const NoticeHeader*>(notice);
    const auto* offsets = reinterpret_cast<const EntryOffsets*>(notice + sizeof(NoticeHeader));
    Peer& peer = peers_[i];
    peer.offsets.assign(header->entries, {});
    for (uint32_t e = 0; e < header->entries; ++e) peer.offsets[e] = {offsets[e].input, offsets[e].output};
    if (header->entries != batch.entries.size()) {
      throw Error(Status::Internal("zero-copy allreduce of '" + batch.label + "': local rank " + std::to_string(i) +
                                   " announced " + std::to_string(header->entries) + " tensors, this rank has " +
                                   std::to_string(batch.entries.size())));
    }
    std::string peer_why;
    peer.base = pools_.Map(header->pool, own, &peer_why);
    if (!peer.base && mapped) {
      mapped = false;
      why = "local rank " + std::to_string(i) + ": " + peer_why;
    }
  }
  arena.Publish(kMappedFlag, 2 * round + (mapped ? 1 : 0));
  ThrowIfArenaFailed(arena.WaitAll(kMappedFlag, 2 * round, ctx.StepDeadline()), "zero-copy memory mapping");
  if (!AllSaidYes(arena, kMappedFlag, round)) {
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
  entry_begin_.resize(batch.entries.size() + 1);
  entry_begin_[0] = 0;
  for (size_t e = 0; e < batch.entries.size(); ++e) entry_begin_[e + 1] = entry_begin_[e] + batch.entries[e].count;
  const int64_t total = entry_begin_.back();
  const int64_t unit = static_cast<int64_t>(kUnitBytes / ElementSize(batch.dtype));
  const uint64_t units = static_cast<uint64_t>((total + unit - 1) / unit);
  const uint64_t first = ctx.set.zero_copy_units;
  ctx.set.zero_copy_units += units;
  for (uint64_t u; (u = arena.Claim(first + units)) < first + units;) {
    const int64_t begin = static_cast<int64_t>(u - first) * unit;
    ReduceUnit(ctx, batch, begin, std::min(total, begin + unit));
  }
  // My tensors are complete once every rank finished its units.
  arena.Publish(kDoneFlag, round);
  ThrowIfArenaFailed(arena.WaitAll(kDoneFlag, round, ctx.StepDeadline()), "zero-copy allreduce");
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
  size_t e = std::upper_bound(entry_begin_.begin(), entry_begin_.end(), begin) - entry_begin_.begin() - 1;
  while (begin < end) {
    const int64_t offset = begin - entry_begin_[e];
    const int64_t count = std::min(end, entry_begin_[e + 1]) - begin;
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
    begin += count;
    ++e;
  }
}

}  // namespace herring
