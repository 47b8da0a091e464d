// Completion: the waitable end of an asynchronous transfer. The I/O thread finishes it; the
// engine waits on it with a deadline. Waiting blocks on a condition variable (no busy spin: four
// ranks on two cores is the normal case here).
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"

namespace herring {

class Completion {
 public:
  bool done() const;
  Status status() const;  // meaningful once done()
  Clock::time_point finished_at() const;  // when Finish was called (the load balancer times shards)
  // Blocks until done or the deadline passes (then returns Timeout, the operation stays pending).
  Status Wait(Deadline deadline);
  // First call wins; later calls are ignored (a transfer can fail after it was finished).
  void Finish(Status status);
  // Runs `then(status)` once this is finished: at once (on the caller's thread) if it already is,
  // otherwise on the thread that finishes it, after the waiters were woken. One continuation per
  // completion; it must be cheap and must not wait (the point-to-point matcher forwards a
  // transfer's outcome to the completion its caller holds with it).
  void OnFinish(std::function<void(const Status&)> then);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
  Clock::time_point finished_at_{};
  std::function<void(const Status&)> then_;
};

using CompletionPtr = std::shared_ptr<Completion>;

// Waits for every completion; returns the first error in list order, or Timeout naming how many
// were still pending when the deadline passed.
Status WaitAll(const std::vector<CompletionPtr>& completions, Deadline deadline);

}  // namespace herring
