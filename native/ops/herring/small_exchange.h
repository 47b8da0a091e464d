// The small-message path of the Herring allreduce across hosts: a fused buffer of at most
// HERRING_SMALL_MESSAGE_BYTES is not cut into slices and pushed to the server shards (a push, then
// a pull that waits for the shard's owner to sum: a round trip plus a hand-off on the far side per
// chunk); instead the hosts' first ranks gather every host's sum (Bruck's allgather: ceil(log2 H)
// rounds, one send and one receive each), sum the H host sums and share the total with their
// hosts through the arena. No server step, and a leader's messages grow with log2 H, not H.
//
// The bits are those of the staged pipeline: each host's sum is the one-step reduction of its
// ranks' inputs in local-rank order (what the pipeline's slice owners compute), and the host sums
// are reduced in host order with one rounding (what a shard computes), so results are bitwise
// identical on every rank and to the path they replace.
#pragma once

#include <cstddef>

#include "runtime/aligned_buffer.h"
#include "runtime/collective.h"

namespace herring {

// Whether a batch of `bytes` may be reduced by ExchangeHostSums in this process set: it spans
// hosts, every host has the same number of its members (so that every rank decides alike whether
// the total fits a sub-slot of its host's arena), the shards are served by the workers themselves (dedicated
// servers expect every push), and it is at most HERRING_SMALL_MESSAGE_BYTES (and one sub-slot of
// the host's arena). Every rank decides alike: it reads only the set's layout and the knobs.
bool HostSumsExchangeFits(const ProcessSet& set, const Config& config, size_t bytes);
inline bool HostSumsExchangeFits(const ExecContext& ctx, size_t bytes) {
  return HostSumsExchangeFits(ctx.set, ctx.config, bytes);
}

class HostSumsExchange {
 public:
  // Reduces `batch` into its outputs: this host's sum (shared memory in one step, or this rank's
  // own input when it is alone on its host); on the host's first rank, gathered with every other
  // host's sum, all reduced in host order; postscaled into every rank's outputs. When the total
  // came with the cycle's result (AllreduceBatch::total_with_bits: the host sums rode the leaders'
  // tree, reduced the same way by rank 0), only the last step is left.
  void Execute(ExecContext& ctx, AllreduceBatch& batch);

 private:
  ScratchBuffer host_sums_;  // [host][element]: every host's sum, this host's included
  ScratchBuffer total_;      // their reduction, before it is scaled into the outputs
};

}  // namespace herring
