// Ring allreduce among the members of a process set: reduce-scatter then all-gather
// around the ring, 2(n-1)/n of the buffer each way per rank. The second implementation in the
// operation manager (HERRING_ALLREDUCE=ring), and the baseline the PS allreduce is measured
// against. Each segment is accumulated in a fixed ring order and then copied, so all ranks get
// identical bits.
#pragma once

#include "runtime/aligned_buffer.h"
#include "runtime/collective.h"

namespace herring {

class RingAllreduce : public AllreduceImpl {
 public:
  const char* name() const override { return "ring"; }
  bool Enabled(const ExecContext& ctx, const AllreduceBatch& batch) const override { return ctx.n() > 1; }
  void Execute(ExecContext& ctx, AllreduceBatch& batch) override;

 private:
  ScratchBuffer buffer_;
  ScratchBuffer incoming_;
};

// A process set of one: the "reduction" is the scaling alone.
class LocalAllreduce : public AllreduceImpl {
 public:
  const char* name() const override { return "local"; }
  bool Enabled(const ExecContext& ctx, const AllreduceBatch& batch) const override { return ctx.n() == 1; }
  void Execute(ExecContext& ctx, AllreduceBatch& batch) override;
};

}  // namespace herring
