// The one-host pipeline's all-gather without the shared result area: each rank sums its slice of
// a chunk straight into its own outputs (through a private buffer that stays in its cache), and
// the other local ranks copy that slice from those outputs with process_vm_readv.
//
// Why: a sum written into the shared result area is written into cache lines the other cores hold,
// since they read the same area at every chunk's copy-out; each store first takes its line back
// from them. When the two vCPUs of this machine sit far apart (a cache line's round trip of
// 500-600 ns instead of 105-150), that made the reduce of a 4 MiB allreduce at np=2 take 280 of
// its 430 us; summing into private memory took 60-70 (a two-process model of the pipeline). A
// rank's own outputs are only ever read by the others. Open MPI reads its peers' buffers the same
// way (its vader transport's single copy).
//
// A rank's outputs must stay where they are until every other rank has read its slices: the
// pipeline waits for everyone's copy-out (kConsumed) before the batch completes.
//
// It is not faster everywhere: where the vCPUs are close the result area wins, and `auto` measures
// the routes as the job runs (ops/herring/one_host_routes.h).
//
// Every local rank must agree: the rank's notices (ops/tensor_notice.h) give their outputs'
// addresses, and the first batch of a process set that would read them asks, in one round, whether
// every rank can read every other's memory (same user, same pid namespace, process_vm_readv not
// blocked by a seccomp profile); the answer holds for the set's life. Otherwise the pipeline uses
// the result area, as with HERRING_READ_PEER_TENSORS=never.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ops/cross_memory_copy.h"
#include "runtime/collective.h"

namespace herring {

class PeerOutputReads {
 public:
  // Once every rank's notice of `round` gave its outputs' addresses: takes the others' addresses,
  // and on the set's first such batch asks every rank whether it can read every other's memory.
  // True: the batch's all-gather reads the others' outputs (same answer on every rank).
  bool Prepare(ExecContext& ctx, const AllreduceBatch& batch, uint64_t round);
  // Copies elements [begin, end) of the fused layout, which local member `member` summed into its
  // outputs, from there into this rank's outputs. Throws Error naming the rank and the tensors.
  void Read(ExecContext& ctx, const AllreduceBatch& batch, int member, int64_t begin, int64_t end);

 private:
  std::vector<PeerTensors> peers_;  // by local member
  FusedLayout layout_;
  std::vector<iovec> local_, remote_;
};

}  // namespace herring
