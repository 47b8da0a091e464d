#include "runtime/collective.h"

#include <sstream>

#include "kernels/reduce.h"

namespace herring {

uint64_t ExecContext::Tag(uint64_t sub) const {
  if (sub >= (1ull << kSubTagBits)) throw Error(Status::Internal("collective sub-tag out of range"));
  return tag_base | sub;
}

namespace {
constexpr uint32_t kR2spUnit = 0xffff;  // reserved for R2SP training mode's transfers
}  // namespace

uint64_t MakeTagBase(uint64_t cycle, uint32_t unit) {
  // [cycle: 28 bits][unit: 16 bits][sub: 20 bits]. Cycles wrap after 2^28, long after any
  // message of the old cycle is gone (every collective completes within its cycle).
  if (unit >= kR2spUnit) throw Error(Status::Internal("more than 65535 collectives in one cycle"));
  return ((cycle & 0xfffffffull) << 36) | (static_cast<uint64_t>(unit) << ExecContext::kSubTagBits);
}

uint64_t MakeR2spTag(uint64_t step, uint32_t session, int32_t shard, uint32_t chunk, bool pull) {
  // Steps wrap after 2^18: a worker is never more than one step ahead of a server, so the
  // transfers of steps 2^18 apart never meet.
  const uint64_t high = ((step & 0x3ffffull) << 10) | (chunk & (kMaxR2spChunks - 1));
  const uint64_t sub = (static_cast<uint64_t>(session & 0xff) << 12) | (static_cast<uint64_t>(shard & 0x7ff) << 1) |
                       (pull ? 1u : 0u);
  return (high << 36) | (static_cast<uint64_t>(kR2spUnit) << ExecContext::kSubTagBits) | sub;
}

void WaitTransfers(const std::vector<CompletionPtr>& transfers, const ExecContext& ctx,
                   const std::string& step) {
  Status s = WaitAll(transfers, Deadline::AfterSeconds(ctx.TransferTimeoutSeconds()));
  if (!s.ok()) {
    if (s.code() == StatusCode::kTimeout) {
      std::ostringstream why;
      why << step << " made no progress for " << ctx.TransferTimeoutSeconds() << " s ("
          << ExecContext::kTransferTimeoutFactor << " x HERRING_TIMEOUT_SECONDS): " << s.message();
      throw Error(Status::Timeout(why.str()));
    }
    const std::string where = " (during " + step + ")";
    if (s.message().find(where) != std::string::npos) throw Error(s);
    throw Error(Status(s.code(), s.message() + where));
  }
}

int64_t AllreduceBatch::total_count() const {
  int64_t n = 0;
  for (const auto& e : entries) n += e.count;
  return n;
}

void AllreduceBatch::ForEachInputPiece(int64_t begin, int64_t end,
                                       const std::function<void(int64_t, const uint8_t*, int64_t)>& visit) const {
  const size_t esz = ElementSize(dtype);
  int64_t offset = 0;
  for (const auto& e : entries) {
    if (offset >= end) break;
    int64_t lo = std::max(begin, offset), hi = std::min(end, offset + e.count);
    if (lo < hi) visit(lo - begin, static_cast<const uint8_t*>(e.input) + (lo - offset) * esz, hi - lo);
    offset += e.count;
  }
}

void AllreduceBatch::GatherInputs(int64_t begin, int64_t end, uint8_t* dst, double scale) const {
  const size_t esz = ElementSize(dtype);
  ForEachInputPiece(begin, end, [&](int64_t position, const uint8_t* input, int64_t count) {
    ScaleInto(dst + position * esz, input, count, dtype, scale);
  });
}

void AllreduceBatch::ScatterOutputs(int64_t begin, int64_t end, const uint8_t* src, double scale) const {
  const size_t esz = ElementSize(dtype);
  int64_t offset = 0;
  for (const auto& e : entries) {
    int64_t lo = std::max(begin, offset), hi = std::min(end, offset + e.count);
    if (lo < hi) {
      ScaleInto(static_cast<uint8_t*>(e.output) + (lo - offset) * esz, src + (lo - begin) * esz,
                hi - lo, dtype, scale);
    }
    offset += e.count;
    if (offset >= end) break;
  }
}

void ThrowIfArenaFailed(const Status& s, const std::string& step) {
  if (s.ok()) return;
  // A reason passed on by a neighbour (poison) may already say where it happened.
  const std::string where = " (during " + step + ")";
  if (s.message().find(where) != std::string::npos) throw Error(s);
  throw Error(Status(s.code(), s.message() + where));
}

}  // namespace herring
