#include "transport/in_memory_transport.h"

#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>

namespace herring {
namespace {

std::string RankText(int rank) { return "rank " + std::to_string(rank); }

CompletionPtr Finished(Status status) {
  auto c = std::make_shared<Completion>();
  c->Finish(std::move(status));
  return c;
}

// Completions to finish once the fabric's mutex is released: Finish wakes waiters, who would
// otherwise run straight into the mutex we still hold.
using Outcomes = std::vector<std::pair<CompletionPtr, Status>>;

void FinishAll(Outcomes* outcomes) {
  for (auto& [done, status] : *outcomes) done->Finish(std::move(status));
  outcomes->clear();
}

}  // namespace

struct InMemoryFabric::State {
  struct Key {  // (the other rank, tag), as seen by the receiving rank
    int peer;
    uint64_t tag;
    bool operator<(const Key& o) const { return std::tie(peer, tag) < std::tie(o.peer, o.tag); }
  };
  struct PostedRecv {
    void* data;
    size_t bytes;
    CompletionPtr done;
  };
  struct Rank {
    std::map<Key, PostedRecv> posted;
    std::map<Key, std::vector<uint8_t>> arrived;  // sent before the receive was posted
    std::deque<ControlMessage> inbox;
    Status lost;    // what the peers see once this rank was killed
    Status closed;  // what the rank itself sees once killed
    Status abort;
    Status first_failure;

    // What this rank's new transfers finish with at once: its closing, else its abort (OK: neither).
    const Status& Stopped() const { return !closed.ok() ? closed : abort; }
  };

  InMemoryFabricOptions options;
  std::mutex mu;
  std::vector<Rank> ranks;
  // Sends whose data is being copied into a claimed receive outside the mutex: (from, to, tag).
  // They still count as in flight for the one-message-per-key rule.
  std::set<std::tuple<int, int, uint64_t>> copying;

  bool InRange(int rank) const { return rank >= 0 && rank < static_cast<int>(ranks.size()); }
  Status OutOfRange(const char* what, int peer) const {
    return Status::InvalidArgument(std::string(what) + " to/from rank " + std::to_string(peer) +
                                   " outside a job of size " + std::to_string(ranks.size()));
  }
  Status NoSuchRank(int rank) const {
    return Status::InvalidArgument("InMemoryFabric: no rank " + std::to_string(rank) + " in a fabric of " +
                                   std::to_string(ranks.size()));
  }
  // Fails rank r's posted receives (only those from `from` when from >= 0). mu held.
  void FailPostedLocked(int r, int from, const Status& status, Outcomes* out) {
    auto& posted = ranks[r].posted;
    for (auto it = posted.begin(); it != posted.end();) {
      if (from >= 0 && it->first.peer != from) {
        ++it;
        continue;
      }
      out->emplace_back(it->second.done, status);
      it = posted.erase(it);
    }
  }
  void AbortLocked(int r, const Status& reason, Outcomes* out) {
    Rank& rank = ranks[r];
    if (rank.abort.ok()) rank.abort = reason;
    FailPostedLocked(r, -1, rank.abort, out);
  }
  void Kill(int victim_rank) {
    Outcomes outcomes;
    {
      std::lock_guard<std::mutex> lock(mu);
      Rank& victim = ranks[victim_rank];
      if (!victim.lost.ok()) return;
      victim.lost = Status::PeerLost(RankText(victim_rank) + ": killed (a simulated crash of its process)");
      victim.closed = Status::Shutdown(RankText(victim_rank) +
                                       ": this rank was killed (simulated crash); its transport is closed");
      if (victim.first_failure.ok()) victim.first_failure = victim.closed;
      FailPostedLocked(victim_rank, -1, victim.closed, &outcomes);
      victim.arrived.clear();
      victim.inbox.clear();
      for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
        Rank& survivor = ranks[r];
        if (r == victim_rank || !survivor.lost.ok()) continue;
        if (survivor.first_failure.ok()) survivor.first_failure = victim.lost;
        FailPostedLocked(r, victim_rank, victim.lost, &outcomes);
      }
    }
    FinishAll(&outcomes);
  }
};

// ------------------------------------------------------------------------------------------
// The fabric

InMemoryFabric::InMemoryFabric(InMemoryFabricOptions options) : state_(std::make_unique<State>()) {
  if (options.size < 1) {
    throw Error(Status::InvalidArgument("InMemoryFabric: size must be at least 1, got " +
                                        std::to_string(options.size)));
  }
  state_->options = options;
  state_->ranks.resize(options.size);
  for (int r = 0; r < options.size; ++r) {
    endpoints_.push_back(std::unique_ptr<InMemoryTransport>(new InMemoryTransport(state_.get(), r)));
  }
}

InMemoryFabric::~InMemoryFabric() {
  Outcomes outcomes;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    for (int r = 0; r < size(); ++r) {
      state_->FailPostedLocked(r, -1, Status::Shutdown(RankText(r) + ": the in-memory fabric was destroyed while "
                                                                     "this transfer was pending"),
                               &outcomes);
    }
  }
  FinishAll(&outcomes);
}

int InMemoryFabric::size() const { return static_cast<int>(endpoints_.size()); }

InMemoryTransport& InMemoryFabric::endpoint(int rank) {
  if (!state_->InRange(rank)) throw Error(state_->NoSuchRank(rank));
  return *endpoints_[rank];
}

void InMemoryFabric::Kill(int rank) {
  if (!state_->InRange(rank)) throw Error(state_->NoSuchRank(rank));
  state_->Kill(rank);
}

// ------------------------------------------------------------------------------------------
// One rank's end

int InMemoryTransport::size() const { return static_cast<int>(state_->ranks.size()); }

CompletionPtr InMemoryTransport::Send(int peer, uint64_t tag, const void* data, size_t bytes) {
  State& s = *state_;
  if (!s.InRange(peer)) return Finished(s.OutOfRange("Send", peer));
  State::PostedRecv claimed;
  Status mismatch;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    State::Rank& self = s.ranks[rank_];
    if (!self.Stopped().ok()) return Finished(self.Stopped());
    State::Rank& dst = s.ranks[peer];
    if (!dst.lost.ok()) return Finished(dst.lost);
    const State::Key key{rank_, tag};
    if (dst.arrived.count(key) || s.copying.count({rank_, peer, tag})) {
      return Finished(Status::InvalidArgument(RankText(rank_) + ": a send to rank " + std::to_string(peer) +
                                              " with tag " + std::to_string(tag) + " is already in flight"));
    }
    auto it = dst.posted.find(key);
    if (it == dst.posted.end()) {
      // Copied under the mutex: simpler than reserving the key while copying, and the fabric only
      // carries test-sized data.
      const auto* bytes_in = static_cast<const uint8_t*>(data);
      dst.arrived[key].assign(bytes_in, bytes_in + bytes);
      return Finished(Status::OK());
    }
    claimed = it->second;
    dst.posted.erase(it);
    if (claimed.bytes != bytes) {
      mismatch = Status::InvalidArgument(SizeMismatchText(peer, rank_, tag, claimed.bytes, bytes));
    } else {
      s.copying.insert({rank_, peer, tag});
    }
  }
  if (!mismatch.ok()) {
    // The receiver's error is the job's error; the sender is not told (as over TCP).
    claimed.done->Finish(mismatch);
    return Finished(Status::OK());
  }
  // The receive is ours alone now: copy without holding up the other ranks.
  if (bytes > 0) std::memcpy(claimed.data, data, bytes);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.copying.erase({rank_, peer, tag});
  }
  claimed.done->Finish(Status::OK());
  return Finished(Status::OK());
}

CompletionPtr InMemoryTransport::Recv(int peer, uint64_t tag, void* data, size_t bytes) {
  State& s = *state_;
  if (!s.InRange(peer)) return Finished(s.OutOfRange("Recv", peer));
  std::vector<uint8_t> ready;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    State::Rank& self = s.ranks[rank_];
    if (!self.Stopped().ok()) return Finished(self.Stopped());
    const State::Key key{peer, tag};
    if (self.posted.count(key) || s.copying.count({peer, rank_, tag})) {
      return Finished(Status::InvalidArgument(RankText(rank_) + ": a receive of tag " + std::to_string(tag) +
                                              " from rank " + std::to_string(peer) + " is already posted"));
    }
    auto it = self.arrived.find(key);
    if (it != self.arrived.end()) {
      ready = std::move(it->second);
      self.arrived.erase(it);
      if (ready.size() != bytes) {
        // Dropped: the ranks disagree about the collective, which is about to fail with this.
        return Finished(Status::InvalidArgument(SizeMismatchText(rank_, peer, tag, bytes, ready.size())));
      }
    } else {
      if (!s.ranks[peer].lost.ok()) return Finished(s.ranks[peer].lost);
      auto done = std::make_shared<Completion>();
      self.posted[key] = State::PostedRecv{data, bytes, done};
      return done;
    }
  }
  if (bytes > 0) std::memcpy(data, ready.data(), bytes);
  return Finished(Status::OK());
}

void InMemoryTransport::SendControl(int peer, uint32_t type, const std::string& payload) {
  State& s = *state_;
  if (!s.InRange(peer)) throw Error(s.OutOfRange("SendControl", peer));
  Outcomes outcomes;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    State::Rank& dst = s.ranks[peer];
    if (!s.ranks[rank_].closed.ok() || !dst.lost.ok()) return;  // a dead rank says nothing, hears nothing
    dst.inbox.push_back(ControlMessage{rank_, type, payload});
    if (peer != rank_ && s.options.abort_control_type != 0 && type == s.options.abort_control_type) {
      Status reason = Status::Aborted(RankText(rank_) + " aborted the job: " + payload);
      if (dst.first_failure.ok()) dst.first_failure = reason;
      s.AbortLocked(peer, reason, &outcomes);
    }
  }
  FinishAll(&outcomes);
}

bool InMemoryTransport::PopControl(ControlMessage* out) {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto& inbox = state_->ranks[rank_].inbox;
  if (inbox.empty()) return false;
  *out = std::move(inbox.front());
  inbox.pop_front();
  return true;
}

Status InMemoryTransport::PeerStatus(int peer) const {
  State& s = *state_;
  if (!s.InRange(peer)) return s.OutOfRange("PeerStatus", peer);
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.ranks[rank_].closed.ok()) return s.ranks[rank_].closed;
  return s.ranks[peer].lost;
}

Status InMemoryTransport::FirstFailure() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->ranks[rank_].first_failure;
}

void InMemoryTransport::Abort(const Status& reason) {
  const Status status = reason.ok() ? Status::Aborted(RankText(rank_) + ": transport aborted") : reason;
  Outcomes outcomes;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->AbortLocked(rank_, status, &outcomes);
  }
  FinishAll(&outcomes);
}

void InMemoryTransport::ResetConnections() { state_->Kill(rank_); }

}  // namespace herring
