// Halving-doubling allreduce among the members of a process set (Rabenseifner's
// algorithm; the allreduce of EFLOPS, HPCA'20): recursive halving (a reduce-scatter in log2(p)
// exchanges of 1/2, 1/4, ... of the buffer with the position at distance 1, 2, 4, ...) then
// recursive doubling (the all-gather, the same exchanges in reverse). Each rank sends 2(p-1)/p of
// the buffer, as in the ring, but in 2 log2(p) steps instead of 2(p-1).
//
// Sizes that are not a power of two: with p the largest power of two <= n, the n - p extra
// positions hand their whole (prescaled) buffer to a core position first and receive the result
// from it at the end (the usual fold-in / unfold).
//
// Positions are the members in rank order (HERRING_ALLREDUCE=hd), or the topology-aware mapping
// of ops/topology_map.h (HERRING_ALLREDUCE=hd-topo with HERRING_TOPOLOGY): then every exchange
// of a step runs over a link no other exchange of that step uses. See docs/eflops.md.
//
// Deterministic: every element is reduced along a fixed tree (fixed by the positions), each
// reduction done by exactly one rank, and the result is copied to the others, so all ranks get
// the same bits, run after run.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "runtime/aligned_buffer.h"
#include "runtime/collective.h"
#include "ops/topology_map.h"

namespace herring {

class HalvingDoublingAllreduce : public AllreduceImpl {
 public:
  // topology == nullptr: positions in rank order ("hd"); otherwise mapped onto it ("hd-topo").
  explicit HalvingDoublingAllreduce(std::shared_ptr<const NetworkTopology> topology = nullptr);

  const char* name() const override { return topology_ ? "hd-topo" : "hd"; }
  bool Enabled(const ExecContext& ctx, const AllreduceBatch& batch) const override { return ctx.n() > 1; }
  void Execute(ExecContext& ctx, AllreduceBatch& batch) override;

  // The positions used for ctx's process set, computed once per member list.
  const HalvingDoublingPlan& PlanFor(const ExecContext& ctx);

 private:
  // Sends `send_count` elements at `send` to `peer` and receives `recv_count` elements from it,
  // both cut into pieces so that each received piece is processed while the next ones are still
  // on the wire: reduced into `into` (through `staging`) when `reduce`, else received in place.
  void Exchange(ExecContext& ctx, const AllreduceBatch& batch, int peer, int step, const uint8_t* send,
                int64_t send_count, uint8_t* into, int64_t recv_count, bool reduce, uint8_t* staging,
                const std::string& what);

  std::shared_ptr<const NetworkTopology> topology_;
  std::map<std::vector<int>, HalvingDoublingPlan> plans_;  // by the set's global ranks
  ScratchBuffer buffer_;
  ScratchBuffer incoming_;
};

// The implementation HERRING_ALLREDUCE selects: hd, or hd-topo with the topology of
// HERRING_TOPOLOGY (read now, so that a bad file fails at init, naming it).
std::unique_ptr<AllreduceImpl> MakeHalvingDoublingAllreduce(const Config& config);

}  // namespace herring
