// Reduction operators. Values match Horovod's C API (horovod_reduce_op_*) so that scripts passing
// hvd.Sum etc. mean the same thing; Python reads them from the bindings.
#pragma once

#include <cstdint>

namespace herring {

enum class ReduceOp : uint8_t {
  kAverage = 0,
  kSum = 1,
  kAdasum = 2,
  kMin = 3,
  kMax = 4,
  kProduct = 5,
};
constexpr int kNumReduceOps = 6;

bool IsValidReduceOp(int value);
const char* ReduceOpName(ReduceOp op);

}  // namespace herring
