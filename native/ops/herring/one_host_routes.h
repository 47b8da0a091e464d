// Which route a one-host pipelined allreduce of ordinary tensors takes (HERRING_READ_PEER_TENSORS),
// that is what this rank votes for in its notice (ops/tensor_notice.h):
//   kStaged: everything through the arena: staged inputs, the shared result area;
//   kOutputsByAddress: staged inputs; the sum's slices copied out of the other ranks' tensors
//     (ops/herring/peer_output_reads.h);
//   kTensorsByAddress: nothing staged: the cross-memory allreduce (ops/cross_memory_allreduce.h).
// `auto` measures them as the job runs (ops/herring/route_chooser.h); every rank measures, local rank 0's
// measurements decide. Where some local rank has no core of its own (ShmArena::SomeMemberWithoutACore,
// the same answer on every rank), fewer routes are candidates:
//   - not reading the outputs: with 4 ranks on 2 cores that measured slower than the result area
//     (256 KiB 95-98 against 77-81 us, 1 MiB 210-215 against 184-187 us, 64 MiB 15.4-15.6 against
//     13.5-14.3 ms), the ranks holding the cores waiting at the end for descheduled ones;
//   - the cross-memory allreduce from kOversubscribedCrossMinBytes only: below, staging was faster
//     in every run (4 ranks on 2 cores, Xeon: 256 KiB 95 against 229 us, 1 MiB 549 against 684 us;
//     from 4 MiB on they were alike or the cross-memory one ahead: 16 MiB 4.9 against 5.8 ms,
//     64 MiB 26.4 against 29.6 ms), and its warm-up and trial runs cost the batches they measure.
#pragma once

#include <cstddef>

#include "ops/herring/route_chooser.h"
#include "ops/tensor_notice.h"
#include "runtime/collective.h"

namespace herring {

class OneHostRoutes {
 public:
  static constexpr size_t kOversubscribedCrossMinBytes = 4 << 20;

  // What this rank offers for the next batch of `bytes`: its addresses (but under `never`) and
  // its vote. Local rank 0's vote is the batch's route (ops/tensor_notice.h).
  AddressOffer Offer(const ExecContext& ctx, size_t bytes);
  // A batch offered for is done: `route` is what the ranks agreed on, `seconds` its time from the
  // moment every rank's notice was known.
  void Finished(const ExecContext& ctx, size_t bytes, TensorReach route, double seconds);

 private:
  // The chooser of a batch of `bytes`, or null where staging is the only candidate.
  RouteChooser* ChooserFor(const ExecContext& ctx, size_t bytes);

  // Every local rank with a core of its own; some without, batches from kOversubscribedCrossMinBytes
  // (smaller ones are staged).
  RouteChooser every_rank_a_core_{{static_cast<int>(TensorReach::kStaged), static_cast<int>(TensorReach::kOutputsByAddress),
                                   static_cast<int>(TensorReach::kTensorsByAddress)}};
  RouteChooser oversubscribed_{{static_cast<int>(TensorReach::kStaged), static_cast<int>(TensorReach::kTensorsByAddress)}};
};

}  // namespace herring
