// Tests of the exact integer Average (kernels/integer_average.h): n ranks' inputs split, their
// quotients and remainders summed as the allreduce paths sum them (ReduceInto, int64 Sum, rank
// order), and the average taken back, against the average computed in 128-bit integers and
// truncated toward zero; extremes of every type, int64's included; prescale and postscale; the
// local form reducescatter uses.
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common/status.h"
#include "kernels/integer_average.h"
#include "kernels/reduce.h"
#include <gtest/gtest.h>

using namespace herring;

namespace {

// Every rank's elements as int64 (values of the dtype), [rank][i].
using Inputs = std::vector<std::vector<int64_t>>;

template <typename T>
std::vector<uint8_t> Pack(const std::vector<int64_t>& v) {
  std::vector<uint8_t> bytes(v.size() * sizeof(T));
  for (size_t i = 0; i < v.size(); ++i) {
    const T x = static_cast<T>(v[i]);
    std::memcpy(bytes.data() + i * sizeof(T), &x, sizeof(T));
  }
  return bytes;
}

template <typename T>
std::vector<int64_t> Unpack(const std::vector<uint8_t>& bytes) {
  std::vector<int64_t> v(bytes.size() / sizeof(T));
  for (size_t i = 0; i < v.size(); ++i) {
    T x;
    std::memcpy(&x, bytes.data() + i * sizeof(T), sizeof(T));
    v[i] = x;
  }
  return v;
}

// What an allreduce with op Average returns on every rank: split, int64 Sums in rank order, average.
template <typename T>
std::vector<int64_t> AllreduceAverage(DataType dtype, const Inputs& in, double prescale = 1.0,
                                      double postscale = 1.0) {
  const int64_t n = static_cast<int64_t>(in.size());
  const size_t count = in[0].size();
  std::vector<std::vector<int64_t>> q(n, std::vector<int64_t>(count)), r(n, std::vector<int64_t>(count));
  for (int64_t k = 0; k < n; ++k) {
    const std::vector<uint8_t> bytes = Pack<T>(in[k]);
    SplitForAverage(bytes.data(), count, dtype, prescale, n, q[k].data(), r[k].data());
  }
  std::vector<const void*> qs, rs;
  for (int64_t k = 0; k < n; ++k) {
    qs.push_back(q[k].data());
    rs.push_back(r[k].data());
  }
  std::vector<int64_t> qsum(count), rsum(count);
  ReduceInto(qsum.data(), qs.data(), n, count, DataType::kInt64, ReduceOp::kSum);
  ReduceInto(rsum.data(), rs.data(), n, count, DataType::kInt64, ReduceOp::kSum);
  std::vector<uint8_t> out(count * sizeof(T));
  AverageFromSplitSums(qsum.data(), rsum.data(), count, n, postscale, dtype, out.data());
  return Unpack<T>(out);
}

// The local form (reducescatter): every input at hand.
template <typename T>
std::vector<int64_t> LocalAverage(DataType dtype, const Inputs& in, double postscale = 1.0) {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<const void*> srcs;
  for (const auto& v : in) bytes.push_back(Pack<T>(v));
  for (const auto& b : bytes) srcs.push_back(b.data());
  std::vector<uint8_t> out(in[0].size() * sizeof(T));
  AverageInto(out.data(), srcs.data(), srcs.size(), in[0].size(), dtype, postscale);
  return Unpack<T>(out);
}

// sum / n in 128 bits, truncated toward zero (C++ division).
std::vector<int64_t> Reference(const Inputs& in) {
  std::vector<int64_t> out(in[0].size());
  for (size_t i = 0; i < out.size(); ++i) {
    __int128 sum = 0;
    for (const auto& v : in) sum += v[i];
    out[i] = static_cast<int64_t>(sum / static_cast<__int128>(in.size()));
  }
  return out;
}

template <typename T>
void CheckType(DataType dtype) {
  const int64_t lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> any(lo, hi);
  for (int n : {1, 2, 3, 7, 16}) {
    Inputs in(n);
    for (int k = 0; k < n; ++k) {
      // The extremes on every rank (sums far outside the type), mixed signs, then random values.
      in[k] = {hi, lo, hi, lo + 1, 0, std::is_signed<T>::value ? -1 : 2, 1, hi - k, lo + k, (k % 2) ? hi : lo};
      for (int i = 0; i < 300; ++i) in[k].push_back(any(rng));  // more than one kChunk in AverageInto
    }
    const std::string what = std::string(DataTypeName(dtype)) + " over " + std::to_string(n) + " ranks";
    const std::vector<int64_t> want = Reference(in);
    EXPECT_EQ(AllreduceAverage<T>(dtype, in), want) << what;
    EXPECT_EQ(LocalAverage<T>(dtype, in), want) << what << " (AverageInto)";
  }
}

}  // namespace

TEST(IntegerAverage, OnlyIntegerAveragesTakeTheExactPath) {
  for (DataType t : {DataType::kUInt8, DataType::kInt8, DataType::kInt16, DataType::kUInt16, DataType::kInt32,
                     DataType::kInt64}) {
    EXPECT_TRUE(IsIntegerAverage(t, ReduceOp::kAverage)) << DataTypeName(t);
    EXPECT_FALSE(IsIntegerAverage(t, ReduceOp::kSum)) << DataTypeName(t);
  }
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64, DataType::kBool}) {
    EXPECT_FALSE(IsIntegerAverage(t, ReduceOp::kAverage)) << DataTypeName(t);
  }
}

// The case: int8 [100, -100, 127, 3] on 2 ranks averaged to [-28, 28, -1, 3] (the sum
// wrapped in int8 before the division).
TEST(IntegerAverage, Int8SumsThatWrapAverageToTheInputs) {
  const Inputs in = {{100, -100, 127, 3}, {100, -100, 127, 3}};
  EXPECT_EQ(AllreduceAverage<int8_t>(DataType::kInt8, in), (std::vector<int64_t>{100, -100, 127, 3}));
  const Inputs u8 = {{200, 255, 1, 0}, {100, 255, 0, 0}};
  EXPECT_EQ(AllreduceAverage<uint8_t>(DataType::kUInt8, u8), (std::vector<int64_t>{150, 255, 0, 0}));
  const Inputs i16 = {{30000, -30000, 32767}, {30000, -30001, 32767}};
  EXPECT_EQ(AllreduceAverage<int16_t>(DataType::kInt16, i16), (std::vector<int64_t>{30000, -30000, 32767}));
}

TEST(IntegerAverage, TruncatesTowardZeroLikeTorch) {
  // 5/2 = 2.5 -> 2, -5/2 = -2.5 -> -2, -1/2 -> 0, 1/3 -> 0, -2/3 -> 0, -4/3 -> -1.
  EXPECT_EQ(AllreduceAverage<int32_t>(DataType::kInt32, {{2, -2, 0}, {3, -3, -1}}), (std::vector<int64_t>{2, -2, 0}));
  EXPECT_EQ(AllreduceAverage<int32_t>(DataType::kInt32, {{1, -2, -4}, {0, 0, 0}, {0, 0, 0}}),
            (std::vector<int64_t>{0, 0, -1}));
  // 49 ranks of 1: exactly 1 (sum * (1/49) in double is 0.9999999999999999, which truncates to 0).
  EXPECT_EQ(AllreduceAverage<int32_t>(DataType::kInt32, Inputs(49, std::vector<int64_t>{1})), (std::vector<int64_t>{1}));
}

TEST(IntegerAverage, EveryIntegerTypeMatchesThe128BitReference) {
  CheckType<uint8_t>(DataType::kUInt8);
  CheckType<int8_t>(DataType::kInt8);
  CheckType<int16_t>(DataType::kInt16);
  CheckType<uint16_t>(DataType::kUInt16);
  CheckType<int32_t>(DataType::kInt32);
  CheckType<int64_t>(DataType::kInt64);
}

TEST(IntegerAverage, PrescaleInTheTypeAndPostscaleSaturating) {
  // The prescale scales each input in its type, as ScaleInto does (100 * 2 saturates to 127 in int8).
  EXPECT_EQ(AllreduceAverage<int8_t>(DataType::kInt8, {{100, 10}, {100, 11}}, 2.0), (std::vector<int64_t>{127, 21}));
  // The postscale applies to the exact average before truncating: (5 / 2) * 2 = 5, not 2 * 2;
  // beyond the type it saturates.
  EXPECT_EQ(AllreduceAverage<int8_t>(DataType::kInt8, {{2, 100, -100}, {3, 100, -100}}, 1.0, 2.0),
            (std::vector<int64_t>{5, 127, -128}));
  EXPECT_EQ(LocalAverage<int8_t>(DataType::kInt8, {{2, 100, -100}, {3, 100, -100}}, 2.0),
            (std::vector<int64_t>{5, 127, -128}));
  EXPECT_EQ(AllreduceAverage<int64_t>(DataType::kInt64, {{7}, {-2}}, 1.0, 0.5), (std::vector<int64_t>{1}));
}

TEST(IntegerAverage, RefusesWhatIsNoIntegerAverage) {
  float x = 1.0f;
  int64_t q, r;
  EXPECT_THROW(SplitForAverage(&x, 1, DataType::kFloat32, 1.0, 2, &q, &r), Error);
  int8_t y = 1;
  EXPECT_THROW(SplitForAverage(&y, 1, DataType::kInt8, 1.0, 0, &q, &r), Error);
}
