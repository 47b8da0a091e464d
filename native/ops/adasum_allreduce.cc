#include "ops/adasum_allreduce.h"

#include <cfloat>
#include <algorithm>
#include <cmath>

#include "kernels/half_float.h"

namespace herring {

namespace {

// A coefficient of Horovod's formula is 1 when its vector's squared norm is below this (a zero
// gradient, e.g. a joined rank's, adds nothing and is not divided by).
const double kSmallestNormSquared = std::sqrt(DBL_MIN);

// The two kernels of the combination, on float and double (float16 goes through float in blocks).
template <typename T>
void AccumulateDotAndNorms(const T* a, const T* b, int64_t n, double* dot, double* a_sq, double* b_sq) {
  double d = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = a[i], y = b[i];
    d += x * y;
    aa += x * x;
    bb += y * y;
  }
  *dot += d;
  *a_sq += aa;
  *b_sq += bb;
}

template <typename T>
void ScaledAdd(T* a, double a_coeff, const T* b, double b_coeff, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = static_cast<T>(a_coeff * a[i] + b_coeff * b[i]);
}

constexpr int64_t kHalfBlock = 2048;

void HalfToFloat(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = half_float::HalfBitsToFloat(in[i]);
}

// dot += a.b, a_sq += a.a, b_sq += b.b over n elements of `dtype` (float16, float32, float64).
void DotAndNorms(DataType dtype, const uint8_t* a, const uint8_t* b, int64_t n, double* dot, double* a_sq,
                 double* b_sq) {
  if (dtype == DataType::kFloat32) {
    AccumulateDotAndNorms(reinterpret_cast<const float*>(a), reinterpret_cast<const float*>(b), n, dot, a_sq, b_sq);
  } else if (dtype == DataType::kFloat64) {
    AccumulateDotAndNorms(reinterpret_cast<const double*>(a), reinterpret_cast<const double*>(b), n, dot, a_sq, b_sq);
  } else {
    float fa[kHalfBlock], fb[kHalfBlock];
    for (int64_t at = 0; at < n; at += kHalfBlock) {
      const int64_t m = std::min(kHalfBlock, n - at);
      HalfToFloat(reinterpret_cast<const uint16_t*>(a) + at, fa, m);
      HalfToFloat(reinterpret_cast<const uint16_t*>(b) + at, fb, m);
      AccumulateDotAndNorms(fa, fb, m, dot, a_sq, b_sq);
    }
  }
}

// a = a_coeff * a + b_coeff * b over n elements of `dtype`.
void Combine(DataType dtype, uint8_t* a, double a_coeff, const uint8_t* b, double b_coeff, int64_t n) {
  if (dtype == DataType::kFloat32) {
    ScaledAdd(reinterpret_cast<float*>(a), a_coeff, reinterpret_cast<const float*>(b), b_coeff, n);
  } else if (dtype == DataType::kFloat64) {
    ScaledAdd(reinterpret_cast<double*>(a), a_coeff, reinterpret_cast<const double*>(b), b_coeff, n);
  } else {
    float fa[kHalfBlock], fb[kHalfBlock];
    uint16_t* ha = reinterpret_cast<uint16_t*>(a);
    for (int64_t at = 0; at < n; at += kHalfBlock) {
      const int64_t m = std::min(kHalfBlock, n - at);
      HalfToFloat(ha + at, fa, m);
      HalfToFloat(reinterpret_cast<const uint16_t*>(b) + at, fb, m);
      ScaledAdd(fa, a_coeff, fb, b_coeff, m);
      for (int64_t i = 0; i < m; ++i) ha[at + i] = half_float::FloatToHalfBits(fa[i]);
    }
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
      DotAndNorms(dtype, mine + (lo - seg.begin) * esz, theirs + (lo - seg.begin) * esz, hi - lo, &dot, &mine_sq,
                  &theirs_sq);
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
      Combine(dtype, mine + (lo - seg.begin) * esz, mine_coeff, theirs + (lo - seg.begin) * esz, theirs_coeff, hi - lo);
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
