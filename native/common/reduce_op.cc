#include "common/reduce_op.h"

namespace herring {

bool IsValidReduceOp(int value) { return value >= 0 && value < kNumReduceOps; }

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage: return "Average";
    case ReduceOp::kSum: return "Sum";
    case ReduceOp::kAdasum: return "Adasum";
    case ReduceOp::kMin: return "Min";
    case ReduceOp::kMax: return "Max";
    case ReduceOp::kProduct: return "Product";
  }
  return "invalid";
}

}  // namespace herring
