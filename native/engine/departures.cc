// Departures: a rank that leaves the job in order while the others go on, as torch.distributed's
// ranks do (each calls destroy_process_group, or its process ends, when its own work is done;
// gloo's ranks are independent). Horovod's shutdown stays collective (Engine::Shutdown).
//
// Protocol. The leaving rank R submits a kLeave request (the name "leave.R"). It is uncached, so
// the cycle that takes it has a coordinator round, in which rank 0 decides it at once (only R
// submits it) and announces it to every rank with that cycle's responses. Every rank (R
// included) therefore learns of the departure in the same cycle, and:
//   - before that cycle's collectives run (BeginDepartures): R leaves the world in negotiation
//     (rank 0 no longer waits for its bit vector, the shared-memory AND skips it), rank 0's
//     coordinator drops what the sets with R were waiting for, and the goodbye R's transport is
//     about to send is expected (WorldFailure looks at the world only);
//   - after them (CompleteDepartures): what is pending in a process set that includes R fails,
//     naming R, on every member alike; later requests of such a set fail when they are submitted
//     (ValidateAndComplete). Sets without R go on as before.
// R's loop stops after that cycle; R then closes its transport, saying goodbye on every
// connection. A rank that vanishes without a goodbye (killed, crashed) is still a loss that fails
// the job, as before: the others read "rank N: connection closed (process exited or killed?)".
// A rank whose process fails but still runs its exit handlers (an uncaught Python exception) is
// no departure either: it aborts the job with the cause (AbortJob), and the others read
// "rank N aborted the job: rank N failed (uncaught exception ...)". Only a departure agreed here
// is called an orderly shutdown (DepartureText).
//
// Rank 0 coordinates the others' negotiation, so it leaves last: its Leave waits (at most
// HERRING_TIMEOUT_SECONDS) until every other rank has left, then shuts down; if some are still
// there at the deadline, that shutdown stops them too (Horovod's "has been shut down" error).
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "common/logging.h"
#include "engine/engine.h"

namespace herring {

void Engine::Leave() {
  if (!loop_.joinable() || !running() || size() == 1) {
    Shutdown();
    return;
  }
  const Deadline deadline = Deadline::AfterSeconds(config_.timeout_seconds);
  if (rank() == 0) {
    {
      std::unique_lock<std::mutex> lock(departures_mu_);
      while (departures_.load() < size() - 1 && running() && !deadline.Expired()) {
        // In slices: a failure of the job (no notification here) ends the wait too.
        departures_cv_.wait_until(lock, Deadline::Earlier(deadline, Deadline::AfterSeconds(0.5)).when());
      }
    }
    if (running() && departures_.load() < size() - 1) {
      HLOG(Warning) << "rank 0 coordinates negotiation and leaves last, but after " << config_.timeout_seconds
                    << " s (HERRING_TIMEOUT_SECONDS) " << (size() - 1 - departures_.load())
                    << " other ranks have not left: shutting the job down";
    }
    Shutdown();
    return;
  }
  Request leave;
  leave.meta.type = OpType::kLeave;
  leave.meta.name = "leave." + std::to_string(rank());
  leave.meta.process_set = 0;
  Status left;
  try {
    const int64_t handle = Enqueue(std::move(leave));
    left = Wait(handle, deadline);
    if (left.code() != StatusCode::kTimeout) Take(handle);
  } catch (const Error& e) {
    left = e.status();
  }
  if (!left.ok()) HLOG(Warning) << "rank " << rank() << " could not leave the job in order: " << left.message();
  Shutdown();  // the loop stops after the agreeing cycle; the transport says goodbye
}

void Engine::AbortJob(const std::string& why) {
  if (!loop_.joinable()) {
    Shutdown();
    return;
  }
  Fail(Status::Aborted(why));  // the abort message goes to every peer ahead of the goodbye
  Wake();
  Shutdown();
}

std::string Engine::DepartureText(int departed) const {
  return "rank " + std::to_string(departed) +
         " left the job (it shut down in order: torch.distributed.destroy_process_group or the end of its process)";
}

int Engine::DepartedMemberLocked(const ProcessSet& set) const {
  for (int d : departed_) {
    if (set.contains(d)) return d;
  }
  return -1;
}

void Engine::BeginDepartures(const std::vector<Response>& ready) {
  for (const Response& r : ready) {
    if (r.type != OpType::kLeave || !r.ok()) continue;
    const int departed = r.root;
    if (departed == rank()) {
      stop_after_cycle_ = true;  // this rank is the one leaving: its loop ends with this cycle
      continue;
    }
    MembershipChange change;
    change.kind = MembershipChange::kLeave;
    change.rank = departed;
    membership_.Apply(change);
    if (shm_bits_) shm_bits_->MarkDeparted(departed);
    {
      std::lock_guard<std::mutex> lock(sets_mu_);
      departed_.push_back(departed);
    }
    if (coordinator_) coordinator_->ForgetSetsWith(departed);
    if (deadlock_) deadlock_->Report(departed, {});
    {
      std::lock_guard<std::mutex> lock(departures_mu_);
      departures_++;
    }
    departures_cv_.notify_all();
    HLOG(Info) << DepartureText(departed) << " after cycle " << cycle_
               << "; collectives of the process sets that include it fail from now on";
  }
}

void Engine::CompleteDepartures(const std::vector<Response>& ready) {
  bool others = false;
  for (const Response& r : ready) {
    if (r.type != OpType::kLeave || !r.ok()) continue;
    if (r.root == rank()) {
      Finish(r, OpResult{});  // Leave() waits for it
    } else {
      others = true;
    }
  }
  if (others) FailRequestsOfDepartedSets();
}

void Engine::FailRequestsOfDepartedSets() {
  // The broken sets, by id, with the member that left (read once: no lock held below).
  std::map<int32_t, int> broken;
  {
    std::lock_guard<std::mutex> lock(sets_mu_);
    for (int32_t id : sets_.ids()) {
      const int d = DepartedMemberLocked(*sets_.Find(id));
      if (d >= 0) broken[id] = d;
    }
  }
  if (broken.empty()) return;
  const auto why = [&](int32_t set, OpType type, const std::string& name) {
    return Status::Aborted(std::string(OpTypeName(type)) + " '" + name + "' cannot run on rank " +
                           std::to_string(rank()) + ": " + DepartureText(broken.at(set)) + ", and process set " +
                           std::to_string(set) + " includes it");
  };
  std::vector<std::pair<Response, Status>> doomed;
  for (const auto& kv : pending_) {
    const RequestMeta& m = kv.second.request.meta;
    if (m.type == OpType::kLeave || !broken.count(kv.first.first)) continue;
    Response o;
    o.process_set = kv.first.first;
    o.name = kv.first.second;
    doomed.emplace_back(o, why(o.process_set, m.type, o.name));
  }
  for (auto& d : doomed) {
    OpResult failed;
    failed.status = d.second;
    Finish(d.first, std::move(failed));  // may release a request held behind it: swept below
  }
  std::vector<std::pair<int64_t, Status>> handles;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    std::deque<std::pair<Request, int64_t>> kept;
    for (auto& q : incoming_) {
      const RequestMeta& m = q.first.meta;
      if (m.type == OpType::kLeave || !broken.count(m.process_set)) {
        kept.push_back(std::move(q));
        continue;
      }
      handles.emplace_back(q.second, why(m.process_set, m.type, m.name));
      in_flight_.erase(Key{m.process_set, m.name});
    }
    incoming_.swap(kept);
    for (auto it = held_.begin(); it != held_.end();) {
      if (!broken.count(it->first.first)) {
        ++it;
        continue;
      }
      for (auto& q : it->second) handles.emplace_back(q.second, why(it->first.first, q.first.meta.type, it->first.second));
      if (!pending_.count(it->first)) in_flight_.erase(it->first);
      it = held_.erase(it);
    }
  }
  for (auto& h : handles) {
    OpResult failed;
    failed.status = h.second;
    handles_.Complete(h.first, std::move(failed));
  }
}

namespace {

// The rank a failure started from, or -1. Every loss and abort the engine reports starts with the
// rank it is about, and a relayed abort wraps the relayer's account of it:
//   "rank 2: connection closed (...)"                       (this rank read rank 2's death)
//   "rank 1 aborted the job: rank 2: connection closed ..." (rank 1 relayed it)
//   "rank 0 aborted the job: rank 2 aborted the job: rank 2 failed (uncaught exception ...)"
// so the origin is the rank named after the last relay prefix.
int FailureOrigin(const std::string& message) {
  static const std::string kRelay = " aborted the job: ";
  size_t at = 0;
  for (size_t relay = message.find(kRelay); relay != std::string::npos; relay = message.find(kRelay, at)) {
    at = relay + kRelay.size();
  }
  if (message.compare(at, 5, "rank ") != 0) return -1;
  size_t digits = at + 5, end = digits;
  while (end < message.size() && std::isdigit(static_cast<unsigned char>(message[end]))) ++end;
  if (end == digits || end - digits > 9) return -1;
  return std::stoi(message.substr(digits, end - digits));
}

}  // namespace

std::vector<int> Engine::LostRanks() const {
  std::vector<int> lost;
  std::vector<int> departed;
  {
    std::lock_guard<std::mutex> lock(sets_mu_);
    departed = departed_;
  }
  auto counts = [&](int r) {
    return r >= 0 && r < world_size() && r != rank() &&
           std::find(departed.begin(), departed.end(), r) == departed.end() &&
           std::find(lost.begin(), lost.end(), r) == lost.end();
  };
  // The rank the job's failure started from: a crash read here or relayed by a peer, or a rank
  // that aborted for its own reason (an uncaught exception). A survivor that relayed the failure
  // and then shut down (its own shrink_group) says goodbye, which is not a loss: only the origin
  // and the connections that closed without a goodbye count.
  const Status failed = failure();
  if (!failed.ok() && counts(FailureOrigin(failed.message()))) lost.push_back(FailureOrigin(failed.message()));
  if (transport_) {
    for (int r = 0; r < world_size(); ++r) {
      if (counts(r) && transport_->PeerStatus(r).code() == StatusCode::kPeerLost) lost.push_back(r);
    }
  }
  std::sort(lost.begin(), lost.end());
  return lost;
}

}  // namespace herring
