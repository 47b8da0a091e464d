// Tests of the reduction kernels (kernels/reduce.h): every dtype x op against a scalar reference
// written here, on every instruction set this machine runs; float16/bfloat16 rounding against
// known bit patterns and the F16C hardware; integer scaling; argument checks.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define REDUCE_TEST_HAVE_F16C_ORACLE 1
#else
#define REDUCE_TEST_HAVE_F16C_ORACLE 0
#endif

#include "common/status.h"
#include "kernels/reduce.h"
#include "kernels/reduce_internal.h"
#include <gtest/gtest.h>

using namespace herring;
using reduce_internal::KernelIsa;

namespace {

const DataType kAllTypes[] = {DataType::kUInt8,   DataType::kInt8,     DataType::kInt16,
                              DataType::kInt32,   DataType::kInt64,    DataType::kFloat16,
                              DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64,
                              DataType::kBool,    DataType::kUInt16};
const ReduceOp kElementwiseOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax,
                                    ReduceOp::kProduct};

std::vector<KernelIsa> AvailableIsas() {
  std::vector<KernelIsa> isas;
  for (KernelIsa isa : {KernelIsa::kPortable, KernelIsa::kAvx2F16c}) {
    if (reduce_internal::KernelIsaAvailable(isa)) isas.push_back(isa);
  }
  return isas;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
float FloatFromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

template <typename T>
T Load(const uint8_t* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof v);
  return v;
}
template <typename T>
void StoreAt(uint8_t* p, size_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof v);
}

bool IsHalfNaN(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0; }
bool IsBFloat16NaN(uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0; }

// ---- The scalar reference: the simplest code that states the contract. ----------------------

template <typename T>
T CombineInteger(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return static_cast<T>(uint64_t(a) + uint64_t(b));      // wraps
    case ReduceOp::kProduct: return static_cast<T>(uint64_t(a) * uint64_t(b));  // wraps
    case ReduceOp::kMin: return std::min(a, b);
    case ReduceOp::kMax: return std::max(a, b);
    default: return 0;
  }
}

// Min/Max: a NaN operand wins (the first one); on ties the later operand is kept.
template <typename F>
F CombineFloating(F a, F b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return a + b;
    case ReduceOp::kProduct: return a * b;
    case ReduceOp::kMin:
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
      return a < b ? a : b;
    case ReduceOp::kMax:
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
      return a > b ? a : b;
    default: return 0;
  }
}

// Integers and float32/float64, combined in their own type.
template <typename T>
void ReferenceInType(const std::vector<const uint8_t*>& srcs, size_t count, ReduceOp op, uint8_t* out) {
  auto combine = [op](T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return CombineFloating(a, b, op);
    } else {
      return CombineInteger(a, b, op);
    }
  };
  for (size_t i = 0; i < count; ++i) {
    T acc = Load<T>(srcs[0], i);
    for (size_t k = 1; k < srcs.size(); ++k) acc = combine(acc, Load<T>(srcs[k], i));
    StoreAt(out, i, acc);
  }
}

// float16/bfloat16: widen, combine in float32, round once.
void ReferenceHalf(const std::vector<const uint8_t*>& srcs, size_t count, ReduceOp op,
                   bool bfloat, uint8_t* out) {
  auto widen = [bfloat](uint16_t h) { return bfloat ? BFloat16ToFloat(h) : HalfToFloat(h); };
  for (size_t i = 0; i < count; ++i) {
    float acc = widen(Load<uint16_t>(srcs[0], i));
    if (srcs.size() == 1) {  // one source: a bit-exact copy
      StoreAt(out, i, Load<uint16_t>(srcs[0], i));
      continue;
    }
    for (size_t k = 1; k < srcs.size(); ++k) {
      acc = CombineFloating(acc, widen(Load<uint16_t>(srcs[k], i)), op);
    }
    StoreAt(out, i, static_cast<uint16_t>(bfloat ? FloatToBFloat16(acc) : FloatToHalf(acc)));
  }
}

void ReferenceBool(const std::vector<const uint8_t*>& srcs, size_t count, ReduceOp op,
                   uint8_t* out) {
  for (size_t i = 0; i < count; ++i) {
    if (srcs.size() == 1) {
      out[i] = srcs[0][i];
      continue;
    }
    bool acc = srcs[0][i] != 0;
    for (size_t k = 1; k < srcs.size(); ++k) {
      acc = op == ReduceOp::kMin ? (acc && srcs[k][i] != 0) : (acc || srcs[k][i] != 0);
    }
    out[i] = acc ? 1 : 0;
  }
}

std::vector<uint8_t> ReferenceReduce(const std::vector<const uint8_t*>& srcs, size_t count,
                                     DataType dtype, ReduceOp op) {
  std::vector<uint8_t> out(count * ElementSize(dtype));
  switch (dtype) {
    case DataType::kUInt8: ReferenceInType<uint8_t>(srcs, count, op, out.data()); break;
    case DataType::kInt8: ReferenceInType<int8_t>(srcs, count, op, out.data()); break;
    case DataType::kInt16: ReferenceInType<int16_t>(srcs, count, op, out.data()); break;
    case DataType::kUInt16: ReferenceInType<uint16_t>(srcs, count, op, out.data()); break;
    case DataType::kInt32: ReferenceInType<int32_t>(srcs, count, op, out.data()); break;
    case DataType::kInt64: ReferenceInType<int64_t>(srcs, count, op, out.data()); break;
    case DataType::kFloat16: ReferenceHalf(srcs, count, op, false, out.data()); break;
    case DataType::kBFloat16: ReferenceHalf(srcs, count, op, true, out.data()); break;
    case DataType::kFloat32: ReferenceInType<float>(srcs, count, op, out.data()); break;
    case DataType::kFloat64: ReferenceInType<double>(srcs, count, op, out.data()); break;
    case DataType::kBool: ReferenceBool(srcs, count, op, out.data()); break;
  }
  return out;
}

// Equal bits, except that any NaN matches any NaN (the reference does not model payloads; the
// cross-ISA test checks those bit for bit).
bool ElementsMatch(DataType dtype, const uint8_t* a, const uint8_t* b, size_t i) {
  switch (dtype) {
    case DataType::kFloat16: {
      const uint16_t x = Load<uint16_t>(a, i), y = Load<uint16_t>(b, i);
      return x == y || (IsHalfNaN(x) && IsHalfNaN(y));
    }
    case DataType::kBFloat16: {
      const uint16_t x = Load<uint16_t>(a, i), y = Load<uint16_t>(b, i);
      return x == y || (IsBFloat16NaN(x) && IsBFloat16NaN(y));
    }
    case DataType::kFloat32: {
      const float x = Load<float>(a, i), y = Load<float>(b, i);
      return Bits(x) == Bits(y) || (std::isnan(x) && std::isnan(y));
    }
    case DataType::kFloat64: {
      const double x = Load<double>(a, i), y = Load<double>(b, i);
      return std::memcmp(&x, &y, sizeof x) == 0 || (std::isnan(x) && std::isnan(y));
    }
    default: {
      const size_t size = ElementSize(dtype);
      return std::memcmp(a + i * size, b + i * size, size) == 0;
    }
  }
}

// "" when equal, else a description of the first difference.
std::string FirstMismatch(DataType dtype, const uint8_t* got, const uint8_t* want, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (ElementsMatch(dtype, got, want, i)) continue;
    std::ostringstream s;
    s << "element " << i << " of " << count << ": got bytes";
    const size_t size = ElementSize(dtype);
    for (size_t b = 0; b < size; ++b) s << ' ' << int(got[i * size + b]);
    s << ", want";
    for (size_t b = 0; b < size; ++b) s << ' ' << int(want[i * size + b]);
    return s.str();
  }
  return "";
}

// ---- Test data ------------------------------------------------------------------------------

// Random elements; floating types include NaN, infinities, signed zeros, subnormals and
// extremes when `specials` is set, integers span their full range, bools use several truthy
// byte values.
void FillRandom(DataType dtype, uint8_t* p, size_t count, std::mt19937_64& rng, bool specials) {
  std::uniform_real_distribution<double> value(-4.0, 4.0);
  auto special = [&] { return specials && rng() % 16 == 0; };
  for (size_t i = 0; i < count; ++i) {
    const uint64_t r = rng();
    switch (dtype) {
      case DataType::kBool: {
        const uint8_t truthy[] = {0, 1, 1, 0, 2, 255};
        p[i] = truthy[r % 6];
        break;
      }
      case DataType::kFloat16: {
        const uint16_t odd[] = {0x7E00, 0xFE01, 0x7C00, 0xFC00, 0x8000, 0x0000,
                                0x0001, 0x83FF, 0x7BFF, 0x7D00, 0x0400};
        StoreAt<uint16_t>(p, i, special() ? odd[r % 11] : FloatToHalf(float(value(rng))));
        break;
      }
      case DataType::kBFloat16: {
        const uint16_t odd[] = {0x7FC0, 0xFFC1, 0x7F80, 0xFF80, 0x8000, 0x0000,
                                0x0001, 0x807F, 0x7F7F, 0x7FA0, 0x0080};
        StoreAt<uint16_t>(p, i, special() ? odd[r % 11] : FloatToBFloat16(float(value(rng))));
        break;
      }
      case DataType::kFloat32: {
        const uint32_t odd[] = {0x7FC00000, 0xFFC00123, 0x7F800000, 0xFF800000, 0x80000000,
                                0x00000000, 0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0x7FA00000};
        StoreAt<float>(p, i, special() ? FloatFromBits(odd[r % 10]) : float(value(rng)));
        break;
      }
      case DataType::kFloat64: {
        const double odd[] = {std::numeric_limits<double>::quiet_NaN(),
                              -std::numeric_limits<double>::quiet_NaN(),
                              std::numeric_limits<double>::infinity(),
                              -std::numeric_limits<double>::infinity(),
                              -0.0,
                              0.0,
                              std::numeric_limits<double>::denorm_min(),
                              std::numeric_limits<double>::max()};
        StoreAt<double>(p, i, special() ? odd[r % 8] : value(rng));
        break;
      }
      default:
        std::memcpy(p + i * ElementSize(dtype), &r, ElementSize(dtype));
        break;
    }
  }
}

// Sources for one ReduceInto call, each at its own misalignment (0..3 elements past a fresh
// allocation), so vector loads straddle boundaries differently per source.
struct Sources {
  std::vector<std::vector<uint8_t>> storage;
  std::vector<const uint8_t*> pointers;

  Sources(DataType dtype, size_t nsrcs, size_t count, std::mt19937_64& rng, bool specials) {
    const size_t size = ElementSize(dtype);
    for (size_t k = 0; k < nsrcs; ++k) {
      storage.emplace_back((count + 4) * size);
      uint8_t* p = storage.back().data() + (k % 4) * size;
      FillRandom(dtype, p, count, rng, specials);
      pointers.push_back(p);
    }
  }
  std::vector<const void*> Void() const { return {pointers.begin(), pointers.end()}; }
};

// Runs ReduceInto on `isa`; with `alias` the result goes into source 0 (as the engine's
// in-place accumulation does), else into a separate, deliberately misaligned buffer.
std::vector<uint8_t> RunReduce(KernelIsa isa, const Sources& sources, size_t count,
                               DataType dtype, ReduceOp op, bool alias) {
  const size_t size = ElementSize(dtype);
  std::vector<const void*> srcs = sources.Void();
  if (alias) {
    std::vector<uint8_t> first(sources.pointers[0], sources.pointers[0] + count * size);
    srcs[0] = first.data();
    reduce_internal::ReduceIntoWithIsa(isa, first.data(), srcs.data(), srcs.size(), count,
                                       dtype, op);
    return first;
  }
  std::vector<uint8_t> dst((count + 1) * size, 0xAB);
  reduce_internal::ReduceIntoWithIsa(isa, dst.data() + size, srcs.data(), srcs.size(), count,
                                     dtype, op);
  return std::vector<uint8_t>(dst.begin() + size, dst.end());
}

std::string CaseName(KernelIsa isa, DataType dtype, ReduceOp op, size_t nsrcs, size_t count,
                     bool alias) {
  std::ostringstream s;
  s << reduce_internal::KernelIsaName(isa) << ' ' << DataTypeName(dtype) << ' '
    << ReduceOpName(op) << " nsrcs=" << nsrcs << " count=" << count
    << (alias ? " dst=srcs[0]" : "");
  return s.str();
}

// Lengths around every vector width and unroll step (tails), plus a few spanning several
// 16 KiB accumulation blocks.
std::vector<size_t> TestLengths(size_t nsrcs) {
  std::vector<size_t> lengths = {0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 129};
  if (nsrcs == 2 || nsrcs == 5 || nsrcs == 8) {
    lengths.push_back(4096 + 77);
    lengths.push_back(2 * 4096 + 2048 + 5);
  }
  return lengths;
}

// ---- Helpers for the hand-written cases -----------------------------------------------------

// Reduces sources of `count` equal elements each (count chosen to hit the vector body and the
// scalar tail) on every ISA; returns "" or the first disagreement with `want`.
template <typename T>
std::string ReduceConstants(const std::vector<T>& values, DataType dtype, ReduceOp op, T want) {
  const size_t count = 71;
  std::vector<std::vector<T>> buffers;
  for (T v : values) buffers.emplace_back(count, v);
  std::vector<const void*> srcs;
  for (auto& b : buffers) srcs.push_back(b.data());
  for (KernelIsa isa : AvailableIsas()) {
    std::vector<T> out(count);
    reduce_internal::ReduceIntoWithIsa(isa, out.data(), srcs.data(), srcs.size(), count, dtype,
                                       op);
    for (size_t i = 0; i < count; ++i) {
      if (std::memcmp(&out[i], &want, sizeof(T)) != 0) {
        std::ostringstream s;
        s << reduce_internal::KernelIsaName(isa) << ' ' << DataTypeName(dtype) << ' '
          << ReduceOpName(op) << " element " << i << ": got " << +out[i] << ", want " << +want;
        return s.str();
      }
    }
  }
  return "";
}

template <typename T>
std::string ScaleConstants(const std::vector<T>& in, DataType dtype, double factor,
                           const std::vector<T>& want) {
  // Repeat the pattern so that it is processed by the vector body and the scalar tail.
  std::vector<T> src, expected;
  for (int r = 0; r < 9; ++r) {
    src.insert(src.end(), in.begin(), in.end());
    expected.insert(expected.end(), want.begin(), want.end());
  }
  for (KernelIsa isa : AvailableIsas()) {
    std::vector<T> out(src.size());
    reduce_internal::ScaleIntoWithIsa(isa, out.data(), src.data(), src.size(), dtype, factor);
    for (size_t i = 0; i < src.size(); ++i) {
      if (std::memcmp(&out[i], &expected[i], sizeof(T)) != 0) {
        std::ostringstream s;
        s << reduce_internal::KernelIsaName(isa) << ' ' << DataTypeName(dtype) << " x" << factor
          << " element " << i << ": " << +src[i] << " -> " << +out[i] << ", want "
          << +expected[i];
        return s.str();
      }
    }
  }
  return "";
}

template <typename T>
T SaturatingTruncation(double v) {
  if (std::isnan(v)) return 0;
  const double lowest = static_cast<double>(std::numeric_limits<T>::min());
  const double above_max = std::ldexp(1.0, std::numeric_limits<T>::digits);
  if (v >= above_max) return std::numeric_limits<T>::max();
  if (v <= lowest) return std::numeric_limits<T>::min();
  return static_cast<T>(v);
}

template <typename T>
void ReferenceScaleInteger(const uint8_t* in, uint8_t* out, size_t count, double factor) {
  for (size_t i = 0; i < count; ++i) {
    const T x = Load<T>(in, i);
    StoreAt(out, i, factor == 1.0 ? x : SaturatingTruncation<T>(double(x) * factor));
  }
}

std::vector<uint8_t> ReferenceScale(const uint8_t* in, size_t count, DataType dtype,
                                    double factor) {
  const size_t size = ElementSize(dtype);
  std::vector<uint8_t> out(in, in + count * size);
  if (factor == 1.0) return out;  // a bit-exact copy, NaN payloads included
  uint8_t* o = out.data();
  switch (dtype) {
    case DataType::kUInt8: ReferenceScaleInteger<uint8_t>(in, o, count, factor); break;
    case DataType::kInt8: ReferenceScaleInteger<int8_t>(in, o, count, factor); break;
    case DataType::kInt16: ReferenceScaleInteger<int16_t>(in, o, count, factor); break;
    case DataType::kUInt16: ReferenceScaleInteger<uint16_t>(in, o, count, factor); break;
    case DataType::kInt32: ReferenceScaleInteger<int32_t>(in, o, count, factor); break;
    case DataType::kInt64: ReferenceScaleInteger<int64_t>(in, o, count, factor); break;
    case DataType::kFloat16:
      for (size_t i = 0; i < count; ++i) {
        const float x = HalfToFloat(Load<uint16_t>(in, i));
        StoreAt<uint16_t>(o, i, FloatToHalf(x * static_cast<float>(factor)));
      }
      break;
    case DataType::kBFloat16:
      for (size_t i = 0; i < count; ++i) {
        const float x = BFloat16ToFloat(Load<uint16_t>(in, i));
        StoreAt<uint16_t>(o, i, FloatToBFloat16(x * static_cast<float>(factor)));
      }
      break;
    case DataType::kFloat32:
      for (size_t i = 0; i < count; ++i) {
        StoreAt(o, i, Load<float>(in, i) * static_cast<float>(factor));  // Horovod: float math
      }
      break;
    case DataType::kFloat64:
      for (size_t i = 0; i < count; ++i) StoreAt(o, i, Load<double>(in, i) * factor);
      break;
    case DataType::kBool: break;  // copied unchanged
  }
  return out;
}

std::string ErrorMessageOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

#if REDUCE_TEST_HAVE_F16C_ORACLE
__attribute__((target("f16c"))) uint16_t HardwareFloatToHalf(float f) {
  return static_cast<uint16_t>(
      _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
}
__attribute__((target("f16c"))) uint32_t HardwareHalfToFloatBits(uint16_t h) {
  return Bits(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))));
}
#endif

}  // namespace

// ---- ReduceInto -----------------------------------------------------------------------------

TEST(Reduce, ReduceAllTypesAndOpsMatchReference) {
  std::mt19937_64 rng(12345);
  for (KernelIsa isa : AvailableIsas()) {
    for (DataType dtype : kAllTypes) {
      for (ReduceOp op : kElementwiseOps) {
        if (!ReductionSupported(dtype, op)) continue;
        for (size_t nsrcs = 1; nsrcs <= 8; ++nsrcs) {
          for (size_t count : TestLengths(nsrcs)) {
            Sources sources(dtype, nsrcs, count, rng, /*specials=*/true);
            const std::vector<uint8_t> want = ReferenceReduce(sources.pointers, count, dtype, op);
            for (bool alias : {false, true}) {
              const std::vector<uint8_t> got = RunReduce(isa, sources, count, dtype, op, alias);
              const std::string mismatch = FirstMismatch(dtype, got.data(), want.data(), count);
              if (!mismatch.empty()) {
                EXPECT_EQ(CaseName(isa, dtype, op, nsrcs, count, alias) + ": " + mismatch, "");
              }
            }
          }
        }
      }
    }
  }
}

TEST(Reduce, ReduceInstructionSetsGiveIdenticalBits) {
  const std::vector<KernelIsa> isas = AvailableIsas();
  std::mt19937_64 rng(777);
  for (DataType dtype : kAllTypes) {
    for (ReduceOp op : kElementwiseOps) {
      if (!ReductionSupported(dtype, op)) continue;
      for (size_t nsrcs : {2, 3, 4, 6, 8}) {
        const size_t count = 1000 + rng() % 300;
        Sources sources(dtype, nsrcs, count, rng, /*specials=*/true);
        const std::vector<uint8_t> first = RunReduce(isas[0], sources, count, dtype, op, false);
        for (size_t j = 1; j < isas.size(); ++j) {
          const std::vector<uint8_t> other = RunReduce(isas[j], sources, count, dtype, op, false);
          if (first != other) {
            EXPECT_EQ(CaseName(isas[j], dtype, op, nsrcs, count, false) + " differs from " +
                          reduce_internal::KernelIsaName(isas[0]),
                      "");
          }
        }
      }
    }
  }
}

TEST(Reduce, ReduceLargeBuffersStreamedToMisalignedDst) {
  // Past the 8 MiB streaming threshold, with a destination that is not vector-aligned (an
  // ordinary-store head, then streaming stores) and with 2 (one pass) and 5 (two passes) sources.
  std::mt19937_64 rng(99);
  const struct {
    DataType dtype;
    size_t count;
  } cases[] = {{DataType::kFloat32, (8u << 20) / 4 + 37}, {DataType::kFloat16, (8u << 20) / 2 + 5}};
  for (const auto& c : cases) {
    for (size_t nsrcs : {2, 5}) {
      Sources sources(c.dtype, nsrcs, c.count, rng, /*specials=*/false);
      const std::vector<uint8_t> want =
          ReferenceReduce(sources.pointers, c.count, c.dtype, ReduceOp::kSum);
      for (KernelIsa isa : AvailableIsas()) {
        const std::vector<uint8_t> got =
            RunReduce(isa, sources, c.count, c.dtype, ReduceOp::kSum, false);
        const std::string mismatch = FirstMismatch(c.dtype, got.data(), want.data(), c.count);
        if (!mismatch.empty()) {
          EXPECT_EQ(CaseName(isa, c.dtype, ReduceOp::kSum, nsrcs, c.count, false) + ": " +
                        mismatch,
                    "");
        }
      }
    }
  }
}

TEST(Reduce, ReducePublicEntryPointUsesBestInstructionSet) {
  EXPECT_TRUE(reduce_internal::KernelIsaAvailable(reduce_internal::SelectedKernelIsa()));
#if REDUCE_TEST_HAVE_F16C_ORACLE
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) {
    EXPECT_TRUE(reduce_internal::SelectedKernelIsa() == KernelIsa::kAvx2F16c);
  }
#endif
  const std::vector<float> a = {1.5f, -2.0f, 3.25f}, b = {0.5f, 4.0f, -0.25f};
  const void* srcs[] = {a.data(), b.data()};
  std::vector<float> out(3);
  ReduceInto(out.data(), srcs, 2, 3, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_TRUE(out == std::vector<float>({2.0f, 2.0f, 3.0f}));
  ScaleInto(out.data(), out.data(), 3, DataType::kFloat32, 0.25);
  EXPECT_TRUE(out == std::vector<float>({0.5f, 0.5f, 0.75f}));
}

TEST(Reduce, ReduceCombinesStrictlyLeftToRight) {
  // In float32, 1e8 + 1 == 1e8: the order of the additions decides the result.
  EXPECT_EQ(ReduceConstants<float>({1e8f, 1.0f, -1e8f}, DataType::kFloat32, ReduceOp::kSum, 0.0f),
            "");
  EXPECT_EQ(ReduceConstants<float>({1e8f, -1e8f, 1.0f}, DataType::kFloat32, ReduceOp::kSum, 1.0f),
            "");
  // Across passes (more than four sources): ((((((1e8 + 1) + 1) + 1) - 1e8) + 1) + 1) + 1 = 3.
  EXPECT_EQ(ReduceConstants<float>({1e8f, 1, 1, 1, -1e8f, 1, 1, 1}, DataType::kFloat32,
                                   ReduceOp::kSum, 3.0f),
            "");
  EXPECT_EQ(ReduceConstants<double>({1e17, 1, 1, 1, -1e17, 1, 1, 1}, DataType::kFloat64,
                                    ReduceOp::kSum, 3.0),
            "");
}

TEST(Reduce, ReduceIntegersWrapAround) {
  EXPECT_EQ(ReduceConstants<int8_t>({100, 100}, DataType::kInt8, ReduceOp::kSum, int8_t(-56)), "");
  EXPECT_EQ(ReduceConstants<uint8_t>({200, 100}, DataType::kUInt8, ReduceOp::kSum, uint8_t(44)),
            "");
  EXPECT_EQ(ReduceConstants<int16_t>({300, 300}, DataType::kInt16, ReduceOp::kProduct,
                                     int16_t(24464)),  // 90000 mod 65536
            "");
  EXPECT_EQ(ReduceConstants<int16_t>({-32768, -1}, DataType::kInt16, ReduceOp::kProduct,
                                     int16_t(-32768)),
            "");
  EXPECT_EQ(ReduceConstants<int32_t>({std::numeric_limits<int32_t>::max(), 1}, DataType::kInt32,
                                     ReduceOp::kSum, std::numeric_limits<int32_t>::min()),
            "");
  EXPECT_EQ(ReduceConstants<int64_t>({std::numeric_limits<int64_t>::max(), 2}, DataType::kInt64,
                                     ReduceOp::kProduct, int64_t(-2)),
            "");
  EXPECT_EQ(ReduceConstants<int8_t>({-128, 127, 5}, DataType::kInt8, ReduceOp::kMin,
                                    int8_t(-128)),
            "");
  EXPECT_EQ(ReduceConstants<int64_t>({-5, std::numeric_limits<int64_t>::max(), 7},
                                     DataType::kInt64, ReduceOp::kMax,
                                     std::numeric_limits<int64_t>::max()),
            "");
  EXPECT_EQ(ReduceConstants<uint8_t>({3, 250, 9}, DataType::kUInt8, ReduceOp::kMax,
                                     uint8_t(250)),
            "");
}

TEST(Reduce, ReduceFloatMinMaxPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    for (const std::vector<float>& values :
         {std::vector<float>{nan, 1.0f}, {1.0f, nan}, {1.0f, nan, -3.0f}, {-1, 2, 3, 4, nan}}) {
      const void* srcs[8];
      std::vector<std::vector<float>> buffers;
      for (float v : values) buffers.emplace_back(37, v);
      for (size_t k = 0; k < values.size(); ++k) srcs[k] = buffers[k].data();
      for (KernelIsa isa : AvailableIsas()) {
        std::vector<float> out(37);
        reduce_internal::ReduceIntoWithIsa(isa, out.data(), srcs, values.size(), 37,
                                           DataType::kFloat32, op);
        EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float f) { return std::isnan(f); }));
      }
    }
  }
  EXPECT_EQ(ReduceConstants<float>({-1.0f, 2.0f, -7.5f, 3.0f}, DataType::kFloat32, ReduceOp::kMin,
                                   -7.5f),
            "");
  EXPECT_EQ(ReduceConstants<double>({-1.0, 2.0, -7.5, 3.0, 2.5}, DataType::kFloat64,
                                    ReduceOp::kMax, 3.0),
            "");
  // Ties keep the later source, so signed zeros come out deterministically.
  EXPECT_EQ(ReduceConstants<float>({-0.0f, 0.0f}, DataType::kFloat32, ReduceOp::kMin, 0.0f), "");
  EXPECT_EQ(ReduceConstants<uint32_t>({0x00000000, 0x80000000}, DataType::kFloat32,
                                      ReduceOp::kMax, 0x80000000u),
            "");
}

TEST(Reduce, ReduceBoolIsLogicalAndOr) {
  // Any non-zero byte is true; results are 0 or 1.
  EXPECT_EQ(ReduceConstants<uint8_t>({1, 2, 255}, DataType::kBool, ReduceOp::kMin, 1), "");
  EXPECT_EQ(ReduceConstants<uint8_t>({1, 0, 1}, DataType::kBool, ReduceOp::kMin, 0), "");
  EXPECT_EQ(ReduceConstants<uint8_t>({0, 0, 0, 0, 0, 0, 0}, DataType::kBool, ReduceOp::kMax, 0),
            "");
  EXPECT_EQ(ReduceConstants<uint8_t>({0, 0, 0, 0, 0, 0, 7}, DataType::kBool, ReduceOp::kMax, 1),
            "");
  EXPECT_EQ(ReduceConstants<uint8_t>({9, 1}, DataType::kBool, ReduceOp::kMax, 1), "");
}

TEST(Reduce, ReduceHalvesRoundOnceAtTheEnd) {
  // float16: 1 + 2^-11 is a tie between 1.0 (even) and 1 + 2^-10. Rounding after each addition
  // would give 1.0 + 2^-11 -> 1.0, twice; rounding once gives exactly 1 + 2^-10.
  const uint16_t one = 0x3C00, two_pow_minus11 = 0x1000;
  EXPECT_EQ(ReduceConstants<uint16_t>({one, two_pow_minus11}, DataType::kFloat16, ReduceOp::kSum,
                                      0x3C00),
            "");
  EXPECT_EQ(ReduceConstants<uint16_t>({one, two_pow_minus11, two_pow_minus11},
                                      DataType::kFloat16, ReduceOp::kSum, 0x3C01),
            "");
  // Seven times 2^-13 over eight sources (two passes): exact 1 + 0.875 * 2^-10 -> 0x3C01;
  // rounding between the passes would give 0x3C00.
  const uint16_t two_pow_minus13 = 0x0800;
  EXPECT_EQ(ReduceConstants<uint16_t>({one, two_pow_minus13, two_pow_minus13, two_pow_minus13,
                                       two_pow_minus13, two_pow_minus13, two_pow_minus13,
                                       two_pow_minus13},
                                      DataType::kFloat16, ReduceOp::kSum, 0x3C01),
            "");
  // 65504 + 16 = 65520 rounds to infinity; NaN stays NaN.
  EXPECT_EQ(ReduceConstants<uint16_t>({0x7BFF, 0x4C00}, DataType::kFloat16, ReduceOp::kSum,
                                      0x7C00),
            "");
  EXPECT_EQ(ReduceConstants<uint16_t>({0x7E00, one}, DataType::kFloat16, ReduceOp::kSum, 0x7E00),
            "");
  // Subnormal halves add exactly: 2^-24 + 2^-24 = 2^-23.
  EXPECT_EQ(ReduceConstants<uint16_t>({0x0001, 0x0001}, DataType::kFloat16, ReduceOp::kSum,
                                      0x0002),
            "");
  // bfloat16: 1 + 2^-8 is a tie (-> 1.0); twice 2^-8 makes 1 + 2^-7 exactly.
  const uint16_t bf_one = 0x3F80, bf_two_pow_minus8 = 0x3B80;
  EXPECT_EQ(ReduceConstants<uint16_t>({bf_one, bf_two_pow_minus8}, DataType::kBFloat16,
                                      ReduceOp::kSum, 0x3F80),
            "");
  EXPECT_EQ(ReduceConstants<uint16_t>({bf_one, bf_two_pow_minus8, bf_two_pow_minus8},
                                      DataType::kBFloat16, ReduceOp::kSum, 0x3F81),
            "");
  EXPECT_EQ(ReduceConstants<uint16_t>({0x7FC0, bf_one}, DataType::kBFloat16, ReduceOp::kMax,
                                      0x7FC0),
            "");
  EXPECT_EQ(ReduceConstants<uint16_t>({0x4040, 0xC000, 0x3F00}, DataType::kBFloat16,
                                      ReduceOp::kProduct, 0xC040),  // 3 * -2 * 0.5 = -3
            "");
}

TEST(Reduce, ReduceSupportedMatrix) {
  for (DataType dtype : kAllTypes) {
    EXPECT_TRUE(!ReductionSupported(dtype, ReduceOp::kAverage));
    EXPECT_TRUE(!ReductionSupported(dtype, ReduceOp::kAdasum));
    EXPECT_TRUE(ReductionSupported(dtype, ReduceOp::kMin));
    EXPECT_TRUE(ReductionSupported(dtype, ReduceOp::kMax));
    const bool arithmetic = dtype != DataType::kBool;
    EXPECT_EQ(ReductionSupported(dtype, ReduceOp::kSum), arithmetic);
    EXPECT_EQ(ReductionSupported(dtype, ReduceOp::kProduct), arithmetic);
  }
  EXPECT_TRUE(!ReductionSupported(static_cast<DataType>(42), ReduceOp::kSum));
  EXPECT_TRUE(!ReductionSupported(DataType::kFloat32, static_cast<ReduceOp>(17)));
}

TEST(Reduce, ReduceRejectsBadArguments) {
  std::vector<uint8_t> a(8, 1), b(8, 0);
  const void* srcs[] = {a.data(), b.data()};
  std::string message = ErrorMessageOf(
      [&] { ReduceInto(a.data(), srcs, 2, 8, DataType::kBool, ReduceOp::kSum); });
  EXPECT_TRUE(Contains(message, "Sum") && Contains(message, "bool"));
  message = ErrorMessageOf(
      [&] { ReduceInto(a.data(), srcs, 2, 2, DataType::kFloat32, ReduceOp::kAverage); });
  EXPECT_TRUE(Contains(message, "Average") && Contains(message, "float32"));
  message = ErrorMessageOf(
      [&] { ReduceInto(a.data(), srcs, 0, 8, DataType::kUInt8, ReduceOp::kMax); });
  EXPECT_TRUE(Contains(message, "no source"));
  message = ErrorMessageOf(
      [&] { ReduceInto(b.data(), srcs, 2, 8, DataType::kUInt8, ReduceOp::kMax); });
  EXPECT_TRUE(Contains(message, "dst aliases source 1"));
  EXPECT_TRUE(b == std::vector<uint8_t>(8, 0));  // rejected before touching anything
}

// ---- float16 / bfloat16 conversions ---------------------------------------------------------

TEST(Reduce, ReduceFloat16ConversionKnownBitPatterns) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3C00);             // tie -> even (down)
  EXPECT_EQ(FloatToHalf(1.0f + 3 * 0x1p-11f), 0x3C02);         // tie -> even (up)
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);  // just past the tie
  EXPECT_EQ(FloatToHalf(-2.5f), 0xC100);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65519.99f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // tie with 2^16 rounds to infinity
  EXPECT_EQ(FloatToHalf(1e9f), 0x7C00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(0x1p-14f), 0x0400);               // smallest normal
  EXPECT_EQ(FloatToHalf(0x1p-24f), 0x0001);               // smallest subnormal
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);               // tie -> even (zero)
  EXPECT_EQ(FloatToHalf(0x1p-25f + 0x1p-40f), 0x0001);    // just past the tie
  EXPECT_EQ(FloatToHalf(3 * 0x1p-25f), 0x0002);           // 1.5 units -> 2
  EXPECT_EQ(FloatToHalf(1023.5f * 0x1p-24f), 0x0400);     // largest subnormal tie -> normal
  EXPECT_EQ(FloatToHalf(-1023.0f * 0x1p-24f), 0x83FF);
  EXPECT_EQ(FloatToHalf(1e-30f), 0x0000);
  EXPECT_EQ(FloatToHalf(FloatFromBits(0x00000001)), 0x0000);  // float subnormal
  EXPECT_EQ(FloatToHalf(FloatFromBits(0x7FC00000)), 0x7E00);
  EXPECT_EQ(FloatToHalf(FloatFromBits(0xFF800001)), 0xFE00);  // payload only in low bits
  EXPECT_EQ(FloatToHalf(FloatFromBits(0x7FA02000)), 0x7F01);  // signalling: quieted, payload kept

  EXPECT_EQ(Bits(HalfToFloat(0x3C00)), Bits(1.0f));
  EXPECT_EQ(Bits(HalfToFloat(0x3C01)), Bits(1.0f + 0x1p-10f));
  EXPECT_EQ(Bits(HalfToFloat(0x7BFF)), Bits(65504.0f));
  EXPECT_EQ(Bits(HalfToFloat(0x0001)), Bits(0x1p-24f));
  EXPECT_EQ(Bits(HalfToFloat(0x03FF)), Bits(1023.0f * 0x1p-24f));
  EXPECT_EQ(Bits(HalfToFloat(0x8000)), 0x80000000u);
  EXPECT_EQ(Bits(HalfToFloat(0xFC00)), 0xFF800000u);
  EXPECT_EQ(Bits(HalfToFloat(0x7E00)), 0x7FC00000u);
  EXPECT_EQ(Bits(HalfToFloat(0x7C01)), 0x7FC02000u);  // signalling NaN comes back quiet
}

TEST(Reduce, ReduceBFloat16ConversionKnownBitPatterns) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBFloat16(1.0f + 0x1p-8f), 0x3F80);      // tie -> even (down)
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * 0x1p-8f), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(FloatToBFloat16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
  EXPECT_EQ(FloatToBFloat16(FloatFromBits(0x7F7FFFFF)), 0x7F80);  // max float rounds to inf
  EXPECT_EQ(FloatToBFloat16(FloatFromBits(0x00000001)), 0x0000);
  EXPECT_EQ(FloatToBFloat16(FloatFromBits(0x00018000)), 0x0002);  // subnormal tie -> even
  EXPECT_EQ(FloatToBFloat16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(FloatToBFloat16(FloatFromBits(0x7F800001)), 0x7FC0);  // NaN must not become inf
  EXPECT_EQ(FloatToBFloat16(FloatFromBits(0xFFC12345)), 0xFFC1);
  EXPECT_EQ(Bits(BFloat16ToFloat(0x3F80)), Bits(1.0f));
  EXPECT_EQ(Bits(BFloat16ToFloat(0xC0A0)), Bits(-5.0f));
  EXPECT_EQ(Bits(BFloat16ToFloat(0x0001)), 0x00010000u);
}

TEST(Reduce, ReduceHalfConversionsExhaustive) {
  // Every float16: widening matches the textbook formula; narrowing returns the same half.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint32_t exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
    const float widened = HalfToFloat(static_cast<uint16_t>(h));
    if (exponent == 0x1F && mantissa != 0) {
      EXPECT_TRUE(std::isnan(widened) && std::signbit(widened) == ((h & 0x8000) != 0));
      EXPECT_TRUE(IsHalfNaN(FloatToHalf(widened)));
      continue;
    }
    double magnitude = exponent == 0x1F ? HUGE_VAL
                       : exponent == 0  ? std::ldexp(double(mantissa), -24)
                                        : std::ldexp(1.0 + mantissa / 1024.0, int(exponent) - 15);
    const double expected = (h & 0x8000) ? -magnitude : magnitude;
    if (Bits(widened) != Bits(static_cast<float>(expected)) ||
        FloatToHalf(widened) != h) {
      EXPECT_EQ(h, 0xFFFFFFFFu);  // report the first bad half only
      break;
    }
  }
  // Every midpoint between consecutive finite halves: a tie goes to the even neighbour, the
  // floats next to it go to the nearer one, for both signs.
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const double low = HalfToFloat(static_cast<uint16_t>(h));
    const double high = h == 0x7BFF ? 65536.0 : HalfToFloat(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((low + high) / 2);  // exact in float
    const uint16_t even = static_cast<uint16_t>((h & 1) ? h + 1 : h);
    const bool ok = FloatToHalf(mid) == even &&
                    FloatToHalf(std::nextafter(mid, 0.0f)) == h &&
                    FloatToHalf(std::nextafter(mid, 1e30f)) == h + 1 &&
                    FloatToHalf(-mid) == (even | 0x8000);
    if (!ok) {
      EXPECT_EQ(h, 0xFFFFFFFFu);
      break;
    }
  }
  // bfloat16: midpoints are the float bit patterns with 0x8000 in the low half.
  for (uint32_t b = 0; b < 0x7F80; ++b) {
    const uint32_t mid = (b << 16) | 0x8000;
    const uint16_t even = static_cast<uint16_t>((b & 1) ? b + 1 : b);
    const bool ok = Bits(BFloat16ToFloat(static_cast<uint16_t>(b))) == (b << 16) &&
                    FloatToBFloat16(FloatFromBits(b << 16)) == b &&
                    FloatToBFloat16(FloatFromBits(mid)) == even &&
                    FloatToBFloat16(FloatFromBits(mid - 1)) == b &&
                    FloatToBFloat16(FloatFromBits(mid + 1)) == b + 1 &&
                    FloatToBFloat16(FloatFromBits(mid | 0x80000000u)) == (even | 0x8000);
    if (!ok) {
      EXPECT_EQ(b, 0xFFFFFFFFu);
      break;
    }
  }
}

TEST(Reduce, ReduceHalfConversionsMatchF16cHardware) {
#if REDUCE_TEST_HAVE_F16C_ORACLE
  if (!__builtin_cpu_supports("f16c")) return;  // no oracle on this CPU
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (Bits(HalfToFloat(static_cast<uint16_t>(h))) != HardwareHalfToFloatBits(uint16_t(h))) {
      EXPECT_EQ(h, 0xFFFFFFFFu);
      break;
    }
  }
  // Floats across the whole range (a prime stride), then densely around the half subnormals,
  // the normal/subnormal boundary and the overflow threshold.
  auto check_range = [](uint64_t begin, uint64_t end, uint64_t stride) {
    for (uint64_t b = begin; b < end; b += stride) {
      const float f = FloatFromBits(static_cast<uint32_t>(b));
      if (FloatToHalf(f) != HardwareFloatToHalf(f)) return static_cast<int64_t>(b);
    }
    return int64_t(-1);
  };
  EXPECT_EQ(check_range(0, 1ull << 32, 997), -1);
  EXPECT_EQ(check_range(0x33000000, 0x38800000 + 0x10000, 7), -1);
  EXPECT_EQ(check_range(0xB3000000, 0xB8800000 + 0x10000, 7), -1);
  EXPECT_EQ(check_range(0x477F0000, 0x47810000, 1), -1);
#endif
}

TEST(Reduce, ReduceHalfAllBitPatternsOnEveryInstructionSet) {
  // Every float16/bfloat16 bit pattern as an operand of every op and of scaling (whose products
  // land anywhere, subnormals included), on every target; and once more with the flush modes a
  // framework may set (FTZ/DAZ), where the targets must still agree bit for bit.
  const size_t count = 0x10000;
  std::vector<uint16_t> a(count), b(count);
  for (size_t i = 0; i < count; ++i) {
    a[i] = static_cast<uint16_t>(i);
    b[i] = static_cast<uint16_t>((i * 7919 + 12345) & 0xFFFF);
  }
  const uint8_t* bytes[] = {reinterpret_cast<const uint8_t*>(a.data()),
                            reinterpret_cast<const uint8_t*>(b.data())};
  const std::vector<const uint8_t*> sources(bytes, bytes + 2);
  const void* srcs[] = {a.data(), b.data()};
  const std::vector<KernelIsa> isas = AvailableIsas();
  for (bool flush : {false, true}) {
#if REDUCE_TEST_HAVE_F16C_ORACLE
    const unsigned saved_csr = _mm_getcsr();
    if (flush) _mm_setcsr(saved_csr | 0x8040);  // FTZ | DAZ
#else
    if (flush) break;
#endif
    for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
      std::vector<std::vector<uint16_t>> results;
      for (ReduceOp op : kElementwiseOps) {
        const std::vector<uint8_t> want = ReferenceReduce(sources, count, dtype, op);
        for (KernelIsa isa : isas) {
          std::vector<uint16_t> got(count);
          reduce_internal::ReduceIntoWithIsa(isa, got.data(), srcs, 2, count, dtype, op);
          results.push_back(got);
          const std::string mismatch = FirstMismatch(
              dtype, reinterpret_cast<const uint8_t*>(got.data()), want.data(), count);
          if (!flush && !mismatch.empty()) {
            EXPECT_EQ(CaseName(isa, dtype, op, 2, count, false) + ": " + mismatch, "");
          }
        }
      }
      for (double factor : {0.5, 3.0, 1.0 / 3.0, 1e-3, 7e4, -0x1p-10}) {
        const std::vector<uint8_t> want = ReferenceScale(bytes[0], count, dtype, factor);
        for (KernelIsa isa : isas) {
          std::vector<uint16_t> got(count);
          reduce_internal::ScaleIntoWithIsa(isa, got.data(), a.data(), count, dtype, factor);
          results.push_back(got);
          const std::string mismatch = FirstMismatch(
              dtype, reinterpret_cast<const uint8_t*>(got.data()), want.data(), count);
          if (!flush && !mismatch.empty()) {
            std::ostringstream s;
            s << reduce_internal::KernelIsaName(isa) << ' ' << DataTypeName(dtype) << " x"
              << factor << ": " << mismatch;
            EXPECT_EQ(s.str(), "");
          }
        }
      }
      // Results come in groups of isas.size(), one group per op or factor.
      for (size_t r = 0; r < results.size(); ++r) {
        if (results[r] != results[r - r % isas.size()]) {
          std::ostringstream s;
          s << DataTypeName(dtype) << " case " << r / isas.size() << (flush ? " with FTZ/DAZ" : "")
            << ": " << reduce_internal::KernelIsaName(isas[r % isas.size()]) << " differs from "
            << reduce_internal::KernelIsaName(isas[0]);
          EXPECT_EQ(s.str(), "");
        }
      }
    }
#if REDUCE_TEST_HAVE_F16C_ORACLE
    _mm_setcsr(saved_csr);
#endif
  }
}

TEST(Reduce, ReduceNaNResultsAreDeterministic) {
  // Sum/Product: the canonical quiet NaN, whichever NaNs went in (the hardware would pick by
  // operand order). Min/Max: the first NaN operand itself.
  const uint32_t kCanonical = 0x7FC00000;
  EXPECT_EQ(ReduceConstants<uint32_t>({0xFFC00123, 0x7FA00000}, DataType::kFloat32,
                                      ReduceOp::kSum, kCanonical),
            "");
  EXPECT_EQ(ReduceConstants<uint32_t>({0x3F800000, 0xFFC00123, 0x7FA00000, 0x3F800000, 0xFFC00001},
                                      DataType::kFloat32, ReduceOp::kProduct, kCanonical),
            "");
  EXPECT_EQ(ReduceConstants<uint64_t>({0xFFF8000000000123ull, 0x3FF0000000000000ull},
                                      DataType::kFloat64, ReduceOp::kSum,
                                      uint64_t(0x7FF8000000000000ull)),
            "");
  EXPECT_EQ(ReduceConstants<uint16_t>({0xFE01, 0x7D00}, DataType::kFloat16, ReduceOp::kSum,
                                      0x7E00),
            "");
  EXPECT_EQ(ReduceConstants<uint16_t>({0xFFC1, 0x7FA0}, DataType::kBFloat16, ReduceOp::kProduct,
                                      0x7FC0),
            "");
  EXPECT_EQ(ReduceConstants<uint32_t>({0x3F800000, 0xFFC00123, 0x7FC00000}, DataType::kFloat32,
                                      ReduceOp::kMax, 0xFFC00123u),
            "");
  EXPECT_EQ(ReduceConstants<uint16_t>({0x3C00, 0xFE01, 0x7E00}, DataType::kFloat16,
                                      ReduceOp::kMin, 0xFE01),
            "");
}

// ---- ScaleInto ------------------------------------------------------------------------------

TEST(Reduce, ReduceScaleAllTypesMatchReference) {
  std::mt19937_64 rng(4242);
  const double factors[] = {0.25, 1.0 / 3.0, -2.5, 1.0, 0.0, 3.0, 1e-30, 1e30};
  for (KernelIsa isa : AvailableIsas()) {
    for (DataType dtype : kAllTypes) {
      const size_t size = ElementSize(dtype);
      for (double factor : factors) {
        for (size_t count : {0, 1, 3, 17, 67, 1001}) {
          std::vector<uint8_t> src((count + 1) * size);
          FillRandom(dtype, src.data() + size, count, rng, /*specials=*/true);
          const uint8_t* in = src.data() + size;  // misaligned by one element
          const std::vector<uint8_t> want = ReferenceScale(in, count, dtype, factor);
          std::vector<uint8_t> out(count * size + 1);
          reduce_internal::ScaleIntoWithIsa(isa, out.data(), in, count, dtype, factor);
          std::vector<uint8_t> in_place(in, in + count * size);
          reduce_internal::ScaleIntoWithIsa(isa, in_place.data(), in_place.data(), count, dtype,
                                            factor);
          for (const std::vector<uint8_t>* got : {&out, &in_place}) {
            const std::string mismatch = FirstMismatch(dtype, got->data(), want.data(), count);
            if (!mismatch.empty()) {
              std::ostringstream s;
              s << reduce_internal::KernelIsaName(isa) << ' ' << DataTypeName(dtype) << " x"
                << factor << (got == &in_place ? " in place" : "") << ": " << mismatch;
              EXPECT_EQ(s.str(), "");
            }
          }
        }
      }
    }
  }
}

TEST(Reduce, ReduceScaleIntegersTruncateTowardZero) {
  EXPECT_EQ(ScaleConstants<int32_t>({7, -7, 5, -5, 1, -1, 0, 9}, DataType::kInt32, 0.5,
                                    {3, -3, 2, -2, 0, 0, 0, 4}),
            "");
  EXPECT_EQ(ScaleConstants<int8_t>({10, -10, 11, -11}, DataType::kInt8, 0.25, {2, -2, 2, -2}),
            "");
  EXPECT_EQ(ScaleConstants<int16_t>({100, -100, 4}, DataType::kInt16, 1.0 / 3.0, {33, -33, 1}),
            "");
  EXPECT_EQ(ScaleConstants<uint8_t>({255, 7, 1}, DataType::kUInt8, 0.5, {127, 3, 0}), "");
  EXPECT_EQ(ScaleConstants<int64_t>({int64_t(1) << 52, -9, 9}, DataType::kInt64, 0.75,
                                    {int64_t(3) << 50, -6, 6}),
            "");
}

TEST(Reduce, ReduceScaleIntegersSaturateOutOfRange) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(ScaleConstants<int8_t>({100, -100, 1}, DataType::kInt8, 2.0, {127, -128, 2}), "");
  EXPECT_EQ(ScaleConstants<uint8_t>({200, 3, 0}, DataType::kUInt8, -1.0, {0, 0, 0}), "");
  EXPECT_EQ(ScaleConstants<int32_t>({2, -2, 0}, DataType::kInt32, inf,
                                    {std::numeric_limits<int32_t>::max(),
                                     std::numeric_limits<int32_t>::min(), 0}),  // 0*inf = NaN
            "");
  EXPECT_EQ(ScaleConstants<int16_t>({5, -5}, DataType::kInt16, nan, {0, 0}), "");
  EXPECT_EQ(ScaleConstants<int64_t>({int64_t(1) << 62, -(int64_t(1) << 62), 3}, DataType::kInt64,
                                    4.0,
                                    {std::numeric_limits<int64_t>::max(),
                                     std::numeric_limits<int64_t>::min(), 12}),
            "");
}

TEST(Reduce, ReduceScaleFloatsAndCopies) {
  EXPECT_EQ(ScaleConstants<float>({1.0f, -3.0f, 0.1f}, DataType::kFloat32, 0.25,
                                  {0.25f, -0.75f, 0.025f}),
            "");
  // As Horovod scales float32: x * float(factor) in float math, not float(double(x) * factor)
  // (Horovod's own suites compare results bit for bit with that).
  const float third = static_cast<float>(1.0 / 3.0);
  EXPECT_EQ(ScaleConstants<float>({1.0f, 2.0f, 10.0f}, DataType::kFloat32, 1.0 / 3.0,
                                  {1.0f * third, 2.0f * third, 10.0f * third}),
            "");
  EXPECT_EQ(ScaleConstants<uint16_t>({7, 65535, 100}, DataType::kUInt16, 0.5, {3, 32767, 50}), "");
  EXPECT_EQ(ScaleConstants<uint16_t>({0x3C00, 0xC000, 0x7BFF}, DataType::kFloat16, 0.5,
                                     {0x3800, 0xBC00, 0x77FF}),
            "");
  EXPECT_EQ(ScaleConstants<uint16_t>({0x7BFF}, DataType::kFloat16, 2.0, {0x7C00}), "");
  EXPECT_EQ(ScaleConstants<uint16_t>({0x3F80, 0x4040}, DataType::kBFloat16, -0.5,
                                     {0xBF00, 0xBFC0}),
            "");
  // factor 1 is a copy, bit for bit (a signalling NaN is not quieted); bool is never scaled.
  EXPECT_EQ(ScaleConstants<uint32_t>({0x7F800001, 0x3F800000}, DataType::kFloat32, 1.0,
                                     {0x7F800001, 0x3F800000}),
            "");
  EXPECT_EQ(ScaleConstants<uint32_t>({0xFFC00123}, DataType::kFloat32, 0.5, {0x7FC00000}), "");
  EXPECT_EQ(ScaleConstants<uint8_t>({0, 1, 2, 255}, DataType::kBool, 0.5, {0, 1, 2, 255}), "");
  EXPECT_EQ(ScaleConstants<int64_t>({(int64_t(1) << 60) + 1}, DataType::kInt64, 1.0,
                                    {(int64_t(1) << 60) + 1}),
            "");
}
