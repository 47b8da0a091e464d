// HandleTable: what an adapter holds after enqueueing: an integer handle it can poll, wait on
// (with a deadline, without holding the GIL) and finally take the result of.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <memory>
#include <mutex>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "runtime/aligned_buffer.h"

namespace herring {

struct OpResult {
  Status status;
  // Outputs whose size is only known after negotiation (allgather, alltoall, reducescatter) are
  // allocated by the engine and handed over here, with their shapes.
  std::vector<std::shared_ptr<AlignedBuffer>> outputs;
  std::vector<std::vector<int64_t>> output_shapes;
  std::vector<int64_t> received_splits;  // alltoall
  int64_t value = 0;                     // join: last rank to join; process sets: the id
};

class HandleTable {
 public:
  // A callback instead of a waiter: frameworks with asynchronous kernels (TensorFlow) get the
  // result pushed to them. It runs on the engine's thread, exactly once, also when the job fails.
  using Callback = std::function<void(OpResult)>;
  // How long Wait looks before it sleeps.
  static constexpr std::chrono::microseconds kSpin{50};

  int64_t Create(Callback on_complete = nullptr);
  void Complete(int64_t handle, OpResult result);
  // Completes each handle with success (an empty OpResult), under one lock.
  void CompleteAll(const std::vector<int64_t>& handles);
  // Throws Error(InvalidArgument) for an unknown handle.
  bool Poll(int64_t handle) const;
  // Blocks until complete or the deadline; returns Timeout if still pending.
  Status Wait(int64_t handle, Deadline deadline);
  // Removes the handle and returns its result (it must be complete).
  OpResult Take(int64_t handle);
  // Whether something is blocked on the handle's result: a thread in Wait, or an asynchronous
  // kernel behind a callback (its framework waits for it). The deadlock detector's input.
  bool Awaited(int64_t handle) const;
  // Completes every pending handle with `status`.
  void FailAll(const Status& status);
  size_t pending() const;

 private:
  struct Slot {
    bool done = false;
    int waiters = 0;
    OpResult result;
    Callback on_complete;
  };
  // Under mu_: a callback handle is removed and its callback returned; any other is marked done
  // with *result. Sets *sleepers if a waiter sleeps on the condition. The one step Complete and
  // CompleteAll share.
  Callback SettleLocked(int64_t handle, OpResult* result, bool* sleepers);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  using Slots = std::unordered_map<int64_t, Slot>;
  Slots slots_;  // looked up per tensor; nothing depends on its order
  // The node of the last slot removed, reused by the next Create: a synchronous call creates and
  // removes one slot, and would otherwise allocate and free its node every time.
  Slots::node_type spare_;
  // Removes `it`'s slot, keeping its node as the spare.
  void RemoveLocked(Slots::iterator it);
  int64_t next_ = 1;
};

}  // namespace herring
