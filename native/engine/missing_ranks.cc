// Engine::MissingRanks: who has not submitted the collective a timed-out wait is waiting for.
//
// Only rank 0's coordinator sees who submitted what, and only for collectives that went through
// it: a cached one (the steady state) is negotiated by bits alone. So the asking rank sends its
// cached request through the coordinator as the stall inspector does (stale: its cache entry is
// evicted everywhere, and every rank that has it pending announces it in the next cycle), and
// asks rank 0. Rank 0 answers from its table two cycles after the question came: the asker's own
// announcement is in a cycle after its question was sent, the others' in the cycle after that.
// Until then rank 0 keeps cycles coming (an empty one, if nobody else has work), so an answer
// never waits for an application thread. Asking costs nothing unless a wait timed out.
#include "engine/engine.h"

namespace herring {

std::optional<std::vector<int>> Engine::MissingRanks(int64_t handle, Deadline deadline) {
  {
    std::lock_guard<std::mutex> lock(missing_mu_);
    if (stopped_.load()) return std::nullopt;
    missing_questions_.try_emplace(handle);  // a second thread asking the same shares the answer
    missing_question_new_.store(true, std::memory_order_release);
  }
  Wake();  // the loop takes the question up as it looks for work
  std::unique_lock<std::mutex> lock(missing_mu_);
  missing_cv_.wait_until(lock, deadline.when(), [&] {
    auto it = missing_questions_.find(handle);
    return it == missing_questions_.end() || it->second.done;
  });
  auto it = missing_questions_.find(handle);
  if (it == missing_questions_.end()) return std::nullopt;  // another asker of it took the answer
  std::optional<std::vector<int>> missing = it->second.done ? it->second.missing : std::nullopt;
  missing_questions_.erase(it);
  return missing;
}

void Engine::ServeMissingRanks() {
  // Every look for work comes here: without a question, no lock.
  if (!missing_question_new_.load(std::memory_order_acquire)) {
    if (coordinator_) AnswerMissingQueries();
    return;
  }
  std::vector<int64_t> asked;
  {
    std::lock_guard<std::mutex> lock(missing_mu_);
    missing_question_new_.store(false, std::memory_order_relaxed);
    for (auto& kv : missing_questions_) {
      if (!kv.second.sent) {
        kv.second.sent = true;
        asked.push_back(kv.first);
      }
    }
  }
  for (int64_t handle : asked) {
    std::optional<Key> key;
    for (const auto& kv : pending_) {
      if (kv.second.handle == handle) key = kv.first;
    }
    if (!key) {
      // Held behind an earlier request of its name (program order): that one is what it waits for.
      std::lock_guard<std::mutex> lock(queue_mu_);
      for (const auto& kv : held_) {
        for (const auto& item : kv.second) {
          if (item.second == handle) key = kv.first;
        }
      }
    }
    auto pending = key ? pending_.find(*key) : pending_.end();
    if (pending == pending_.end()) {
      std::lock_guard<std::mutex> lock(missing_mu_);
      auto it = missing_questions_.find(handle);
      if (it != missing_questions_.end()) it->second.done = true;  // not pending here: nothing to name
      missing_cv_.notify_all();
      continue;
    }
    if (pending->second.state == RequestState::kCached) SendThroughCoordinator(&pending->second);
    std::vector<int64_t>& askers = missing_asked_[*key];
    askers.push_back(handle);
    if (askers.size() > 1) continue;  // already asked rank 0 about it
    if (rank() == 0) {
      missing_queries_.push_back({0, *key, cycle_});
    } else {
      transport_->SendControl(0, kMissingQuery, EncodeMissingQuery(*key));
    }
  }
  if (coordinator_) AnswerMissingQueries();
}

void Engine::AnswerMissingQueries() {
  if (missing_queries_.empty()) return;
  std::vector<Coordinator::Waiting> table;
  bool looked = false;
  for (auto it = missing_queries_.begin(); it != missing_queries_.end();) {
    if (cycle_ < it->came_after_cycle + 2) {
      ++it;
      continue;
    }
    if (!looked) {
      table = coordinator_->Entries();
      looked = true;
    }
    std::optional<std::vector<int>> missing;
    for (const auto& entry : table) {
      if (entry.process_set == it->key.first && entry.name == it->key.second) missing = entry.missing;
    }
    if (it->origin == rank()) {
      DeliverMissing(it->key, missing);
    } else {
      transport_->SendControl(it->origin, kMissingAnswer, EncodeMissingAnswer(it->key, missing));
    }
    it = missing_queries_.erase(it);
  }
  // The questions left need cycles to settle: run them even if nobody has work.
  if (!missing_queries_.empty()) reannounce_ = true;
}

void Engine::DeliverMissing(const Key& key, const std::optional<std::vector<int>>& missing) {
  auto asked = missing_asked_.find(key);
  if (asked == missing_asked_.end()) return;
  {
    std::lock_guard<std::mutex> lock(missing_mu_);
    for (int64_t handle : asked->second) {
      auto it = missing_questions_.find(handle);
      if (it == missing_questions_.end()) continue;  // its asker gave up
      it->second.done = true;
      it->second.missing = missing;
    }
  }
  missing_asked_.erase(asked);
  missing_cv_.notify_all();
}

void Engine::AbandonMissingQuestions() {
  {
    std::lock_guard<std::mutex> lock(missing_mu_);
    for (auto& kv : missing_questions_) kv.second.done = true;
  }
  missing_cv_.notify_all();
}

}  // namespace herring
