// The exact Average of integer tensors. A Sum in the tensors' own type wraps (two int8 ranks
// holding 100 sum to -56), and that divided by n is no average. Instead each rank splits each of
// its elements x (prescaled in its type, as ScaleInto scales) by the floor division by n:
//     x = q * n + r,   q = floor(x / n),   0 <= r < n,
// both as int64. The int64 Sums over the n ranks, Q of the quotients and R of the remainders,
// give the average exactly, in every integer type: sum(x) / n = Q + R / n. R < n^2; Q is within
// n of the average, so only for int64 inputs within n of int64's limits does it wrap, and the
// Sum (modulo 2^64, as every integer Sum) and the result computed modulo 2^64 are still exact,
// the average itself being an int64. The result is truncated toward zero, as torch's integer
// division (rounding_mode="trunc") and Horovod's integer postscale round; then the postscale
// applies, truncating toward zero and saturating as ScaleInto does.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"
#include "common/reduce_op.h"

namespace herring {

// True for an Average of an integer type (not bool), which runs as described above.
bool IsIntegerAverage(DataType dtype, ReduceOp op);

// quotients[i] and remainders[i] of (src[i] scaled by prescale in dtype) divided by n >= 1.
void SplitForAverage(const void* src, size_t count, DataType dtype, double prescale, int64_t n,
                     int64_t* quotients, int64_t* remainders);

// dst[i] (dtype) = the average from the sums over n ranks of the quotients and the remainders,
// truncated toward zero, times postscale (truncated toward zero, saturating). dst may be the
// quotient sums' memory.
void AverageFromSplitSums(const int64_t* quotient_sums, const int64_t* remainder_sums, size_t count,
                          int64_t n, double postscale, DataType dtype, void* dst);

// The same with every input at hand (reducescatter's block): dst[i] = the average of
// srcs[0][i] .. srcs[nsrcs-1][i] (already prescaled), truncated toward zero, times postscale.
// dst may alias srcs[0].
void AverageInto(void* dst, const void* const* srcs, size_t nsrcs, size_t count, DataType dtype,
                 double postscale);

}  // namespace herring
