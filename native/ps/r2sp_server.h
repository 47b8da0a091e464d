// R2SP training mode (round-robin synchronous parallel, the paper's training scheme): the server
// shards hold the parameters and apply every update themselves; workers take turns in a fixed
// round-robin order (rank 0, 1, ..., N-1, 0, ...), each pushing its gradient and pulling the
// parameters its push produced, without waiting for the others to finish a step together.
//
// Update u = k*N + i is rank workers[i]'s k-th push. It was computed on the parameters that rank
// pulled after its previous push, i.e. after update u - N + 1: every gradient is at most N - 1
// updates stale (the staleness bound), and the order of the updates, hence every bit of the
// result, is the same from run to run. Rank 0 sends the initial parameters as step 0.
//
// One R2spServer per process that hosts shards of a session, on a thread of its own: the
// transport's tagged transfers (runtime/collective.h, MakeR2spTag) carry the pushes and pulls outside
// the negotiation cycles, so the workers' turns stay evenly gapped instead of synchronised.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "runtime/control_messages.h"
#include "runtime/partition_map.h"
#include "transport/transport.h"

namespace herring {

// One shard's optimizer step, in float32: g' = g + wd * p; v = momentum * v + g' (when momentum
// is not 0); p -= lr * v. The same formula as torch.optim.SGD without dampening or Nesterov.
void R2spApplyUpdate(const R2spSessionSpec& spec, const float* grad, float* params, float* velocity, int64_t n);

// A shard's range cut into the chunks that travel separately (offsets relative to the range):
// the server applies and returns each chunk as soon as it arrived, so a worker's pull overlaps
// its push. At least 1 MiB each, at most kMaxR2spChunks; one empty chunk for an empty range.
std::vector<ElementRange> R2spChunks(const R2spShardRange& range);

class R2spServer {
 public:
  struct Options {
    double stall_warning_seconds = 60;  // HOROVOD_STALL_CHECK_TIME_SECONDS
    double stall_shutdown_seconds = 0;  // HOROVOD_STALL_SHUTDOWN_TIME_SECONDS, 0: never
    int initial_from = 0;               // the rank that sends the initial parameters
  };
  // Starts serving at once. `fail` is called (from the serving thread) with a message naming
  // the session, the shard and the rank when a transfer fails or a turn stalls past the shutdown
  // time; the engine then fails the job.
  R2spServer(Transport* transport, R2spSessionSpec spec, Options options, std::function<void(const Status&)> fail);
  // Stops and joins the thread. The buffers stay allocated until destruction: a receive the
  // thread had posted may still be pending in the transport, so destroy only after it closed.
  void Stop();
  ~R2spServer();

 private:
  struct ShardState {
    R2spShardRange range;
    std::vector<ElementRange> chunks;
    std::vector<float> params, velocity, grad;
    std::vector<std::vector<float>> outgoing;  // per turn: the parameters its pull sends
  };
  void Run();
  // Waits for `transfers` in short slices; false when stopped first. Throws Error on a failed
  // transfer or a turn stalled past the shutdown time; warns once past the warning time.
  bool Await(const std::vector<CompletionPtr>& transfers, int rank, uint64_t step, const char* what);
  std::string Describe(int rank, uint64_t step) const;

  Transport* transport_;
  R2spSessionSpec spec_;
  Options options_;
  std::function<void(const Status&)> fail_;
  std::vector<ShardState> shards_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace herring
