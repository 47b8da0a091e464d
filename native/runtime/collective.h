// What every collective implementation sees: the process set it runs over, the transport, the
// shared-memory arena of its host, the knobs, and a tag space of its own. Implementations throw
// Error on failure (a lost peer, a deadline); the engine turns that into the job's error.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/dtype.h"
#include "common/knobs.h"
#include "common/reduce_op.h"
#include "runtime/counters.h"
#include "runtime/process_sets.h"
#include "runtime/fault_injector.h"
#include "runtime/timeline.h"
#include "runtime/topology.h"
#include "transport/transport.h"
#include "transport/zero_copy_pool.h"

namespace herring {

struct ExecContext {
  const Config& config;
  Transport& net;
  ProcessSet& set;
  const Topology& topo;
  int my_rank;
  uint64_t tag_base;  // this execution's tag space: Tag(sub) for sub < 2^kSubTagBits
  Counters& counters;
  std::function<Status()> check_abort;
  Timeline* timeline = nullptr;  // null: timeline off
  std::string lane;              // the timeline lane of this execution (its tensor names)
  FaultInjector* faults = nullptr;
  // This process's zero-copy memory, as its owner handed it to the engine (null: none; its pool is
  // null until the first tensor is allocated there).
  const ZeroCopyMemory* zero_copy = nullptr;

  static constexpr int kSubTagBits = 20;
  uint64_t Tag(uint64_t sub) const;
  // Deadline of one blocking step in shared memory (a barrier, a flag of a local peer).
  Deadline StepDeadline() const { return Deadline::AfterSeconds(config.timeout_seconds); }
  // Deadline of a wait for transfers over TCP, longer than a step's: what a peer host sends may
  // wait on that host's own steps in shared memory, and when one of its ranks is stuck, its
  // host-mates time out there first and abort the job naming it; a peer that itself goes silent
  // is declared lost by the transport's liveness check at HERRING_TIMEOUT_SECONDS. With equal
  // deadlines the waiter here raced them and won about half the time, naming nobody useful
  // ("1 of 2 transfers still pending"); lazy connections, which leave a rank unconnected to the
  // stuck rank, made that the usual outcome.
  static constexpr double kTransferTimeoutFactor = 1.5;
  double TransferTimeoutSeconds() const { return config.timeout_seconds * kTransferTimeoutFactor; }
  int member_rank(int member) const { return set.ranks[member]; }
  int me() const { return set.my_index; }
  int n() const { return set.size(); }
};

// Builds the tag base of one execution: unique per (cycle, unit) so messages of different
// collectives never match each other.
uint64_t MakeTagBase(uint64_t cycle, uint32_t unit);
// R2SP training mode's transfers (ps/r2sp_server.h) live outside the cycles, in the unit that
// MakeTagBase never hands out:
//   [step: 18 bits][chunk: 10 bits][unit 0xffff][session: 8][shard: 11][pull: 1].
// Step 0 is the initial parameters (rank 0 -> server).
constexpr uint32_t kMaxR2spChunks = 1u << 10;  // per shard
uint64_t MakeR2spTag(uint64_t step, uint32_t session, int32_t shard, uint32_t chunk, bool pull);

// Average is executed as Sum followed by a postscale of 1/n (n = process set size), as Horovod does;
// of integers, as the int64 Sum of its exact split instead (kernels/integer_average.h, engine/execution.cc).
inline ReduceOp ExecutedOp(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }
inline double ExecutedPostscale(ReduceOp op, double postscale, int n) {
  return op == ReduceOp::kAverage ? postscale / n : postscale;
}

// Waits for transfers, turning a failure into an Error that says which step of which collective.
void WaitTransfers(const std::vector<CompletionPtr>& transfers, const ExecContext& ctx,
                   const std::string& step);

// Turns a failed wait in the shared-memory arena into an Error that says during which step.
void ThrowIfArenaFailed(const Status& s, const std::string& step);

// One tensor of a fused allreduce as this rank sees it.
struct ReduceEntry {
  const void* input;
  void* output;
  int64_t count;  // elements
};

// A fused buffer: tensors of one process set with the same dtype, op and scale factors, reduced
// together. Sum/Min/Max/Product only (Average was turned into Sum + postscale at enqueue).
struct AllreduceBatch {
  DataType dtype;
  ReduceOp op;
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<ReduceEntry> entries;
  std::string label;  // tensor names, for errors
  // What came with the negotiated cycle for this batch, so that an algorithm finds it in what it is
  // asked to run (the engine sets it on a batch of the cycle's lone cached allreduce only):
  // the members' inputs (by local index), already staged, prescaled, beside the cycle's bit
  // vectors (engine/shm_bits_exchange.h); empty: the one-step path stages them;
  std::vector<const void*> posted_inputs;
  // the job's total (prescaled, not yet postscaled), when every host's sum rode the leaders' tree
  // with the bit vectors (engine/host_sums_in_tree.cc); null: not this batch;
  const uint8_t* total_with_bits = nullptr;
  // on rank 0 when the load balancer times this batch's shards: how long a shard took for `mib`
  // MiB of one chunk; empty: not measured.
  std::function<void(int shard, double seconds, double mib)> observe_shard;

  int64_t total_count() const;
  size_t total_bytes() const { return total_count() * ElementSize(dtype); }
  // Calls visit(position, input, count) for each piece of elements [begin, end) of the fused
  // layout that lies in one tensor, in order: position counts from begin, input points at the
  // piece's first element.
  void ForEachInputPiece(int64_t begin, int64_t end,
                         const std::function<void(int64_t, const uint8_t*, int64_t)>& visit) const;
  // Copies elements [begin, end) of the fused layout from the inputs into dst, scaled.
  void GatherInputs(int64_t begin, int64_t end, uint8_t* dst, double scale) const;
  // Copies elements [begin, end) of the fused layout from src into the outputs, scaled.
  void ScatterOutputs(int64_t begin, int64_t end, const uint8_t* src, double scale) const;
};

// Where each tensor of a fused buffer begins, so that the pieces of a range are found without
// walking every tensor before it (a batch can hold thousands; the paths that reach other ranks'
// tensors look them up for every unit or slice).
class FusedLayout {
 public:
  void Reset(const AllreduceBatch& batch) {
    begin_.resize(batch.entries.size() + 1);
    begin_[0] = 0;
    for (size_t e = 0; e < batch.entries.size(); ++e) begin_[e + 1] = begin_[e] + batch.entries[e].count;
  }
  int64_t total() const { return begin_.back(); }
  // Calls visit(entry, offset, count) for each non-empty piece of elements [begin, end) of the
  // fused layout that lies in one tensor, in order: `entry` indexes the batch's entries and
  // `offset` is the piece's first element in that tensor.
  template <typename Visit>
  void ForEachPiece(int64_t begin, int64_t end, Visit&& visit) const {
    size_t e = static_cast<size_t>(std::upper_bound(begin_.begin(), begin_.end(), begin) - begin_.begin()) - 1;
    for (; begin < end && e + 1 < begin_.size(); ++e) {
      const int64_t count = std::min(end, begin_[e + 1]) - begin;
      if (count <= 0) continue;
      visit(e, begin - begin_[e], count);
      begin += count;
    }
  }

 private:
  std::vector<int64_t> begin_{0};
};

class AllreduceImpl {
 public:
  virtual ~AllreduceImpl() = default;
  virtual const char* name() const = 0;
  virtual bool Enabled(const ExecContext& ctx, const AllreduceBatch& batch) const = 0;
  virtual void Execute(ExecContext& ctx, AllreduceBatch& batch) = 0;
};

}  // namespace herring
