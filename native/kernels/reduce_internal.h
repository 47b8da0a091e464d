// Test hooks for reduce.cc: run the kernels of a chosen instruction set, so the tests can check
// that every target this machine can run gives the reference results and the same bits. The
// engine uses reduce.h only.
#pragma once

#include <cstddef>

#include "common/dtype.h"
#include "common/reduce_op.h"

namespace herring {
namespace reduce_internal {

enum class KernelIsa {
  kPortable,  // baseline vectors (SSE2 on x86-64), software float16 conversion
  kAvx2F16c,  // 256-bit AVX2 vectors, F16C float16 conversion
};

const char* KernelIsaName(KernelIsa isa);
bool KernelIsaAvailable(KernelIsa isa);
// The instruction set ReduceInto/ScaleInto use on this machine (the best available).
KernelIsa SelectedKernelIsa();

// ReduceInto / ScaleInto with the kernels of `isa`, which must be available.
void ReduceIntoWithIsa(KernelIsa isa, void* dst, const void* const* srcs, size_t nsrcs,
                       size_t count, DataType dtype, ReduceOp op);
void ScaleIntoWithIsa(KernelIsa isa, void* dst, const void* src, size_t count, DataType dtype,
                      double factor);

}  // namespace reduce_internal
}  // namespace herring
