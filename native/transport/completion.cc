#include "transport/completion.h"

#include <chrono>
#include <string>

namespace herring {
namespace {

// While waiting on one completion, WaitAll looks at the others this often so that a transfer that
// failed further down the list (a lost peer) ends the wait without sitting out the deadline.
constexpr auto kFailureScanInterval = std::chrono::milliseconds(20);

}  // namespace

bool Completion::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

Clock::time_point Completion::finished_at() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_at_;
}

Status Completion::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

Status Completion::Wait(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (deadline.never()) {
    cv_.wait(lock, [this] { return done_; });
  } else if (!cv_.wait_until(lock, deadline.when(), [this] { return done_; })) {
    return Status::Timeout("transfer still pending at the deadline");
  }
  return status_;
}

void Completion::Finish(Status status) {
  std::function<void(const Status&)> then;
  Status finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    status_ = std::move(status);
    finished_at_ = Clock::now();
    then.swap(then_);
    if (then) finished = status_;
  }
  cv_.notify_all();
  if (then) then(finished);
}

void Completion::OnFinish(std::function<void(const Status&)> then) {
  Status finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) {
      then_ = std::move(then);
      return;
    }
    finished = status_;
  }
  then(finished);
}

namespace {

// The first error in list order among the completions that are done (OK if none failed); counts
// the ones still running into *pending.
Status ScanCompletions(const std::vector<CompletionPtr>& completions, size_t* pending) {
  *pending = 0;
  Status first_error;
  for (const auto& c : completions) {
    if (!c->done()) {
      ++*pending;
    } else if (first_error.ok()) {
      first_error = c->status();
    }
  }
  return first_error;
}

}  // namespace

Status WaitAll(const std::vector<CompletionPtr>& completions, Deadline deadline) {
  size_t next = 0;  // every completion before `next` finished OK
  bool scan_others = false;
  for (;;) {
    for (; next < completions.size() && completions[next]->done(); ++next) {
      Status s = completions[next]->status();
      if (!s.ok()) return s;
    }
    if (next == completions.size()) return Status::OK();
    size_t pending = 0;
    if (scan_others) {
      Status failure = ScanCompletions(completions, &pending);
      if (!failure.ok()) return failure;
    }
    if (deadline.Expired()) {
      ScanCompletions(completions, &pending);
      return Status::Timeout(std::to_string(pending) + " of " +
                             std::to_string(completions.size()) +
                             " transfers still pending at the deadline");
    }
    Deadline slice = Deadline::Earlier(deadline, Deadline::After(kFailureScanInterval));
    completions[next]->Wait(slice);
    scan_others = !completions[next]->done();
  }
}

}  // namespace herring
