#include "ops/adasum_allreduce.h"

#include <cfloat>
#include <cmath>

#include "kernels/half_float.h"

namespace herring {

namespace {

// A coefficient of Horovod's formula is 1 when its vector's squared norm is below this (a zero
// gradient, e.g. a joined rank's, adds nothing and is not divided by).
const double kSmallestNormSquared = std::sqrt(DBL_MIN);

double Load(DataType dtype, const uint8_t* base, int64_t i) {
  switch (dtype) {
    case DataType::kFloat16: return half_float::HalfBitsToFloat(reinterpret_cast<const uint16_t*>(base)[i]);
    case DataType::kFloat32: return reinterpret_cast<const float*>(base)[i];
    default: return reinterpret_cast<const double*>(base)[i];
  }
}

void Store(DataType dtype, uint8_t* base, int64_t i, double v) {
  switch (dtype) {
    case DataType::kFloat16: reinterpret_cast<uint16_t*>(base)[i] = half_float::FloatToHalfBits(static_cast<float>(v)); break;
    case DataType::kFloat32: reinterpret_cast<float*>(base)[i] = static_cast<float>(v); break;
    default: reinterpret_cast<double*>(base)[i] = v; break;
  }
}

// Elements [begin, end) of the fused layout; a level's segment.
struct Segment {
  int64_t begin, end;
  int64_t count() const { return end - begin; }
};

// The tensors of the batch as ranges of the fused layout: tensor t is [bounds[t], bounds[t+1]).
std::vector<int64_t> TensorBounds(const AllreduceBatch& batch) {
  std::vector<int64_t> bounds{0};
  for (const auto& e : batch.entries) bounds.push_back(bounds.back() + e.count);
  return bounds;
}

// Calls fn(tensor, first, last) for each tensor's part inside `seg` (elements of the fused layout).
template <typename Fn>
void ForEachTensorPart(const std::vector<int64_t>& bounds, Segment seg, Fn fn) {
  for (size_t t = 0; t + 1 < bounds.size(); ++t) {
    const int64_t first = std::max(seg.begin, bounds[t]), last = std::min(seg.end, bounds[t + 1]);
    if (first < last) fn(t, first, last);
  }
}

}  // namespace

std::string AdasumUnsupportedReason(DataType dtype, int set_size) {
  if (dtype != DataType::kFloat16 && dtype != DataType::kFloat32 && dtype != DataType::kFloat64) {
    return std::string("Adasum reduces float16, float32 and float64 tensors, not ") + DataTypeName(dtype);
  }
  if (set_size < 1 || (set_size & (set_size - 1)) != 0) {
    return "Adasum needs a power-of-2 number of ranks (as Horovod's); the process set has " +
           std::to_string(set_size);
  }
  return "";
}

void AdasumAllreduce::Execute(ExecContext& ctx, AllreduceBatch& batch) {
  const int64_t total = batch.total_count();
  if (total == 0) return;
  const int n = ctx.n(), me = ctx.me();
  if (!AdasumUnsupportedReason(batch.dtype, n).empty()) {
    throw Error(Status::InvalidArgument(AdasumUnsupportedReason(batch.dtype, n) + " ('" + batch.label + "')"));
  }
  TimelinePhase phase(ctx.timeline, ctx.lane, "ADASUM_ALLREDUCE");
  ctx.counters.adasum_allreduces++;
  const size_t esz = ElementSize(batch.dtype);
  const DataType dtype = batch.dtype;
  const std::vector<int64_t> bounds = TensorBounds(batch);
  const size_t tensors = batch.entries.size();

  uint8_t* buf = buffer_.Get(total * esz);
  batch.GatherInputs(0, total, buf, batch.prescale);
  uint8_t* theirs = incoming_.Get(((total + 1) / 2) * esz);

  // Every rank runs the same sequence of exchanges, so a running count names each one's tag.
  uint64_t exchange = 0;
  auto trade = [&](int peer, const void* send, size_t send_bytes, void* into, size_t recv_bytes,
                   const std::string& what) {
    const uint64_t tag = ctx.Tag(exchange++);
    std::vector<CompletionPtr> transfers;
    if (recv_bytes) transfers.push_back(ctx.net.Recv(ctx.member_rank(peer), tag, into, recv_bytes));
    if (send_bytes) transfers.push_back(ctx.net.Send(ctx.member_rank(peer), tag, send, send_bytes));
    WaitTransfers(transfers, ctx, "Adasum allreduce " + what + " of '" + batch.label + "' with rank " +
                                      std::to_string(ctx.member_rank(peer)));
  };

  std::vector<Segment> parents;  // the segment before each level's halving, for the gather
  Segment seg{0, total};
  std::vector<double> dots(3 * tensors), received(3 * tensors);
  for (int d = 1, level = 0; d < n; d <<= 1, ++level) {
    const int partner = me ^ d;
    const bool left = (me & d) == 0;  // the lower rank: keeps the first half, holds the left vector
    const int64_t mid = seg.begin + (seg.count() >> 1);
    const Segment first{seg.begin, mid}, second{mid, seg.end};
    const Segment keep = left ? first : second, give = left ? second : first;
    trade(partner, buf + give.begin * esz, give.count() * esz, theirs, keep.count() * esz,
          "halving level " + std::to_string(level));
    parents.push_back(seg);
    seg = keep;
    uint8_t* mine = buf + seg.begin * esz;

    // Per tensor: a.b, |left|^2, |right|^2 over this segment, then summed over the 2d ranks whose
    // segments make up the two full vectors (recursive doubling inside that group).
    std::fill(dots.begin(), dots.end(), 0.0);
    ForEachTensorPart(bounds, seg, [&](size_t t, int64_t lo, int64_t hi) {
      double dot = 0, mine_sq = 0, theirs_sq = 0;
      for (int64_t i = lo; i < hi; ++i) {
        const double a = Load(dtype, mine, i - seg.begin), b = Load(dtype, theirs, i - seg.begin);
        dot += a * b;
        mine_sq += a * a;
        theirs_sq += b * b;
      }
      dots[3 * t] = dot;
      dots[3 * t + 1] = left ? mine_sq : theirs_sq;
      dots[3 * t + 2] = left ? theirs_sq : mine_sq;
    });
    for (int g = 1; g <= d; g <<= 1) {
      trade(me ^ g, dots.data(), dots.size() * sizeof(double), received.data(), received.size() * sizeof(double),
            "dot products of level " + std::to_string(level));
      for (size_t i = 0; i < dots.size(); ++i) dots[i] += received[i];
    }
    ForEachTensorPart(bounds, seg, [&](size_t t, int64_t lo, int64_t hi) {
      const double dot = dots[3 * t];
      const double mine_sq = left ? dots[3 * t + 1] : dots[3 * t + 2];
      const double theirs_sq = left ? dots[3 * t + 2] : dots[3 * t + 1];
      const double mine_coeff = mine_sq >= kSmallestNormSquared ? 1.0 - dot / mine_sq * 0.5 : 1.0;
      const double theirs_coeff = theirs_sq >= kSmallestNormSquared ? 1.0 - dot / theirs_sq * 0.5 : 1.0;
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t at = i - seg.begin;
        Store(dtype, mine, at, mine_coeff * Load(dtype, mine, at) + theirs_coeff * Load(dtype, theirs, at));
      }
    });
  }
  for (int level = static_cast<int>(parents.size()) - 1; level >= 0; --level) {  // distance-halving gather
    const int partner = me ^ (1 << level);
    const Segment parent = parents[level];
    const bool left = (me & (1 << level)) == 0;  // kept the first half of `parent` at that level
    const Segment sibling = left ? Segment{seg.end, parent.end} : Segment{parent.begin, seg.begin};
    trade(partner, buf + seg.begin * esz, seg.count() * esz, buf + sibling.begin * esz, sibling.count() * esz,
          "gather level " + std::to_string(level));
    seg = parent;
  }
  batch.ScatterOutputs(0, total, buf, batch.postscale);
}

}  // namespace herring
