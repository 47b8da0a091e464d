// The reduction and scaling kernels, written once and compiled once per instruction set: reduce.cc
// includes this file (deliberately without an include guard) inside one namespace per target,
// under a different `#pragma GCC target`, after defining
//   HERRING_KERNEL_VECTOR_BYTES  width of the vectors the loops work on (16: SSE2, 32: AVX2)
//   HERRING_KERNEL_AVX2          1 when AVX2 and F16C intrinsics may be used
//   HERRING_KERNEL_X86           1 when SSE2 intrinsics (streaming stores) may be used.
// The loops use GCC vector extensions rather than relying on the auto-vectoriser, so they are
// vectorised at any optimisation level whatever aliasing the compiler can prove; partial vectors
// at the end go through the same vector code via zero-padded bounce buffers, so there is no
// scalar variant to keep consistent. Every operation is exactly specified (IEEE add/multiply,
// compare-and-select, no FMA contraction, NaN results made canonical where the hardware leaves
// the payload to operand order), so each target produces the same bits; the tests check that.
//
// Everything here must stay internal to reduce.cc (it is included inside an anonymous
// namespace): code compiled for AVX2 must never be picked by the linker for a baseline caller.

constexpr size_t kVectorBytes = HERRING_KERNEL_VECTOR_BYTES;

template <typename T>
struct VecOf {
  typedef T type __attribute__((vector_size(kVectorBytes)));
};
template <typename T>
using Vec = typename VecOf<T>::type;
template <typename T>
constexpr size_t kLanes = kVectorBytes / sizeof(T);
// The kernels move a pair of vectors (2 * kLanes elements) per step.
template <typename T>
constexpr size_t kPairLanes = 2 * kLanes<T>;

// A vector of N elements that may be wider than a register; the compiler splits it.
template <typename T, size_t N>
struct WideVecOf {
  typedef T type __attribute__((vector_size(N * sizeof(T))));
};
template <typename T, size_t N>
using WideVec = typename WideVecOf<T, N>::type;

template <typename V, typename E>
inline V LoadUnaligned(const E* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename V, typename E>
inline void StoreUnaligned(E* p, V v) {
  std::memcpy(p, &v, sizeof v);
}

// Stores one vector; kStream selects a non-temporal store (p must then be aligned to the vector
// size), which skips the read-for-ownership of the destination line.
template <bool kStream, typename V, typename E>
inline void StoreVector(E* p, V v) {
#if HERRING_KERNEL_X86
  if constexpr (kStream) {
    if constexpr (sizeof(V) == 32) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(p), reinterpret_cast<__m256i>(v));
    } else if constexpr (sizeof(V) == 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(p), reinterpret_cast<__m128i>(v));
    } else {
      static_assert(sizeof(V) == 8, "no streaming store of this width");
      long long bits;
      std::memcpy(&bits, &v, sizeof bits);
      _mm_stream_si64(reinterpret_cast<long long*>(p), bits);
    }
    return;
  }
#endif
  StoreUnaligned(p, v);
}

// Orders the streaming stores before anything the caller does next (e.g. publishing the buffer
// to another process): they are weakly ordered.
inline void StreamingStoreFence() {
#if HERRING_KERNEL_X86
  _mm_sfence();
#endif
}

// ---- Codecs: how stored elements become values to compute with (Compute) and back. ----------
//
// LoadPair fills two vectors with 2 * kLanes<Compute> elements, StorePair writes them back. A
// codec may put the elements into the lanes in any order (see the AVX2 bfloat16 codec) as long
// as StorePair undoes it and codecs used together in one pass agree: the operations are
// elementwise, and a running value kept in a float block between passes is stored and reloaded
// in the same order. kPaddedToPairs says the buffer behind the codec extends to whole pairs (the
// accumulator blocks), so a partial pair at the end needs no bounce buffer.

// LoadPair/StorePair for codecs whose lanes hold consecutive elements.
template <class Codec, typename Stored, typename Compute>
struct ConsecutivePairs {
  static constexpr bool kPaddedToPairs = false;
  static void LoadPair(const Stored* p, Vec<Compute>& low, Vec<Compute>& high) {
    low = Codec::LoadVec(p);
    high = Codec::LoadVec(p + kLanes<Compute>);
  }
  template <bool kStream = false>
  static void StorePair(Stored* p, Vec<Compute> low, Vec<Compute> high) {
    Codec::template StoreVec<kStream>(p, low);
    Codec::template StoreVec<kStream>(p + kLanes<Compute>, high);
  }
};

template <typename T>
struct NativeCodec : ConsecutivePairs<NativeCodec<T>, T, T> {
  using Stored = T;
  using Compute = T;
  static Vec<T> LoadVec(const T* p) { return LoadUnaligned<Vec<T>>(p); }
  template <bool kStream = false>
  static void StoreVec(T* p, Vec<T> v) {
    StoreVector<kStream>(p, v);
  }
};

// The running value of a multi-pass reduction, in a block on the stack.
template <typename T>
struct AccumulatorCodec : NativeCodec<T> {
  static constexpr bool kPaddedToPairs = true;
};

using FloatBits = WideVec<uint32_t, kLanes<float>>;
using SignedFloatBits = WideVec<int32_t, kLanes<float>>;
using HalfBits = WideVec<uint16_t, kLanes<float>>;

#if !HERRING_KERNEL_AVX2
// Branch-free float16 -> float32 on integer vectors, bit-identical to vcvtph2ps and to
// half_float::HalfBitsToFloat (the tests compare all 65536 inputs across targets).
__attribute__((always_inline)) inline Vec<float> WidenHalves(HalfBits halves) {
  const SignedFloatBits h = __builtin_convertvector(halves, SignedFloatBits);
  const SignedFloatBits sign = (h & 0x8000) << 16;
  const SignedFloatBits magnitude = h & 0x7FFF;
  const SignedFloatBits exponent = magnitude >> 10;
  const SignedFloatBits normal = (magnitude << 13) + (112 << 23);
  // A subnormal half is mantissa * 2^-24: exact in float32 and, being >= 2^-24, a normal float,
  // so neither FTZ nor DAZ can touch it.
  const Vec<float> subnormal_value = __builtin_convertvector(magnitude, Vec<float>) * 0x1p-24f;
  const SignedFloatBits subnormal = reinterpret_cast<SignedFloatBits>(subnormal_value);
  const SignedFloatBits quiet = (magnitude & 0x3FF) != 0 ? 0x400000 : 0;
  const SignedFloatBits inf_or_nan = (magnitude << 13) | 0x7F800000 | quiet;
  const SignedFloatBits value =
      exponent == 0 ? subnormal : (exponent == 0x1F ? inf_or_nan : normal);
  return reinterpret_cast<Vec<float>>(sign | value);
}

// Branch-free float32 -> float16, round to nearest even, bit-identical to vcvtps2ph and to
// half_float::FloatToHalfBits under the default rounding mode.
__attribute__((always_inline)) inline HalfBits NarrowToHalves(Vec<float> v) {
  const SignedFloatBits bits = reinterpret_cast<SignedFloatBits>(v);
  const SignedFloatBits sign = (bits >> 16) & 0x8000;
  const SignedFloatBits magnitude = bits & 0x7FFFFFFF;
  const SignedFloatBits nan = 0x7E00 | ((magnitude >> 13) & 0x3FF);
  const SignedFloatBits rebiased = magnitude - (112 << 23);
  const SignedFloatBits normal = (rebiased + 0xFFF + ((rebiased >> 13) & 1)) >> 13;
  // Adding 0.5 leaves |v| rounded (to nearest even) to a multiple of 2^-24, the half subnormal
  // unit, in the low mantissa bits.
  const Vec<float> shifted = reinterpret_cast<Vec<float>>(magnitude) + 0.5f;
  const SignedFloatBits subnormal = reinterpret_cast<SignedFloatBits>(shifted) - 0x3F000000;
  const SignedFloatBits value =
      magnitude > 0x7F800000
          ? nan
          : (magnitude >= 0x477FF000 ? 0x7C00 : (magnitude >= 0x38800000 ? normal : subnormal));
  return __builtin_convertvector(sign | value, HalfBits);
}
#endif

struct Float16Codec : ConsecutivePairs<Float16Codec, uint16_t, float> {
  using Stored = uint16_t;
  using Compute = float;
#if HERRING_KERNEL_AVX2
  static_assert(kVectorBytes == 32, "the F16C path converts 8 halves at a time");
  static Vec<float> LoadVec(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  template <bool kStream = false>
  static void StoreVec(uint16_t* p, Vec<float> v) {
    StoreVector<kStream>(p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
#else
  __attribute__((always_inline)) static Vec<float> LoadVec(const uint16_t* p) {
    return WidenHalves(LoadUnaligned<HalfBits>(p));
  }
  template <bool kStream = false>
  __attribute__((always_inline)) static void StoreVec(uint16_t* p, Vec<float> v) {
    StoreVector<kStream>(p, NarrowToHalves(v));
  }
#endif
};

// bfloat16 is the top half of a float32: widening puts the bits in the top half, narrowing
// rounds to nearest even with integer adds (NaNs are kept NaN by forcing the quiet bit).
struct BFloat16Codec {
  using Stored = uint16_t;
  using Compute = float;
  static constexpr bool kPaddedToPairs = false;

  // The rounded bfloat16 in the low half of each 32-bit lane.
  __attribute__((always_inline)) static FloatBits RoundToBFloat16(Vec<float> v) {
    const FloatBits bits = reinterpret_cast<FloatBits>(v);
    const FloatBits rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    const FloatBits quiet_nan = (bits >> 16) | 0x40u;
    // The magnitude fits in 31 bits, so a signed compare (which the hardware has) is exact.
    const SignedFloatBits magnitude = reinterpret_cast<SignedFloatBits>(bits) & 0x7FFFFFFF;
    return magnitude > 0x7F800000 ? quiet_nan : rounded;
  }
#if HERRING_KERNEL_AVX2
  // Interleaving zeros below the elements widens 16 of them with two in-lane unpacks, which
  // leaves elements 0-3 and 8-11 in `low`, 4-7 and 12-15 in `high`; StorePair's in-lane pack
  // puts them back in order. Cheaper than zero-extending and shifting each half.
  static void LoadPair(const uint16_t* p, Vec<float>& low, Vec<float>& high) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i zero = _mm256_setzero_si256();
    low = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, raw));
    high = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, raw));
  }
  template <bool kStream = false>
  static void StorePair(uint16_t* p, Vec<float> low, Vec<float> high) {
    // Every lane is <= 0xFFFF, so the saturating pack is a plain narrowing.
    const __m256i packed =
        _mm256_packus_epi32(reinterpret_cast<__m256i>(RoundToBFloat16(low)),
                            reinterpret_cast<__m256i>(RoundToBFloat16(high)));
    StoreVector<kStream>(p, packed);
  }
#else
  __attribute__((always_inline)) static Vec<float> Widen(HalfBits halves) {
    return reinterpret_cast<Vec<float>>(__builtin_convertvector(halves, FloatBits) << 16);
  }
  static void LoadPair(const uint16_t* p, Vec<float>& low, Vec<float>& high) {
    low = Widen(LoadUnaligned<HalfBits>(p));
    high = Widen(LoadUnaligned<HalfBits>(p + kLanes<float>));
  }
  template <bool kStream = false>
  static void StorePair(uint16_t* p, Vec<float> low, Vec<float> high) {
    StoreVector<kStream>(p, __builtin_convertvector(RoundToBFloat16(low), HalfBits));
    StoreVector<kStream>(p + kLanes<float>,
                         __builtin_convertvector(RoundToBFloat16(high), HalfBits));
  }
#endif
};

// NaN results of floating Sum, Product and scaling are written as the canonical quiet NaN.
template <typename V>
inline V CanonicalNaN(V v) {
  using F = std::remove_reference_t<decltype(v[0])>;
  return v != v ? V{} + std::numeric_limits<F>::quiet_NaN() : v;
}

// The codec that writes dst: Codec, canonicalising NaNs first when kCanonical.
template <class Codec, bool kCanonical>
struct FinalCodec : Codec {
  using Stored = typename Codec::Stored;
  using Compute = typename Codec::Compute;
  template <bool kStream = false>
  static void StorePair(Stored* p, Vec<Compute> low, Vec<Compute> high) {
    if constexpr (kCanonical) {
      low = CanonicalNaN(low);
      high = CanonicalNaN(high);
    }
    Codec::template StorePair<kStream>(p, low, high);
  }
};

// ---- Operators (elementwise on vectors) -----------------------------------------------------

// Integer Sum and Product run on the unsigned type: two's complement wraps like unsigned
// arithmetic, without the undefined behaviour of signed overflow.
//
// Floating Sum and Product give NaN results as the canonical quiet NaN (kCanonicalNaN): with two
// NaN operands x86 returns the first one, but the compiler may swap the operands of a
// commutative operation, so the payload and sign would otherwise depend on the target.
template <typename T>
struct SumOp {
  static constexpr bool kCanonicalNaN = std::is_floating_point_v<T>;
  template <typename V>
  static V Apply(V a, V b) {
    return a + b;
  }
};

template <typename T>
struct ProductOp {
  static constexpr bool kCanonicalNaN = std::is_floating_point_v<T>;
  template <typename V>
  static V Apply(V a, V b) {
    return a * b;
  }
};

// Floating Min/Max propagate NaN (like torch.minimum/maximum): the result is `a` when it is NaN
// or wins strictly, else `b`. On ties (e.g. -0.0 vs +0.0) the later source wins.
template <typename T>
struct MinOp {
  static constexpr bool kCanonicalNaN = false;  // a select: which NaN comes out is well defined
  template <typename V>
  static V Apply(V a, V b) {
    if constexpr (std::is_floating_point_v<T>) {
      return ((a < b) | (a != a)) ? a : b;
    } else {
      return a < b ? a : b;
    }
  }
};

template <typename T>
struct MaxOp {
  static constexpr bool kCanonicalNaN = false;
  template <typename V>
  static V Apply(V a, V b) {
    if constexpr (std::is_floating_point_v<T>) {
      return ((a > b) | (a != a)) ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
};

// bool (one byte, any non-zero is true); results are normalised to 0/1.
struct LogicalAndOp {
  static constexpr bool kCanonicalNaN = false;
  template <typename V>
  static V Apply(V a, V b) {
    return reinterpret_cast<V>((a != 0) & (b != 0)) & 1;
  }
};

struct LogicalOrOp {
  static constexpr bool kCanonicalNaN = false;
  template <typename V>
  static V Apply(V a, V b) {
    return reinterpret_cast<V>((a != 0) | (b != 0)) & 1;
  }
};

// ---- ReduceInto ------------------------------------------------------------------------------

// A pass over one block folds up to this many further sources into the running value: enough to
// amortise re-reading the (cache-resident) accumulator, few enough to keep the hardware
// prefetchers tracking every stream.
constexpr size_t kMaxSourcesPerPass = 3;
// Bytes of running values per block when several passes are needed: the block stays in L1
// between passes while the sources stream through once.
constexpr size_t kBlockBytes = 16 * 1024;
// Destinations at least this large are written with streaming stores (when dst is not a source):
// they would not stay in the last-level cache anyway, and skipping the read-for-ownership of
// every destination line saves a sixth of the memory traffic of a 4-source reduction. Smaller
// results stay cached for whoever sends them on next.
constexpr size_t kStreamingMinBytes = 8 << 20;

// out[i, i + pair) = op(...op(op(in, src[0]), src[1])..., src[K-1]) over one pair of vectors.
template <class Op, class InCodec, class SrcCodec, class OutCodec, size_t K, bool kStream>
inline void CombinePair(typename OutCodec::Stored* out, const typename InCodec::Stored* in,
                        const typename SrcCodec::Stored* const* src, size_t i) {
  using Compute = typename SrcCodec::Compute;
  Vec<Compute> acc0, acc1;
  InCodec::LoadPair(in + i, acc0, acc1);
  for (size_t k = 0; k < K; ++k) {
    Vec<Compute> next0, next1;
    SrcCodec::LoadPair(src[k] + i, next0, next1);
    acc0 = Op::Apply(acc0, next0);
    acc1 = Op::Apply(acc1, next1);
  }
  OutCodec::template StorePair<kStream>(out + i, acc0, acc1);
}

// out[i] = op(...op(op(in[i], extra[0][i]), extra[1][i])..., extra[K-1][i]) for i < n. `in` may
// be `out`: each element is read before it is written. With kStream, out must be aligned to
// kVectorBytes.
template <class Op, class InCodec, class SrcCodec, class OutCodec, size_t K, bool kStream>
void CombineRange(typename OutCodec::Stored* out, const typename InCodec::Stored* in,
                  const typename SrcCodec::Stored* const* extra, size_t n) {
  using InStored = typename InCodec::Stored;
  using SrcStored = typename SrcCodec::Stored;
  using OutStored = typename OutCodec::Stored;
  constexpr size_t kPair = kPairLanes<typename SrcCodec::Compute>;
  const SrcStored* src[K];
  for (size_t k = 0; k < K; ++k) src[k] = extra[k];
  size_t i = 0;
  for (; i + kPair <= n; i += kPair) {
    CombinePair<Op, InCodec, SrcCodec, OutCodec, K, kStream>(out, in, src, i);
  }
  if (i == n) return;

  // The last partial pair goes through zero-padded copies (accumulator blocks are padded to
  // whole pairs already and are used in place).
  const size_t rest = n - i;
  InStored in_tail[kPair] = {};
  const InStored* in_pair = in + i;
  if constexpr (!InCodec::kPaddedToPairs) {
    std::memcpy(in_tail, in + i, rest * sizeof(InStored));
    in_pair = in_tail;
  }
  SrcStored src_tail[K][kPair] = {};
  const SrcStored* src_pair[K];
  for (size_t k = 0; k < K; ++k) {
    std::memcpy(src_tail[k], src[k] + i, rest * sizeof(SrcStored));
    src_pair[k] = src_tail[k];
  }
  if constexpr (OutCodec::kPaddedToPairs) {
    CombinePair<Op, InCodec, SrcCodec, OutCodec, K, false>(out + i, in_pair, src_pair, 0);
  } else {
    OutStored out_tail[kPair];
    CombinePair<Op, InCodec, SrcCodec, OutCodec, K, false>(out_tail, in_pair, src_pair, 0);
    std::memcpy(out + i, out_tail, rest * sizeof(OutStored));
  }
}

// A pass that may be the last: 1..kMaxSourcesPerPass extra sources.
template <class Op, class InCodec, class SrcCodec, class OutCodec, bool kStream>
void CombineLastPass(typename OutCodec::Stored* out, const typename InCodec::Stored* in,
                     const typename SrcCodec::Stored* const* extra, size_t nextra, size_t n) {
  static_assert(kMaxSourcesPerPass == 3, "instantiate CombineRange for 1..3 extra sources");
  switch (nextra) {
    case 1: return CombineRange<Op, InCodec, SrcCodec, OutCodec, 1, kStream>(out, in, extra, n);
    case 2: return CombineRange<Op, InCodec, SrcCodec, OutCodec, 2, kStream>(out, in, extra, n);
    default: return CombineRange<Op, InCodec, SrcCodec, OutCodec, 3, kStream>(out, in, extra, n);
  }
}

// Reduces elements [begin, end) of nsrcs >= 2 sources, block by block. With at most
// 1 + kMaxSourcesPerPass sources one pass goes straight from the sources to dst; otherwise the
// running value lives in a float/double/integer block on the stack (which also keeps float16 and
// bfloat16 unrounded until the end) and only the last pass writes dst, so dst may alias srcs[0].
template <class Op, class Codec, bool kStream>
void ReduceRange(void* dst, const void* const* srcs, size_t nsrcs, size_t begin, size_t end) {
  using Stored = typename Codec::Stored;
  using Compute = typename Codec::Compute;
  using AccCodec = AccumulatorCodec<Compute>;
  using OutCodec = FinalCodec<Codec, Op::kCanonicalNaN>;
  constexpr size_t kBlock = kBlockBytes / sizeof(Compute);
  static_assert(kBlock % kPairLanes<Compute> == 0, "accumulator blocks hold whole pairs");
  static_assert(kBlock * sizeof(Stored) % kVectorBytes == 0, "blocks keep dst alignment");
  alignas(kVectorBytes) Compute acc[kBlock];

  Stored* const out = static_cast<Stored*>(dst);
  const Stored* extra[kMaxSourcesPerPass];
  for (size_t block = begin; block < end; block += kBlock) {
    const size_t n = std::min(kBlock, end - block);
    const Stored* const first_src = static_cast<const Stored*>(srcs[0]) + block;
    size_t next = 1;
    while (next < nsrcs) {
      const bool first = next == 1;
      const size_t take = std::min(kMaxSourcesPerPass, nsrcs - next);
      for (size_t k = 0; k < take; ++k) {
        extra[k] = static_cast<const Stored*>(srcs[next + k]) + block;
      }
      next += take;
      constexpr size_t kFull = kMaxSourcesPerPass;  // every pass but the last takes this many
      if (next == nsrcs) {
        if (first) {
          CombineLastPass<Op, Codec, Codec, OutCodec, kStream>(out + block, first_src, extra,
                                                               take, n);
        } else {
          CombineLastPass<Op, AccCodec, Codec, OutCodec, kStream>(out + block, acc, extra, take,
                                                                  n);
        }
      } else if (first) {
        CombineRange<Op, Codec, Codec, AccCodec, kFull, false>(acc, first_src, extra, n);
      } else {
        CombineRange<Op, AccCodec, Codec, AccCodec, kFull, false>(acc, acc, extra, n);
      }
    }
  }
}

template <class Op, class Codec>
void ReduceTyped(void* dst, const void* const* srcs, size_t nsrcs, size_t count) {
  using Stored = typename Codec::Stored;
  // Only where it matters (floating types, AVX2 machines): it doubles the code of a kernel.
  if constexpr (HERRING_KERNEL_AVX2 && std::is_floating_point_v<typename Codec::Compute>) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(dst);
    if (dst != srcs[0] && count * sizeof(Stored) >= kStreamingMinBytes &&
        address % sizeof(Stored) == 0) {
      // Streaming stores need aligned vectors: the unaligned head gets ordinary stores.
      const size_t head = (kVectorBytes - address % kVectorBytes) % kVectorBytes / sizeof(Stored);
      ReduceRange<Op, Codec, false>(dst, srcs, nsrcs, 0, head);
      ReduceRange<Op, Codec, true>(dst, srcs, nsrcs, head, count);
      StreamingStoreFence();
      return;
    }
  }
  ReduceRange<Op, Codec, false>(dst, srcs, nsrcs, 0, count);
}

template <typename T>
void ReduceInteger(ReduceOp op, void* dst, const void* const* srcs, size_t nsrcs, size_t count) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOp::kSum: return ReduceTyped<SumOp<U>, NativeCodec<U>>(dst, srcs, nsrcs, count);
    case ReduceOp::kProduct:
      return ReduceTyped<ProductOp<U>, NativeCodec<U>>(dst, srcs, nsrcs, count);
    case ReduceOp::kMin: return ReduceTyped<MinOp<T>, NativeCodec<T>>(dst, srcs, nsrcs, count);
    case ReduceOp::kMax: return ReduceTyped<MaxOp<T>, NativeCodec<T>>(dst, srcs, nsrcs, count);
    default: return;  // rejected by the caller
  }
}

template <class Codec>
void ReduceFloating(ReduceOp op, void* dst, const void* const* srcs, size_t nsrcs,
                    size_t count) {
  using C = typename Codec::Compute;
  switch (op) {
    case ReduceOp::kSum: return ReduceTyped<SumOp<C>, Codec>(dst, srcs, nsrcs, count);
    case ReduceOp::kProduct: return ReduceTyped<ProductOp<C>, Codec>(dst, srcs, nsrcs, count);
    case ReduceOp::kMin: return ReduceTyped<MinOp<C>, Codec>(dst, srcs, nsrcs, count);
    case ReduceOp::kMax: return ReduceTyped<MaxOp<C>, Codec>(dst, srcs, nsrcs, count);
    default: return;  // rejected by the caller
  }
}

// nsrcs >= 2, count >= 1, (dtype, op) supported: the caller checked.
void Reduce(void* dst, const void* const* srcs, size_t nsrcs, size_t count, DataType dtype,
            ReduceOp op) {
  switch (dtype) {
    case DataType::kUInt8: return ReduceInteger<uint8_t>(op, dst, srcs, nsrcs, count);
    case DataType::kInt8: return ReduceInteger<int8_t>(op, dst, srcs, nsrcs, count);
    case DataType::kInt16: return ReduceInteger<int16_t>(op, dst, srcs, nsrcs, count);
    case DataType::kUInt16: return ReduceInteger<uint16_t>(op, dst, srcs, nsrcs, count);
    case DataType::kInt32: return ReduceInteger<int32_t>(op, dst, srcs, nsrcs, count);
    case DataType::kInt64: return ReduceInteger<int64_t>(op, dst, srcs, nsrcs, count);
    case DataType::kFloat16: return ReduceFloating<Float16Codec>(op, dst, srcs, nsrcs, count);
    case DataType::kBFloat16: return ReduceFloating<BFloat16Codec>(op, dst, srcs, nsrcs, count);
    case DataType::kFloat32:
      return ReduceFloating<NativeCodec<float>>(op, dst, srcs, nsrcs, count);
    case DataType::kFloat64:
      return ReduceFloating<NativeCodec<double>>(op, dst, srcs, nsrcs, count);
    case DataType::kBool:
      if (op == ReduceOp::kMin) {
        return ReduceTyped<LogicalAndOp, NativeCodec<uint8_t>>(dst, srcs, nsrcs, count);
      }
      if (op == ReduceOp::kMax) {
        return ReduceTyped<LogicalOrOp, NativeCodec<uint8_t>>(dst, srcs, nsrcs, count);
      }
      return;
  }
}

// ---- ScaleInto -------------------------------------------------------------------------------

// Floating types: x * factor in the type's compute precision, as Horovod scales: float32 math
// with the factor rounded to float32 for float16, bfloat16 and float32, double math for float64
// (Horovod's own suites compare bit for bit). NaN results are canonical, as for Sum.
template <class Codec>
void ScaleFloating(void* dst, const void* src, size_t count, double factor) {
  using Stored = typename Codec::Stored;
  using Compute = typename Codec::Compute;
  constexpr size_t kPair = kPairLanes<Compute>;
  const Compute scale = static_cast<Compute>(factor);
  auto scale_pair = [scale](const Stored* in, Stored* out) {
    Vec<Compute> low, high;
    Codec::LoadPair(in, low, high);
    Codec::StorePair(out, CanonicalNaN(low * scale), CanonicalNaN(high * scale));
  };
  Stored* out = static_cast<Stored*>(dst);
  const Stored* in = static_cast<const Stored*>(src);
  size_t i = 0;
  for (; i + kPair <= count; i += kPair) scale_pair(in + i, out + i);
  if (i == count) return;
  Stored in_tail[kPair] = {};
  Stored out_tail[kPair];
  std::memcpy(in_tail, in + i, (count - i) * sizeof(Stored));
  scale_pair(in_tail, out_tail);
  std::memcpy(out + i, out_tail, (count - i) * sizeof(Stored));
}

// Integers: double(x) * factor truncated toward zero (saturating). Clamping to [min, max] before
// the conversion gives the same results as TruncateSaturating (kernels/saturate.h), vectorised.
template <typename T>
void ScaleInteger(void* dst, const void* src, size_t count, double factor) {
  T* out = static_cast<T*>(dst);
  const T* in = static_cast<const T*>(src);
  size_t i = 0;
  if constexpr (sizeof(T) < 8) {  // every value of T, and its bounds, are exact in double
    constexpr size_t kStep = 2 * kLanes<double>;
    using Doubles = WideVec<double, kStep>;
    using Values = WideVec<T, kStep>;
    const Doubles zero = {};
    const Doubles lowest = zero + static_cast<double>(std::numeric_limits<T>::min());
    const Doubles highest = zero + static_cast<double>(std::numeric_limits<T>::max());
    for (; i + kStep <= count; i += kStep) {
      Doubles v = __builtin_convertvector(LoadUnaligned<Values>(in + i), Doubles) * factor;
      v = v != v ? zero : v;
      v = v < lowest ? lowest : v;
      v = v > highest ? highest : v;
      StoreUnaligned(out + i, __builtin_convertvector(v, Values));
    }
  }
  for (; i < count; ++i) out[i] = TruncateSaturating<T>(static_cast<double>(in[i]) * factor);
}

// count >= 1, factor != 1, dtype is not bool: the caller checked.
void Scale(void* dst, const void* src, size_t count, DataType dtype, double factor) {
  switch (dtype) {
    case DataType::kUInt8: return ScaleInteger<uint8_t>(dst, src, count, factor);
    case DataType::kInt8: return ScaleInteger<int8_t>(dst, src, count, factor);
    case DataType::kInt16: return ScaleInteger<int16_t>(dst, src, count, factor);
    case DataType::kUInt16: return ScaleInteger<uint16_t>(dst, src, count, factor);
    case DataType::kInt32: return ScaleInteger<int32_t>(dst, src, count, factor);
    case DataType::kInt64: return ScaleInteger<int64_t>(dst, src, count, factor);
    case DataType::kFloat16: return ScaleFloating<Float16Codec>(dst, src, count, factor);
    case DataType::kBFloat16: return ScaleFloating<BFloat16Codec>(dst, src, count, factor);
    case DataType::kFloat32: return ScaleFloating<NativeCodec<float>>(dst, src, count, factor);
    case DataType::kFloat64: return ScaleFloating<NativeCodec<double>>(dst, src, count, factor);
    case DataType::kBool: return;
  }
}
