// The exact integer Average (kernels/integer_average.h). Scalar loops: an integer Average is a
// counter or a metric, not a gradient stream, and each element costs one division.
#include "kernels/integer_average.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/status.h"
#include "kernels/reduce.h"
#include "kernels/saturate.h"

namespace herring {
namespace {

// Elements handled per step where a prescaled copy or per-source splits need room.
constexpr size_t kChunk = 256;

template <typename T>
void SplitTyped(const T* x, size_t count, int64_t n, int64_t* q, int64_t* r) {
  for (size_t i = 0; i < count; ++i) {
    const int64_t v = static_cast<int64_t>(x[i]);
    int64_t quotient = v / n, remainder = v % n;
    if (remainder < 0) {  // C++ divides toward zero; the floor is one lower
      remainder += n;
      quotient -= 1;
    }
    q[i] = quotient;
    r[i] = remainder;
  }
}

template <typename T>
void FinishTyped(const int64_t* q, const int64_t* r, size_t count, int64_t n, double postscale, T* dst) {
  for (size_t i = 0; i < count; ++i) {
    // R >= 0: floor(Q + R / n) = Q + R div n, computed modulo 2^64 (see the header).
    const int64_t floor = static_cast<int64_t>(static_cast<uint64_t>(q[i]) + static_cast<uint64_t>(r[i] / n));
    const int64_t rest = r[i] % n;
    if (postscale == 1.0) {
      // Toward zero: a negative average with a fraction is one above its floor. The average of
      // values of T is a value of T.
      dst[i] = static_cast<T>(rest != 0 && floor < 0 ? floor + 1 : floor);
    } else {
      const double average = static_cast<double>(floor) + static_cast<double>(rest) / static_cast<double>(n);
      dst[i] = TruncateSaturating<T>(average * postscale);
    }
  }
}

template <typename F>
void ByIntegerType(DataType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DataType::kUInt8: return f(uint8_t{});
    case DataType::kInt8: return f(int8_t{});
    case DataType::kInt16: return f(int16_t{});
    case DataType::kUInt16: return f(uint16_t{});
    case DataType::kInt32: return f(int32_t{});
    case DataType::kInt64: return f(int64_t{});
    default:
      throw Error(Status::InvalidArgument(std::string(what) + ": the exact integer Average does not take " +
                                          DataTypeName(dtype) + " tensors"));
  }
}

void CheckDivisor(int64_t n, const char* what) {
  if (n < 1) throw Error(Status::InvalidArgument(std::string(what) + ": average over " + std::to_string(n) + " ranks"));
}

}  // namespace

bool IsIntegerAverage(DataType dtype, ReduceOp op) {
  return op == ReduceOp::kAverage && IsValidDataType(static_cast<int>(dtype)) && !IsFloatingPoint(dtype) &&
         dtype != DataType::kBool;
}

void SplitForAverage(const void* src, size_t count, DataType dtype, double prescale, int64_t n,
                     int64_t* quotients, int64_t* remainders) {
  CheckDivisor(n, "SplitForAverage");
  ByIntegerType(dtype, "SplitForAverage", [&](auto zero) {
    using T = decltype(zero);
    const T* x = static_cast<const T*>(src);
    if (prescale == 1.0) return SplitTyped(x, count, n, quotients, remainders);
    T scaled[kChunk];
    for (size_t i = 0; i < count; i += kChunk) {
      const size_t m = std::min(kChunk, count - i);
      ScaleInto(scaled, x + i, m, dtype, prescale);
      SplitTyped(scaled, m, n, quotients + i, remainders + i);
    }
  });
}

void AverageFromSplitSums(const int64_t* quotient_sums, const int64_t* remainder_sums, size_t count,
                          int64_t n, double postscale, DataType dtype, void* dst) {
  CheckDivisor(n, "AverageFromSplitSums");
  ByIntegerType(dtype, "AverageFromSplitSums", [&](auto zero) {
    using T = decltype(zero);
    FinishTyped(quotient_sums, remainder_sums, count, n, postscale, static_cast<T*>(dst));
  });
}

void AverageInto(void* dst, const void* const* srcs, size_t nsrcs, size_t count, DataType dtype,
                 double postscale) {
  const int64_t n = static_cast<int64_t>(nsrcs);
  CheckDivisor(n, "AverageInto");
  ByIntegerType(dtype, "AverageInto", [&](auto zero) {
    using T = decltype(zero);
    int64_t q_sum[kChunk], r_sum[kChunk], q[kChunk], r[kChunk];
    for (size_t i = 0; i < count; i += kChunk) {
      const size_t m = std::min(kChunk, count - i);
      std::memset(q_sum, 0, sizeof q_sum);
      std::memset(r_sum, 0, sizeof r_sum);
      for (size_t s = 0; s < nsrcs; ++s) {
        SplitTyped(static_cast<const T*>(srcs[s]) + i, m, n, q, r);
        for (size_t j = 0; j < m; ++j) {
          q_sum[j] = static_cast<int64_t>(static_cast<uint64_t>(q_sum[j]) + static_cast<uint64_t>(q[j]));
          r_sum[j] += r[j];
        }
      }
      FinishTyped(q_sum, r_sum, m, n, postscale, static_cast<T*>(dst) + i);
    }
  });
}

}  // namespace herring
