#include "runtime/handle_table.h"

#include <chrono>
#include <thread>

namespace herring {

int64_t HandleTable::Create(Callback on_complete) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t h = next_++;
  if (spare_.empty()) {
    slots_[h].on_complete = std::move(on_complete);
    return h;
  }
  spare_.key() = h;  // its slot was reset when it was removed (RemoveLocked)
  spare_.mapped().on_complete = std::move(on_complete);
  slots_.insert(std::move(spare_));  // leaves spare_ empty
  return h;
}

void HandleTable::RemoveLocked(Slots::iterator it) {
  spare_ = slots_.extract(it);
  spare_.mapped() = Slot{};  // frees the result's buffers now, not at the next Create
}

HandleTable::Callback HandleTable::SettleLocked(int64_t handle, OpResult* result, bool* sleepers) {
  auto it = slots_.find(handle);
  if (it == slots_.end() || it->second.done) return nullptr;
  if (it->second.on_complete) {
    Callback callback = std::move(it->second.on_complete);
    RemoveLocked(it);  // nobody waits on a callback handle
    return callback;
  }
  it->second.done = true;
  it->second.result = std::move(*result);
  // Only a waiter past its spin sleeps on the condition (counted in waiters, under this lock);
  // one still spinning sees `done` when it looks next.
  *sleepers = *sleepers || it->second.waiters > 0;
  return nullptr;
}

void HandleTable::Complete(int64_t handle, OpResult result) {
  Callback callback;
  bool sleepers = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    callback = SettleLocked(handle, &result, &sleepers);
  }
  if (callback) callback(std::move(result));  // a callback's slot kept no result
  if (sleepers) cv_.notify_all();
}

void HandleTable::CompleteAll(const std::vector<int64_t>& handles) {
  std::vector<Callback> callbacks;
  bool sleepers = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t handle : handles) {
      OpResult success;
      if (Callback callback = SettleLocked(handle, &success, &sleepers)) callbacks.push_back(std::move(callback));
    }
  }
  for (auto& callback : callbacks) callback(OpResult{});
  if (sleepers) cv_.notify_all();
}

bool HandleTable::Poll(int64_t handle) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slots_.find(handle);
  if (it == slots_.end()) throw Error(Status::InvalidArgument("unknown handle " + std::to_string(handle)));
  return it->second.done;
}

Status HandleTable::Wait(int64_t handle, Deadline deadline) {
  {
    // Already complete: the usual case for a synchronous call, whose caller ran the cycle.
    std::lock_guard<std::mutex> lock(mu_);
    auto it = slots_.find(handle);
    if (it == slots_.end()) return Status::InvalidArgument("unknown handle " + std::to_string(handle));
    if (it->second.done) return Status();
  }
  // A small collective completes within microseconds of being awaited: look a few times, giving
  // the core away in between, before sleeping (a sleeping thread costs a wake-up, tens of
  // microseconds on a virtual machine whose idle core halts).
  const auto spin_until = std::chrono::steady_clock::now() + kSpin;
  do {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = slots_.find(handle);
      if (it == slots_.end() || it->second.done) break;
    }
    std::this_thread::yield();
  } while (std::chrono::steady_clock::now() < spin_until);
  std::unique_lock<std::mutex> lock(mu_);
  auto it = slots_.find(handle);
  if (it == slots_.end()) return Status::InvalidArgument("unknown handle " + std::to_string(handle));
  ++it->second.waiters;
  Status s;
  while (!it->second.done) {
    if (deadline.Expired()) {
      s = Status::Timeout("handle " + std::to_string(handle) + " still pending");
      break;
    }
    cv_.wait_until(lock, deadline.Capped(std::chrono::seconds(1)));
    // Take (by another thread waiting on the same handle) may have erased the slot meanwhile.
    it = slots_.find(handle);
    if (it == slots_.end()) return Status::InvalidArgument("handle " + std::to_string(handle) + " was taken");
  }
  --it->second.waiters;
  return s;
}

bool HandleTable::Awaited(int64_t handle) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slots_.find(handle);
  return it != slots_.end() && !it->second.done && (it->second.waiters > 0 || it->second.on_complete);
}

OpResult HandleTable::Take(int64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slots_.find(handle);
  if (it == slots_.end()) throw Error(Status::InvalidArgument("unknown handle " + std::to_string(handle)));
  if (!it->second.done) throw Error(Status::InvalidArgument("handle " + std::to_string(handle) + " is still pending"));
  OpResult r = std::move(it->second.result);
  RemoveLocked(it);
  return r;
}

void HandleTable::FailAll(const Status& status) {
  std::vector<Callback> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = slots_.begin(); it != slots_.end();) {
      if (it->second.on_complete) {
        callbacks.push_back(std::move(it->second.on_complete));
        it = slots_.erase(it);
        continue;
      }
      if (!it->second.done) {
        it->second.done = true;
        it->second.result.status = status;
      }
      ++it;
    }
  }
  for (auto& cb : callbacks) {
    OpResult r;
    r.status = status;
    cb(std::move(r));
  }
  cv_.notify_all();
}

size_t HandleTable::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& kv : slots_) n += kv.second.done ? 0 : 1;
  return n;
}

}  // namespace herring
