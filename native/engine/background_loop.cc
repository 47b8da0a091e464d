// The background loop: negotiate -> fuse -> execute -> complete, one cycle at a time.
//
// A cycle starts when this rank has new requests (at once if the engine was idle; a burst that
// arrived during the last cycle waits for its pause, at most HOROVOD_CYCLE_TIME), or when rank 0
// asks for it (kBegin) because another rank started one. Idle ranks block; nobody spins.
// How the ranks agree on a cycle's bits, over shared memory or TCP, and the coordinator's round
// for the requests the cache could not settle are control_plane.cc's.
#include <algorithm>

#include "common/logging.h"
#include "engine/engine.h"

namespace herring {

void Engine::Loop() {
  try {
    std::unique_lock<std::mutex> cycle(cycle_mu_);
    while (WaitForTrigger(cycle)) RunCycle();
  } catch (const Error& e) {
    Fail(e.status());
  } catch (const std::exception& e) {
    Fail(Status::Internal(std::string("background loop: ") + e.what()));
  }
  Status why = failure();
  stopped_ = true;
  AbandonMissingQuestions();
  handles_.FailAll(why.ok() ? Status::Shutdown(ShutDownText(2.0, shutdown_requested_.load())) : why);
  {
    std::lock_guard<std::mutex> lock(loop_done_mu_);
    loop_done_ = true;
  }
  loop_done_cv_.notify_all();
}

std::string Engine::ShutDownText(double await_seconds, bool by_this_rank) const {
  // Horovod's SHUT_DOWN_ERROR (horovod/common/common.h), word for word.
  std::string text =
      "Horovod has been shut down. This was caused by an exception on one of the ranks or an attempt to allreduce, "
      "allgather or broadcast a tensor after one of the ranks finished execution. If the shutdown was caused by an "
      "exception, you should see the exception in the log before the first shutdown message.";
  if (by_this_rank) {
    return text + " This rank (rank " + std::to_string(rank()) + ") shut down (hvd.shutdown()); hvd.init() starts again.";
  }
  // Another rank asked for the agreed shutdown: its goodbye names it (a crash or an abort fails
  // the job with its own message instead, and never comes here).
  std::vector<int> left;
  const Deadline deadline = Deadline::AfterSeconds(await_seconds);
  while (transport_) {
    left.clear();
    for (int r = 0; r < world_size(); ++r) {
      if (r != rank() && transport_->PeerStatus(r).code() == StatusCode::kShutdown) left.push_back(r);
    }
    if (!left.empty() || deadline.Expired() || shutdown_requested_.load()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return text + " The shutdown came from " + (left.empty() ? std::string("another rank") : RankList(left)) +
         " (it called hvd.shutdown() or its process ended) while this rank (rank " + std::to_string(rank()) +
         ") still ran.";
}

void Engine::DrainControl() {
  ControlMessage m;
  while (transport_->PopControl(&m)) {
    if (m.type == kAbortMessage) {
      throw Error(Status::Aborted("rank " + std::to_string(m.from) + " aborted the job: " + m.payload));
    }
    if (m.type == kJoinRequest || m.type == kLeaveRequest) {
      HandleMembershipRequest(m);
      continue;
    }
    if (m.type == kR2spSessionMessage) {
      r2sp_->StartServer(DecodeR2spSession(m.payload));
      continue;
    }
    if (m.type == kR2spEndMessage) {
      r2sp_->StopServer(DecodeR2spEnd(m.payload));
      continue;
    }
    if (m.type == kBlockedReport) {
      RouteBlockedReport(m.from, m.payload);
      continue;
    }
    if (m.type == kRelayedBlockedReport) {
      int32_t origin = -1;
      std::string report = DecodeRelayedReport(m.payload, &origin);
      if (origin < 0 || origin >= world_size()) {
        throw Error(Status::Internal("rank " + std::to_string(m.from) + " relayed a blocked report of rank " +
                                     std::to_string(origin)));
      }
      RouteBlockedReport(origin, report);
      continue;
    }
    if (m.type == kMissingQuery) {
      if (coordinator_) missing_queries_.push_back({m.from, DecodeMissingQuery(m.payload), cycle_});
      continue;
    }
    if (m.type == kMissingAnswer) {
      std::optional<std::vector<int>> missing;
      const Key key = DecodeMissingAnswer(m.payload, &missing);
      DeliverMissing(key, missing);
      continue;
    }
    if (m.type >= kContributeMessage && m.type <= kResponsesMessage) counters_.control_messages_received++;
    inbox_.push_back(std::move(m));
  }
}

Engine::Trigger Engine::LookForCycle(bool known_new_work) {
  const auto cycle_time = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::milli>(cycle_config_.cycle_time_ms));
  // After an agreed shutdown, peers closing their connections is expected, not a failure; after
  // a failure (a waiter's cycle may have failed) the loop ends and fails what is pending.
  if (stop_after_cycle_ || stopped_.load()) return {Trigger::kStop};
  DrainControl();
  Status f = WorldFailure();
  if (!f.ok()) throw Error(f);
  ServeMissingRanks();

  // Invitations for cycles we already took part in are stale.
  inbox_.erase(std::remove_if(inbox_.begin(), inbox_.end(),
                              [&](const ControlMessage& m) {
                                return m.type == kBeginMessage && CycleOf(m.payload) <= cycle_;
                              }),
               inbox_.end());
  // Over TCP a parent (the star's rank 0, a leader in the hosts' tree) learns of a cycle from a
  // child's contribution, a child from its parent's invitation; in shared memory everyone is
  // invited by the post of whoever started it.
  empty_handed_ = false;
  bool invited = std::any_of(inbox_.begin(), inbox_.end(), [&](const ControlMessage& m) {
    return (m.type == kContributeMessage || m.type == kBeginMessage) && CycleOf(m.payload) == cycle_ + 1;
  });
  invited = invited || (shm_bits_ && shm_bits_->SomeonePosted(cycle_ + 1));
  bool new_work = known_new_work || reannounce_ || shutdown_requested_.load() || membership_.HasPending();
  if (!new_work) {
    std::lock_guard<std::mutex> lock(queue_mu_);
    new_work = !incoming_.empty();
  }
  // Read once for every check below: a synchronous call looks for work on its own thread.
  const Clock::time_point now = Clock::now();
  looked_at_ = now;
  UncacheStalled(now);
  ReportBlocked(new_work, now);
  new_work = new_work || reannounce_;
  if (coordinator_) {
    Status stalled = stall_.Inspect(*coordinator_, now);
    counters_.stall_warnings = stall_.warnings();
    if (!stalled.ok()) throw Error(stalled);
    CheckDeadlock(now);
    // Responses the coordinator decided on its own (deadlock errors) go out in a cycle.
    new_work = new_work || coordinator_->HasDecided();
  }
  // A request that finds the engine idle starts a cycle at once. Requests that arrived while
  // the last cycle ran are a burst (a backward pass, a loop of async calls): they wait until it
  // pauses, so that it is negotiated and fused as one, but never longer than the cycle time.
  Clock::time_point due = now;
  if (new_work && batching_) {
    const Clock::time_point last_enqueue{Clock::duration(last_enqueue_ticks_.load(std::memory_order_relaxed))};
    due = std::min(last_enqueue + kBurstPause, batch_since_ + cycle_time);
  }
  if (invited) {
    // Another rank started a cycle. Joining it with nothing of our own makes an empty cycle,
    // and that rank a second one once our request comes, when our threads are about to submit
    // the same collective; so an invited rank without work waits for it, as long as such joins
    // have lately been wasted (IdleJoinPatience). Pending requests (announced or cached, waiting
    // for other ranks) and a joined rank's part are what the cycle may be waiting for: at once.
    if (!invited_at_ || invited_to_ != cycle_ + 1) {
      invited_at_ = now;
      invited_to_ = cycle_ + 1;
    }
    const Clock::time_point join_at = *invited_at_ + idle_join_patience_.current();
    const bool something = new_work || joined_ || !pending_.empty();
    if (something || now >= join_at) {
      invited_at_.reset();
      empty_handed_ = !something;
      return {Trigger::kRun};
    }
    return {Trigger::kSleep, join_at, !new_work};
  }
  if (new_work && now >= due) {
    if (!batching_) counters_.idle_starts++;  // a lone request: the cycle starts at once
    return {Trigger::kRun};
  }
  return {Trigger::kSleep, new_work ? due : now + std::chrono::seconds(1), !new_work};
}

bool Engine::WaitForTrigger(std::unique_lock<std::mutex>& cycle) {
  while (true) {
    // Read before looking for work: a wake-up after these reads cuts the sleep below short.
    const uint32_t bell = shm_bits_ ? shm_bits_->Doorbell() : 0;
    const uint64_t seen = WakeSeq();
    const Trigger next = LookForCycle();
    if (next.kind != Trigger::kSleep) return next.kind == Trigger::kRun;
    {
      std::lock_guard<std::mutex> lock(wake_mu_);
      if (wake_seq_ != seen) continue;  // woken since we looked (WakeForNewWork rings only idle loops)
      idle_waiting_ = next.idle;
    }
    // A waiter may run a cycle while the loop sleeps (RunCycleForWaiter).
    cycle.unlock();
    if (shm_bits_) {
      // One futex that both this process's threads (Wake) and the peers (InviteLate) ring.
      shm_bits_->WaitForInvitation(bell, next.until - Clock::now());
    } else {
      AwaitWake(seen, next.until);
    }
    {
      std::lock_guard<std::mutex> lock(wake_mu_);
      idle_waiting_ = false;
    }
    cycle.lock();
  }
}

bool Engine::WaiterRuns(const Request& request) const {
  // Only a synchronous request. Asynchronous ones come in bursts (a backward pass, a loop of
  // calls) that the loop batches while the application thread goes on; measured, the tiny-tensor
  // step ran 15-25% slower when its waits ran cycles too.
  if (!config_.caller_runs_cycles || !request.waiter_follows) return false;
  // Where every rank of the host has a core, any size: the hand-off costs a wake-up on another
  // core whenever the scheduler puts the caller and the loop's thread apart, which it does in some
  // launches and not others. Measured at np=2 on 2 cores, 1 MiB: 99-100 us in 6 of 6 launches
  // with the caller running it, against 104-223 us with the hand-off (2x when the two threads of
  // each rank were pinned apart, 500-775 us in some unpinned launches). With more ranks than
  // cores, up to kOversubscribedCallerBytes.
  if (local_size() <= available_cpus_) return true;
  return static_cast<int64_t>(TensorBytes(request.meta)) <= kOversubscribedCallerBytes;
}

void Engine::RunCycleForWaiter(int64_t handle) {
  if (!config_.caller_runs_cycles || stopped_.load()) return;
  // The cycle's lock first: held, the request found queued below stays queued (only a cycle takes
  // it), so LookForCycle need not look at the queue again.
  std::unique_lock<std::mutex> cycle(cycle_mu_, std::try_to_lock);
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    auto it = std::find_if(incoming_.begin(), incoming_.end(),
                           [handle](const std::pair<Request, int64_t>& q) { return q.second == handle; });
    // Not queued (taken, or held behind its name), or the loop's to run (and woken for it).
    if (it == incoming_.end() || !it->first.waiter_follows) return;
  }
  if (!cycle.owns_lock()) {
    // The loop is in a cycle, or between looking for work and sleeping: it looks again after
    // this wake-up (the request may not have woken it: Request::waiter_follows).
    WakeForNewWork();
    return;
  }
  try {
    const Trigger next = LookForCycle(/*known_new_work=*/true);
    bool queued;
    if (next.kind == Trigger::kRun) {
      counters_.waiter_cycles++;
      waiter_cycle_ = true;
      RunCycle();
      waiter_cycle_ = false;
      // A request queued after RunCycle looked was queued with the cycle's lock held: its waiter
      // found the lock taken and woke the loop, or the request woke it itself.
      queued = queued_after_cycle_;
      cycle.unlock();
    } else {
      cycle.unlock();
      std::lock_guard<std::mutex> lock(queue_mu_);
      queued = !incoming_.empty();
    }
    // The loop must hear of a stop, of work whose cycle is not due yet (a burst), and of requests
    // queued meanwhile (one released from behind its name): its sleep may have been planned
    // before they came.
    if (next.kind == Trigger::kStop || (next.kind == Trigger::kSleep && !next.idle) || queued) WakeForNewWork();
  } catch (const Error& e) {
    waiter_cycle_ = false;
    if (cycle.owns_lock()) cycle.unlock();
    Fail(e.status());  // as the loop does; woken, it sees the failure and fails what is pending
    Wake();
  } catch (const std::exception& e) {
    waiter_cycle_ = false;
    if (cycle.owns_lock()) cycle.unlock();
    Fail(Status::Internal(std::string("cycle run by a waiter: ") + e.what()));
    Wake();
  }
}

void Engine::TakeNewRequests(std::vector<RequestMeta>* uncached, std::vector<uint32_t>* stale) {
  std::deque<std::pair<Request, int64_t>>& fresh = taken_;  // empty: cleared at the end
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    fresh.swap(incoming_);
  }
  took_requests_ = !fresh.empty();
  const Clock::time_point now = last_cycle_start_;  // RunCycleSteps read it just now; once for a burst
  if (!fresh.empty()) last_activity_ = now;
  for (auto& item : fresh) {
    Key key{item.first.meta.process_set, item.first.meta.name};
    Pending p;
    p.request = std::move(item.first);
    p.handle = item.second;
    p.taken_at = now;
    if (timeline_) {
      const RequestMeta& m = p.request.meta;
      const std::string lane = Timeline::TensorLane(OpTypeName(m.type), m.name);
      p.taken_us = Timeline::NowMicros();
      timeline_->Span(lane, "QUEUE", p.request.enqueued_us, p.taken_us);
      timeline_->NegotiateStart(OpTypeName(m.type), m.name);
    }
    if (spare_pending_.empty()) {
      pending_.insert_or_assign(std::move(key), std::move(p));
    } else {
      spare_pending_.key() = std::move(key);
      spare_pending_.mapped() = std::move(p);
      auto placed = pending_.insert(std::move(spare_pending_));  // empties spare_pending_ if inserted
      if (!placed.inserted) {
        // The name was pending already: the newer request replaces it (as insert_or_assign does).
        placed.position->second = std::move(placed.node.mapped());
        spare_pending_ = std::move(placed.node);
      }
    }
  }
  fresh.clear();  // keeps its map and a block for the next cycle's swap
  if (departures_.load() > 0) FailRequestsOfDepartedSets();  // submitted just as a member left
  reannounce_ = false;
  for (auto& kv : pending_) {
    Pending& p = kv.second;
    if (p.state != RequestState::kNew) continue;
    RequestMeta& m = p.request.meta;
    m.waited_ms = static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::milliseconds>(now - p.taken_at).count());
    if (p.uncache_position >= 0) {
      // Stalled: evict its entry everywhere so the coordinator sees who submitted it.
      stale->push_back(static_cast<uint32_t>(p.uncache_position));
      p.uncache_position = -1;
      p.state = RequestState::kAnnounced;
      uncached->push_back(m);
      continue;
    }
    if (m.type == OpType::kJoin) joined_ = true;
    uint32_t position = 0;
    ResponseCache::Match match = ResponseCache::Match::kMiss;
    bool cacheable = cache_.capacity() > 0 && m.type != OpType::kJoin && m.type != OpType::kAddProcessSet &&
                     m.type != OpType::kRemoveProcessSet;
    if (cacheable) {
      const ProcessSet* set = sets_.Find(m.process_set);
      match = cache_.Lookup(m, set ? set->member_index(rank()) : -1, &position);
    }
    if (match == ResponseCache::Match::kHit) {
      p.state = RequestState::kCached;
      p.position = position;
      counters_.cache_hits++;
      continue;
    }
    if (match == ResponseCache::Match::kStale) {
      stale->push_back(position);
      counters_.cache_stale++;
    } else {
      counters_.cache_misses++;
    }
    p.state = RequestState::kAnnounced;
    uncached->push_back(m);
  }
  // In (set, name) order, as the coordinator has always received them (pending_ is hashed).
  std::sort(uncached->begin(), uncached->end(), ByCollectiveKey());
}

std::vector<uint64_t> Engine::ReadyBits(bool has_uncached, bool has_stale) const {
  BitLayout layout(cache_.capacity());
  std::vector<uint64_t> bits(layout.words(), 0);
  bits[0] = kAllStatusBits;
  if (shutdown_requested_.load()) bits[0] &= ~kNoShutdown;
  if (has_uncached) bits[0] &= ~kNoUncached;
  if (has_stale) bits[0] &= ~kNoStale;
  if (empty_handed_) bits[0] &= ~kNoEmptyJoin;
  // Idle at every position (whole words at a time: this runs every cycle, and the capacity is a
  // thousand positions), except where this rank has a request pending (below).
  for (size_t w = 0; w < layout.words_per_half; ++w) bits[layout.idle_word(64 * w)] = ~0ull;
  if (cache_.capacity() % 64 != 0) bits.back() = (1ull << (cache_.capacity() % 64)) - 1;
  // Ready for the collectives of sets this rank is not in (all of them once it joined): only the
  // occupied positions can be, and their entries mostly share one set, looked up once.
  int32_t looked_up = -1;
  bool outside = true;
  for (uint32_t p : cache_.occupied_positions()) {
    const int32_t id = cache_.at(p).process_set;
    if (id != looked_up) {  // ids are never negative
      const ProcessSet* set = sets_.Find(id);
      outside = set == nullptr || !set->contains(rank());
      looked_up = id;
    }
    if (joined_ || outside) bits[layout.ready_word(p)] |= BitLayout::mask(p);
  }
  for (const auto& kv : pending_) {
    if (kv.second.state != RequestState::kCached) continue;
    uint32_t p = kv.second.position;
    bits[layout.ready_word(p)] |= BitLayout::mask(p);
    bits[layout.idle_word(p)] &= ~BitLayout::mask(p);
  }
  return bits;
}

ControlMessage Engine::AwaitControl(int from, uint32_t type) {
  // Bounded by peer liveness: a peer that stops answering is declared lost by the transport
  // after HERRING_TIMEOUT_SECONDS of silence, which wakes us up with its error.
  while (true) {
    const uint64_t seen = WakeSeq();  // before draining: a message after it cuts the sleep short
    DrainControl();
    for (auto it = inbox_.begin(); it != inbox_.end(); ++it) {
      if (it->from == from && it->type == type && CycleOf(it->payload) == cycle_) {
        ControlMessage m = std::move(*it);
        inbox_.erase(it);
        return m;
      }
    }
    Status f = transport_->PeerStatus(from);
    if (f.ok()) {
      f = WorldFailure();
      // Another rank that said goodbye may have seen this cycle's shutdown agreement before us;
      // only the rank we wait for leaving is an error here.
      if (f.code() == StatusCode::kShutdown) f = Status::OK();
    }
    if (!f.ok()) throw Error(f);
    AwaitWake(seen, Clock::now() + std::chrono::seconds(1));
  }
}

void Engine::ApplyMapUpdate(const MapUpdate& update) {
  ProcessSet* set = sets_.Find(update.process_set);
  if (set == nullptr) return;
  if (update.weights.size() != static_cast<size_t>(set->servers.map.num_shards())) {
    throw Error(Status::Internal("a partition map update for " + std::to_string(update.weights.size()) +
                                 " shards reached a set with " + std::to_string(set->servers.map.num_shards())));
  }
  set->servers.map = PartitionMap::Weighted(update.weights, update.version);
  counters_.partition_map_version = update.version;
  HLOG(Debug) << "partition map of process set " << update.process_set << " now " << set->servers.map.ToString();
}

void Engine::UncacheStalled(Clock::time_point now) {
  for (auto& kv : pending_) {
    Pending& p = kv.second;
    if (p.state == RequestState::kCached && stall_.ShouldUncache(p.taken_at, now)) SendThroughCoordinator(&p);
  }
}

void Engine::SendThroughCoordinator(Pending* p) {
  // As stale: its entry is evicted everywhere, and every rank that has it pending announces it.
  p->state = RequestState::kNew;
  p->uncache_position = p->position;
  reannounce_ = true;
}

void Engine::ReportBlocked(bool new_work, Clock::time_point now) {
  if (config_.deadlock_seconds <= 0 || membership_.world().size() == 1) return;
  const auto quiet_for = std::chrono::duration<double>(now - last_activity_).count();
  std::vector<AwaitedCollective> awaited;
  if (!new_work && quiet_for >= config_.deadlock_seconds / 2) {
    for (const auto& kv : pending_) {
      // A request held behind this one (same name, program order) waits for it too.
      if (handles_.Awaited(kv.second.handle) || HeldRequestAwaited(kv.first)) {
        awaited.push_back({kv.first.first, kv.first.second, kv.second.request.meta.type,
                           kv.second.request.in_program_order});
      }
    }
  }
  // In (set, name) order: the report changes only when what is awaited does (pending_ is hashed).
  std::sort(awaited.begin(), awaited.end(), ByCollectiveKey());
  if (awaited == reported_awaited_) return;
  reported_awaited_ = awaited;
  if (!awaited.empty()) {
    // Rank 0 can only judge what its coordinator sees: cached requests take the coordinator path.
    for (auto& kv : pending_) {
      Pending& p = kv.second;
      if (p.state == RequestState::kCached) {
        p.state = RequestState::kNew;
        p.uncache_position = p.position;
        reannounce_ = true;
      }
    }
  }
  if (deadlock_) {
    deadlock_->Report(rank(), std::move(awaited));
  } else if (hierarchical_) {
    RouteBlockedReport(rank(), EncodeAwaited(awaited));  // through the host's leader and the tree
  } else {
    transport_->SendControl(0, kBlockedReport, EncodeAwaited(awaited));
  }
}

void Engine::CheckDeadlock(Clock::time_point now) {
  if (!deadlock_) return;
  auto verdict = deadlock_->Check(*coordinator_, size(), now);
  if (!verdict) return;
  HLOG(Error) << verdict->message;
  coordinator_->FailEntries(verdict->collectives, verdict->fail_join, verdict->message);
}

void Engine::RevertCachedAt(uint32_t position) {
  for (auto& kv : pending_) {
    if (kv.second.state == RequestState::kCached && kv.second.position == position) {
      kv.second.state = RequestState::kNew;
      reannounce_ = true;
    }
  }
}

void Engine::RunCycle() {
  RunCycleSteps();
  // What arrived while the cycle ran is a burst still going on (see WaitForTrigger).
  std::lock_guard<std::mutex> lock(queue_mu_);
  queued_after_cycle_ = !incoming_.empty();
  // A request that arrived during a cycle this rank only joined (another rank's, or one with
  // nothing of its own) is not part of a burst: it starts the next cycle at once.
  batching_ = took_requests_ && queued_after_cycle_;
  if (batching_) batch_since_ = Clock::now();  // read only while batching
}

void Engine::RunCycleSteps() {
  ++cycle_;
  last_cycle_start_ = looked_at_;  // LookForCycle decided on this cycle just now
  const int64_t cycle_start_us = timeline_ ? Timeline::NowMicros() : 0;
  if (timeline_) timeline_->MarkCycleStart();
  std::vector<RequestMeta> uncached;
  std::vector<uint32_t> stale;
  TakeNewRequests(&uncached, &stale);
  faults_.At("negotiate", transport_.get());
  const bool decided = coordinator_ && coordinator_->HasDecided();  // rank 0's own errors to deliver
  // The cycle's result: the agreed bits, and what rode with them for the execution below.
  const AgreedCycle negotiated = AgreeOnBits(ReadyBits(!uncached.empty() || decided, !stale.empty()));
  const std::vector<uint64_t>& agreed = negotiated.bits;
  if (!(agreed[0] & kNoShutdown)) {
    HLOG(Debug) << "shutdown agreed in cycle " << cycle_;
    stop_after_cycle_ = true;
    empty_handed_ = false;
    return;
  }
  std::vector<Response> fresh;
  std::vector<uint32_t> evict;
  const bool coordinator_round = !(agreed[0] & kNoUncached) || !(agreed[0] & kNoStale);
  // Counted together, once the AND decided, so that a snapshot taken by another thread (a test
  // comparing cycles with rounds) never sees a cycle whose round is still being negotiated.
  if (coordinator_round) counters_.coordinator_rounds++;
  counters_.cycles++;
  if (coordinator_round) CoordinatorRound(uncached, stale, &fresh, &evict);

  std::vector<Response>& ready = ready_;
  ready.clear();
  BitLayout layout(cache_.capacity());
  // In position order, word by word: only the set bits of (ready and not idle) are visited.
  for (size_t w = 0; w < layout.words_per_half; ++w) {
    uint64_t go = agreed[layout.ready_word(64 * w)] & ~agreed[layout.idle_word(64 * w)];
    for (; go != 0; go &= go - 1) {
      const uint32_t p = static_cast<uint32_t>(64 * w + __builtin_ctzll(go));
      if (!cache_.occupied(p)) continue;
      // Copied into a response of an earlier cycle where there is one: its name and shapes keep
      // their memory.
      if (!spare_responses_.empty()) {
        ready.push_back(std::move(spare_responses_.back()));
        spare_responses_.pop_back();
        ready.back() = cache_.at(p);
      } else {
        ready.push_back(cache_.at(p));
      }
      cache_.Touch(p);
    }
  }
  for (uint32_t p : evict) {
    cache_.Erase(p);
    RevertCachedAt(p);
  }
  for (auto& r : fresh) {
    if (cache_.capacity() > 0 && ResponseCache::Cacheable(r)) {
      int64_t evicted = -1;
      cache_.Put(r, &evicted);
      if (evicted >= 0) RevertCachedAt(static_cast<uint32_t>(evicted));
    }
    ready.push_back(std::move(r));
  }
  const bool decided_something = !ready.empty() || coordinator_round;
  if (empty_handed_) {
    // This rank's part was what the others waited for, or a wasted meeting of every rank.
    counters_.empty_joins++;
    if (!decided_something) counters_.wasted_empty_joins++;
    idle_join_patience_.Joined(decided_something);
    empty_handed_ = false;
  } else if (!decided_something && !(agreed[0] & kNoEmptyJoin)) {
    // Another rank's empty join wasted this cycle. Any rank may be the late one next time, so
    // every rank learns from it, not only the one that joined (IdleJoinPatience::Joined).
    idle_join_patience_.Joined(false);
  }
  if (timeline_) {
    const int64_t now = Timeline::NowMicros();
    const bool coordinated = !(agreed[0] & kNoUncached) || !(agreed[0] & kNoStale);
    timeline_->Span("negotiation", coordinated ? "CYCLE (coordinator round)" : "CYCLE (bit vector only)",
                    cycle_start_us, now, "cycle " + std::to_string(cycle_));
    for (const auto& r : ready) {
      timeline_->NegotiateEnd(OpTypeName(r.type), r.name);  // the span open on this rank's lane, if any
    }
  }
  BeginDepartures(ready);
  Execute(ready, negotiated.with_bits);
  CompleteDepartures(ready);
  for (auto& r : ready) {
    if (spare_responses_.size() < kSpareResponses) spare_responses_.push_back(std::move(r));
  }
  ready.clear();
  AutotuneAfterCycle();
  // Servers join and leave between two steps: after this cycle's collectives, on every rank.
  for (const auto& c : membership_.TakeAnnounced()) ApplyMembership(c);
}

}  // namespace herring
