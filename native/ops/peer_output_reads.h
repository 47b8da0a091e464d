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
// both as the job runs (ops/route_chooser.h). It does so only where every local rank has a core:
// with 4 ranks on 2 cores reading measured slower than the result area (256 KiB 95-98 against
// 77-81 us, 1 MiB 210-215 against 184-187 us, 64 MiB 15.4-15.6 against 13.5-14.3 ms), the ranks
// holding the cores waiting at the end for descheduled ones.
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

#include "common/cpus.h"
#include "ops/route_chooser.h"
#include "runtime/collective.h"

namespace herring {

class PeerOutputReads {
 public:
  // Whether this rank offers its outputs' addresses for the next batch of `bytes`
  // (HERRING_READ_PEER_TENSORS; `auto`: where every local rank has a core, as the route chooser
  // says). Ranks that differ offer differently, and then all use the result area.
  bool Offers(const ExecContext& ctx, size_t bytes);
  // A batch offered for is done: it took `seconds` since every rank staged its first chunk, by
  // the route the ranks agreed on (for the chooser).
  void Finished(const ExecContext& ctx, size_t bytes, bool read_peers, double seconds);
  // Once every rank's notice of `round` gave its outputs' addresses: takes the others' addresses,
  // and on the set's first such batch asks every rank whether it can read every other's memory.
  // True: the batch's all-gather reads the others' outputs (same answer on every rank).
  bool Prepare(ExecContext& ctx, const AllreduceBatch& batch, uint64_t round);
  // Copies elements [begin, end) of the fused layout, which local member `member` summed into its
  // outputs, from there into this rank's outputs. Throws Error naming the rank and the tensors.
  void Read(ExecContext& ctx, const AllreduceBatch& batch, int member, int64_t begin, int64_t end);

 private:
  // Whether this rank can read every other local rank's memory; `why` says why not.
  bool CanReadEveryone(ExecContext& ctx, const AllreduceBatch& batch, std::string* why);

  std::vector<int> pids_;                        // by local member
  std::vector<std::vector<uint64_t>> outputs_;   // by local member, by entry: the output's address
  FusedLayout layout_;
  std::vector<iovec> local_, remote_;
  bool warned_ = false;
  const int available_cpus_ = CpusAvailable();
  RouteChooser chooser_;
};

}  // namespace herring
