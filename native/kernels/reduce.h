// Reduction and scaling kernels: the only code that touches element values. Vectorised for the
// host CPU (function multiversioning picks AVX2/F16C where present), deterministic: the same
// inputs in the same order give the same bits on every machine run after run.
#pragma once

#include <cstddef>

#include "common/dtype.h"
#include "common/reduce_op.h"

namespace herring {

// dst[i] = srcs[0][i] (op) srcs[1][i] (op) ... (op) srcs[n-1][i], combined strictly left to
// right. float16 and bfloat16 are widened to float32, combined, and rounded once (round to
// nearest even) at the end, so a reduction over n sources loses no more precision than one
// rounding. dst may alias srcs[0] (and only srcs[0]). nsrcs >= 1. op must be Sum, Min, Max or
// Product (Average is Sum followed by ScaleInto; Adasum is not an elementwise op).
void ReduceInto(void* dst, const void* const* srcs, size_t nsrcs, size_t count, DataType dtype,
                ReduceOp op);

// dst[i] = src[i] * factor. dst may equal src. factor == 1.0 is a plain copy (memcpy when dst !=
// src). Integer types compute in double and truncate toward zero, as Horovod does; bool is
// copied unchanged (scaling a bool is rejected by the API before it gets here).
void ScaleInto(void* dst, const void* src, size_t count, DataType dtype, double factor);

// True when ReduceInto supports (dtype, op): e.g. bool supports Min/Max (logical and/or) only.
bool ReductionSupported(DataType dtype, ReduceOp op);

// float16 / bfloat16 <-> float32 scalars (round to nearest even), shared with the tests.
float HalfToFloat(unsigned short h);
unsigned short FloatToHalf(float f);
float BFloat16ToFloat(unsigned short b);
unsigned short FloatToBFloat16(float f);

}  // namespace herring
