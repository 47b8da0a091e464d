// Reduction and scaling kernels. The loops live in reduce_kernels_impl.h and are compiled twice
// here: once for the x86-64 baseline (SSE2) and once, under `#pragma GCC target`, for AVX2 +
// F16C; the public entry points pick the best set the CPU supports (decided once). A whole-file
// pragma region rather than target_clones: clones would not reach the templates the entry points
// call, nor allow F16C intrinsics inside them. Nothing else in the engine looks at element values.
#include "kernels/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "common/status.h"
#include "kernels/half_float.h"
#include "kernels/reduce_internal.h"
#include "kernels/saturate.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define HERRING_HAVE_AVX2_KERNELS 1
#define HERRING_KERNEL_X86 1
#include <immintrin.h>
#else
#define HERRING_HAVE_AVX2_KERNELS 0
#define HERRING_KERNEL_X86 0
#endif

namespace herring {
namespace {

namespace portable {
#define HERRING_KERNEL_VECTOR_BYTES 16
#define HERRING_KERNEL_AVX2 0
#include "kernels/reduce_kernels_impl.h"
#undef HERRING_KERNEL_AVX2
#undef HERRING_KERNEL_VECTOR_BYTES
}  // namespace portable

#if HERRING_HAVE_AVX2_KERNELS
// FMA is deliberately not enabled: no kernel multiplies and adds, and contraction would be the
// one way for the two targets to round differently.
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
namespace avx2 {
#define HERRING_KERNEL_VECTOR_BYTES 32
#define HERRING_KERNEL_AVX2 1
#include "kernels/reduce_kernels_impl.h"
#undef HERRING_KERNEL_AVX2
#undef HERRING_KERNEL_VECTOR_BYTES
}  // namespace avx2
#pragma GCC pop_options
#endif

bool CpuHasAvx2F16c() {
#if HERRING_HAVE_AVX2_KERNELS
  // libgcc's feature bits also require the OS to save the YMM state (XGETBV).
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

void CheckAvailable(reduce_internal::KernelIsa isa) {
  if (!reduce_internal::KernelIsaAvailable(isa)) {
    throw Error(Status::InvalidArgument(std::string("reduction kernels for ") +
                                        reduce_internal::KernelIsaName(isa) +
                                        " are not available on this CPU"));
  }
}

void CheckReduceArguments(void* dst, const void* const* srcs, size_t nsrcs, DataType dtype,
                          ReduceOp op) {
  if (!ReductionSupported(dtype, op)) {
    throw Error(Status::InvalidArgument(std::string("ReduceInto: reduce op ") + ReduceOpName(op) +
                                        " is not supported for dtype " + DataTypeName(dtype)));
  }
  if (nsrcs == 0) throw Error(Status::InvalidArgument("ReduceInto: no source buffers"));
  for (size_t k = 1; k < nsrcs; ++k) {
    if (srcs[k] == dst) {
      throw Error(Status::Internal("ReduceInto: dst aliases source " + std::to_string(k) +
                                   "; only source 0 may alias dst"));
    }
  }
}

}  // namespace

namespace reduce_internal {

const char* KernelIsaName(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kPortable: return "portable";
    case KernelIsa::kAvx2F16c: return "avx2+f16c";
  }
  return "invalid";
}

bool KernelIsaAvailable(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kPortable: return true;
    case KernelIsa::kAvx2F16c: {
      static const bool available = CpuHasAvx2F16c();
      return available;
    }
  }
  return false;
}

KernelIsa SelectedKernelIsa() {
  return KernelIsaAvailable(KernelIsa::kAvx2F16c) ? KernelIsa::kAvx2F16c : KernelIsa::kPortable;
}

void ReduceIntoWithIsa(KernelIsa isa, void* dst, const void* const* srcs, size_t nsrcs,
                       size_t count, DataType dtype, ReduceOp op) {
  CheckAvailable(isa);
  CheckReduceArguments(dst, srcs, nsrcs, dtype, op);
  if (count == 0) return;
  if (nsrcs == 1) {  // the reduction of one buffer is that buffer, bit for bit
    if (dst != srcs[0]) std::memmove(dst, srcs[0], count * ElementSize(dtype));
    return;
  }
#if HERRING_HAVE_AVX2_KERNELS
  if (isa == KernelIsa::kAvx2F16c) return avx2::Reduce(dst, srcs, nsrcs, count, dtype, op);
#endif
  portable::Reduce(dst, srcs, nsrcs, count, dtype, op);
}

void ScaleIntoWithIsa(KernelIsa isa, void* dst, const void* src, size_t count, DataType dtype,
                      double factor) {
  CheckAvailable(isa);
  if (!IsValidDataType(static_cast<int>(dtype))) {
    throw Error(Status::InvalidArgument("ScaleInto: invalid dtype " +
                                        std::to_string(static_cast<int>(dtype))));
  }
  if (count == 0) return;
  if (factor == 1.0 || dtype == DataType::kBool) {
    if (dst != src) std::memmove(dst, src, count * ElementSize(dtype));
    return;
  }
#if HERRING_HAVE_AVX2_KERNELS
  if (isa == KernelIsa::kAvx2F16c) return avx2::Scale(dst, src, count, dtype, factor);
#endif
  portable::Scale(dst, src, count, dtype, factor);
}

}  // namespace reduce_internal

void ReduceInto(void* dst, const void* const* srcs, size_t nsrcs, size_t count, DataType dtype,
                ReduceOp op) {
  reduce_internal::ReduceIntoWithIsa(reduce_internal::SelectedKernelIsa(), dst, srcs, nsrcs,
                                     count, dtype, op);
}

void ScaleInto(void* dst, const void* src, size_t count, DataType dtype, double factor) {
  reduce_internal::ScaleIntoWithIsa(reduce_internal::SelectedKernelIsa(), dst, src, count, dtype,
                                    factor);
}

bool ReductionSupported(DataType dtype, ReduceOp op) {
  if (!IsValidDataType(static_cast<int>(dtype))) return false;
  const bool elementwise = op == ReduceOp::kSum || op == ReduceOp::kMin ||
                           op == ReduceOp::kMax || op == ReduceOp::kProduct;
  if (!elementwise) return false;
  if (dtype == DataType::kBool) return op == ReduceOp::kMin || op == ReduceOp::kMax;
  return true;
}

float HalfToFloat(unsigned short h) { return half_float::HalfBitsToFloat(h); }
unsigned short FloatToHalf(float f) { return half_float::FloatToHalfBits(f); }
float BFloat16ToFloat(unsigned short b) { return half_float::BFloat16BitsToFloat(b); }
unsigned short FloatToBFloat16(float f) { return half_float::FloatToBFloat16Bits(f); }

}  // namespace herring
