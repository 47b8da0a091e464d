// Adasum (Maleki et al., "Scaling Distributed Training with Adaptive Summation", MLSys 2021), the
// reduction Horovod offers as op=Adasum: two gradients a and b combine into
//     (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
// (their sum when orthogonal, their average when parallel), and 2^k gradients combine pairwise
// up a binary tree: ranks 2i and 2i+1 first, then those pairs, and so on. Each tensor of a fused
// buffer is combined on its own (its own dot product and norms), as Horovod does.
//
// The algorithm is Horovod's CPU one: vector-halving, distance-doubling. At level d = 1, 2, 4...
// a rank keeps one half of its current segment and trades the other half with rank ^ d (the
// lower rank keeps the first half), so the two hold the same segment of their two vectors; the
// per-tensor dot products and squared norms of that segment are summed over the 2d ranks that
// share the segment's two full vectors (recursive doubling of a few doubles), and the rank
// combines its segment with the formula. After log2(n) levels every rank owns 1/n of the result;
// the same exchanges in reverse gather it everywhere.
//
// Power-of-two process sets only, float16/float32/float64 (as Horovod; checked at enqueue).
// Deterministic: every element is combined by exactly one rank, and the sums of dot products
// are formed in the same order on every rank of a group (IEEE addition commutes), so every rank
// gets the same bits, run after run.
#pragma once

#include "runtime/aligned_buffer.h"
#include "runtime/collective.h"

namespace herring {

class AdasumAllreduce : public AllreduceImpl {
 public:
  const char* name() const override { return "adasum"; }
  bool Enabled(const ExecContext& ctx, const AllreduceBatch& batch) const override {
    return batch.op == ReduceOp::kAdasum && ctx.n() > 1;
  }
  void Execute(ExecContext& ctx, AllreduceBatch& batch) override;

 private:
  ScratchBuffer buffer_;
  ScratchBuffer incoming_;
};

// Why a request cannot be reduced with Adasum over a process set of `set_size` ranks, or "".
std::string AdasumUnsupportedReason(DataType dtype, int set_size);

}  // namespace herring
