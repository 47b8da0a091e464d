// How the ranks agree each cycle, in one place: AgreeOnBits, called by the background loop
// (background_loop.cc), returns the agreed bit vectors and what rode with them (AgreedCycle).
//   - One host: the ranks AND their vectors in shared memory (engine/shm_bits_exchange.h), each
//     one's input of a lone small allreduce beside its vector (HERRING_INPUTS_WITH_BITS).
//   - Over TCP: the star (rank 0 hears from everyone and answers everyone) or, across hosts, the
//     hierarchical plane (each host ANDs in shared memory as above, its leader combines the hosts'
//     ANDs in a binomial tree rooted at rank 0: engine/control_tree.h).
// The tree carries exactly the star's messages (contributions up, invitations and results down),
// so rank 0's authority is unchanged: PSLD's samples are merged on the way up, its maps and the
// membership announcements ride down in the result every rank decodes. The deadlock detector's
// reports (rare: when what a rank is blocked on changes) climb the same tree to rank 0.
#include <algorithm>
#include <set>

#include "engine/engine.h"
#include "kernels/integer_average.h"
#include "ops/shm_staging.h"

namespace herring {

// ---- The shared-memory half: one host, or each host of the hierarchical plane.

void Engine::AttachShmControlPlane(Deadline deadline) {
  // The same decision on every rank: it depends only on knobs (whose fingerprints must match)
  // and on the topology everyone learned in the rendezvous.
  // PSLD's samples, dedicated servers and elastic slots change who negotiates or what rank 0
  // hears from each rank: they keep the TCP star (the knob's row in the README says so).
  const bool extras = config_.psld_balancer || config_.dedicated_servers > 0 || config_.elastic_slots > 0;
  const size_t words = BitLayout(cache_.capacity()).words();
  if (!config_.shm_control_plane || world_size() < 2 || extras || !ShmBitsExchange::Fits(words)) return;
  if (topo_.num_hosts() == 1) {
    shm_bits_ = ShmBitsExchange::Attach(ArenaName(-1) /* no process set has id -1 */, rank(), world_size(), deadline,
                                        [this] { return CheckAbort(); });
    shm_bell_.store(shm_bits_.get(), std::memory_order_release);
    return;
  }
  // Across hosts: each host's first rank leads it; the leaders' tree is rooted at rank 0, whose
  // host comes first in the topology (hosts are numbered by their first rank).
  std::vector<int> leaders;
  for (int h = 0; h < topo_.num_hosts(); ++h) leaders.push_back(topo_.ranks_on_host(h).front());
  if (leaders.front() != 0) return;  // cannot happen with hosts numbered by first rank; the star then
  host_ranks_ = topo_.ranks_on_host(topo_.host_of(rank()));
  host_leader_ = host_ranks_.front();
  if (rank() == host_leader_) leader_tree_ = ControlTree::Binomial(leaders, rank());
  hierarchical_ = true;
  if (host_ranks_.size() > 1) {
    shm_bits_ = ShmBitsExchange::AttachHost(ArenaName(-1), topo_.local_index(rank()), host_ranks_, words, deadline,
                                            [this] { return CheckAbort(); });
    shm_bell_.store(shm_bits_.get(), std::memory_order_release);
  }
}

const Engine::Pending* Engine::LoneSmallAllreduce(size_t words) const {
  // Across hosts too: the inputs spare the host's sum its own hand-off, before its leader trades
  // the host sums with the other hosts' (ops/herring/small_exchange.h).
  if (!config_.inputs_with_bits || joined_ || pending_.size() != 1) return nullptr;
  const Pending& p = pending_.begin()->second;
  if (p.state != RequestState::kCached || p.request.meta.type != OpType::kAllreduce) return nullptr;
  const ProcessSet* set = sets_.Find(p.request.meta.process_set);
  if (set == nullptr || set->size() != world_size()) return nullptr;
  const Response& r = cache_.at(p.position);
  // An integer Average is reduced as its int64 split (execution.cc), not as the posted inputs.
  if (IsIntegerAverage(r.dtype, r.reduce_op)) return nullptr;
  const size_t bytes = TensorBytes(r);
  const int64_t one_step = OneStepAllreduceBytes(cycle_config_.small_message_bytes, set->arena.get());
  const size_t limit = std::min<size_t>(ShmBitsExchange::InputCapacity(words), static_cast<size_t>(one_step));
  return bytes > 0 && bytes <= limit ? &p : nullptr;
}

void Engine::MoveOffSharedCpu(size_t words) {
  if (SpreadCpus() && shm_bits_->MoveOffSharedCpu(cycle_, words)) counters_.cpu_moves++;
}

void Engine::PostBitsInSharedMemory(const std::vector<uint64_t>& mine) {
  MoveOffSharedCpu(mine.size());
  const Pending* lone = LoneSmallAllreduce(mine.size());
  if (lone == nullptr) {
    shm_bits_->Post(cycle_, mine);
    return;
  }
  // Staged as the one-step path stages it (prescaled, tensors end to end): the same bits.
  const AllreduceBatch batch = InputsOf(*lone);
  batch.GatherInputs(0, batch.total_count(), shm_bits_->InputArea(cycle_, mine.size()), batch.prescale);
  shm_bits_->PostWithInput(cycle_, mine, lone->position, static_cast<uint32_t>(batch.total_bytes()));
}

AllreduceBatch Engine::InputsOf(const Pending& lone) const {
  const Response& r = cache_.at(lone.position);
  AllreduceBatch batch;
  batch.dtype = r.dtype;
  batch.op = ExecutedOp(r.reduce_op);
  batch.prescale = r.prescale;
  for (size_t t = 0; t < r.shapes.size(); ++t) {
    batch.entries.push_back({lone.request.buffers[t].input, nullptr, NumElements(r.shapes[t])});
  }
  return batch;
}

std::vector<uint64_t> Engine::AwaitLocalRanks(
    const std::function<Status(Deadline, std::vector<uint64_t>*)>& await) {
  // Ranks that have not posted yet may be idle, blocked until something wakes them, so the late
  // ones are invited. A waiter's cycle (a synchronous collective, which every rank calls) invites
  // them only after a grace period: usually they are on their way, and an invitation then wakes
  // their loop threads for nothing; each woken loop competes for the cores with the ranks the
  // cycle waits for, and sometimes takes the next cycle from its application thread. Measured,
  // 4 ranks on 2 cores, 4 KiB: 72-101 us per allreduce in most launches with invitations at once,
  // 29-43 us in every launch with 20-50 us of grace. The loop's cycles (bursts of asynchronous
  // requests, which the other ranks' loops batch) invite at once: the grace measured 2-6% slower
  // on the 1000-tiny-tensor step.
  bool invited = !waiter_cycle_;
  if (invited) shm_bits_->InviteLate(cycle_);
  const Deadline grace = Deadline::After(ShmBitsExchange::kInvitationGrace);
  std::vector<uint64_t> agreed;
  while (true) {
    // Bounded by peer liveness, as over TCP: a second at a time, checking the world in between.
    Status s = await(invited ? Deadline::AfterSeconds(1) : grace, &agreed);
    if (s.ok()) break;
    if (!invited && s.code() == StatusCode::kTimeout) {
      shm_bits_->InviteLate(cycle_);
      invited = true;
      continue;
    }
    DrainControl();
    Status world = WorldFailure();
    if (!world.ok()) throw Error(world);  // the transport's account names the rank and the cause
    if (s.code() != StatusCode::kTimeout) throw Error(s);
  }
  return agreed;
}

Engine::AgreedCycle Engine::AgreeOnBitsInSharedMemory(const std::vector<uint64_t>& mine) {
  AgreedCycle agreed{AwaitHostAnd(mine), {}};
  counters_.shm_negotiations++;
  agreed.with_bits.inputs = TakeInputsWithBits(mine.size());
  return agreed;
}

Engine::InputsWithBits Engine::TakeInputsWithBits(size_t words) {
  uint32_t position = 0;
  std::vector<const void*> inputs;
  if (!shm_bits_->EveryonePostedInput(cycle_, words, &position, &inputs)) return {};
  // Every local rank's only request is this one: its response is still at that position.
  const std::vector<int>& ranks = shm_bits_->member_ranks();
  std::vector<const void*> by_rank(*std::max_element(ranks.begin(), ranks.end()) + 1);
  for (size_t i = 0; i < inputs.size(); ++i) by_rank[ranks[i]] = inputs[i];
  return InputsWithBits{cache_.at(position).process_set, cache_.at(position).name, position, std::move(by_rank)};
}

std::vector<uint64_t> Engine::AwaitHostAnd(const std::vector<uint64_t>& mine) {
  if (!shm_bits_) return mine;  // a host of one rank (the hierarchical plane)
  PostBitsInSharedMemory(mine);
  return AwaitLocalRanks([&](Deadline until, std::vector<uint64_t>* out) {
    return shm_bits_->AwaitAnd(cycle_, mine.size(), until, out);
  });
}

Engine::AgreedCycle Engine::AgreeOnBits(const std::vector<uint64_t>& mine) {
  if (membership_.world().size() == 1) return AgreedCycle{mine, {}};
  if (hierarchical_) return AgreeOnBitsAcrossHosts(mine);
  if (shm_bits_) return AgreeOnBitsInSharedMemory(mine);
  // The star (below): rank 0 invites the ranks that have not contributed yet, ANDs
  // everything and answers everyone.
  const ControlTree star = StarTree();
  InviteChildren(star);
  return AgreeInTree(star, mine);
}

// ---- The TCP half: the star, or the hosts' leaders in their tree.

void Engine::SendNegotiation(int peer, uint32_t type, const std::string& payload) {
  counters_.control_messages_sent++;
  transport_->SendControl(peer, type, payload);
}

ControlTree Engine::StarTree() const {
  ControlTree t;
  if (rank() == 0) {
    for (int r : membership_.world()) {
      if (r != 0) t.children.push_back(r);
    }
  } else {
    t.parent = 0;
  }
  return t;
}

void Engine::InviteChildren(const ControlTree& tree) {
  if (tree.children.empty()) return;
  DrainControl();  // a child whose contribution already came needs no invitation
  std::set<int> contributed;
  for (const auto& m : inbox_) {
    if (m.type == kContributeMessage && CycleOf(m.payload) == cycle_) contributed.insert(m.from);
  }
  for (int c : tree.children) {
    if (!contributed.count(c)) SendNegotiation(c, kBeginMessage, EncodeCycle(cycle_));
  }
}

Engine::AgreedCycle Engine::AgreeInTree(const ControlTree& tree, std::vector<uint64_t> agreed,
                                        std::vector<HostSum> sums) {
  std::vector<ShardSample> samples;
  if (!tree.root()) samples = psld_->TakeSamples();
  for (int c : tree.children) {
    uint64_t cycle;
    std::vector<ShardSample> theirs_samples;
    const auto theirs =
        DecodeContribution(AwaitControl(c, kContributeMessage).payload, &cycle, &theirs_samples, &sums);
    if (theirs.size() != agreed.size()) {
      throw Error(Status::Internal("rank " + std::to_string(c) + " contributed a bit vector of another size"));
    }
    for (size_t w = 0; w < agreed.size(); ++w) agreed[w] &= theirs[w];
    if (tree.root()) {
      psld_->Receive(theirs_samples);
    } else {
      samples.insert(samples.end(), theirs_samples.begin(), theirs_samples.end());
    }
  }
  if (!tree.root()) {
    SendNegotiation(tree.parent, kContributeMessage, EncodeContribution(cycle_, agreed, samples, sums));
    const ControlMessage result = AwaitControl(tree.parent, kResultMessage);
    for (int c : tree.children) SendNegotiation(c, kResultMessage, result.payload);  // as it came
    uint64_t cycle;
    std::vector<MapUpdate> maps;
    CarriedTotal total;
    auto decided = DecodeResult(result.payload, &cycle, &maps, membership_.announced(), &total);
    if (decided.size() != agreed.size()) {
      throw Error(Status::Internal("rank " + std::to_string(tree.parent) + " answered with a bit vector of another size"));
    }
    for (const auto& m : maps) ApplyMapUpdate(m);
    return AgreedCycle{std::move(decided), {{}, TakeTotalWithBits(std::move(total))}};
  }
  std::vector<MapUpdate> maps;
  if (auto decided = psld_->TakeDecision()) maps.push_back(std::move(*decided));
  CarriedTotal total = TotalOfHostSums(std::move(sums));
  const std::string result = EncodeResult(cycle_, agreed, maps, membership_.AnnouncePending(), total);
  for (int c : tree.children) SendNegotiation(c, kResultMessage, result);
  for (const auto& m : maps) ApplyMapUpdate(m);
  return AgreedCycle{std::move(agreed), {{}, TakeTotalWithBits(std::move(total))}};
}

Engine::AgreedCycle Engine::AgreeOnBitsAcrossHosts(const std::vector<uint64_t>& mine) {
  if (rank() == host_leader_) {
    // Invite the other hosts first: their leaders gather their hosts while this one does.
    InviteChildren(leader_tree_);
    std::vector<uint64_t> host_and = AwaitHostAnd(mine);
    InputsWithBits inputs = shm_bits_ ? TakeInputsWithBits(mine.size()) : InputsWithBits{};
    AgreedCycle agreed = AgreeInTree(leader_tree_, host_and, HostSumToCarry(mine.size(), inputs));
    agreed.with_bits.inputs = std::move(inputs);
    if (shm_bits_) {
      const TotalWithBits& total = agreed.with_bits.total;
      shm_bits_->PostResult(cycle_, agreed.bits, total.position, total.data(), static_cast<uint32_t>(total.bytes));
      counters_.shm_negotiations++;
    }
    return agreed;
  }
  PostBitsInSharedMemory(mine);
  // As on one host (AwaitLocalRanks): a waiter's cycle gives the late local ranks a grace before
  // ringing them; the leader among them carries the invitation to the other hosts.
  AgreedCycle agreed{AwaitLocalRanks([&](Deadline until, std::vector<uint64_t>* out) {
                       return shm_bits_->AwaitResult(cycle_, mine.size(), until, out);
                     }),
                     {}};
  counters_.shm_negotiations++;
  // The leader's result came after every local rank's post: their headers are all there, and the
  // leader read the same ones.
  agreed.with_bits.inputs = TakeInputsWithBits(mine.size());
  agreed.with_bits.total = TakeTotalWithBitsFromHost(mine.size());
  return agreed;
}

// The coordinator's round for what the cache could not settle: the star (every rank's uncached
// requests to rank 0, its responses back), or across hosts through the leaders' tree.
void Engine::CoordinatorRound(const std::vector<RequestMeta>& uncached, const std::vector<uint32_t>& stale,
                              std::vector<Response>* responses, std::vector<uint32_t>* evict) {
  if (hierarchical_) {
    CoordinatorRoundAcrossHosts(uncached, stale, responses, evict);
    return;
  }
  if (rank() != 0) {
    SendNegotiation(0, kUncachedMessage, EncodeUncached(cycle_, uncached, stale));
    uint64_t c;
    DecodeResponses(AwaitControl(0, kResponsesMessage).payload, &c, responses, evict);
    return;
  }
  std::set<uint32_t> evicted(stale.begin(), stale.end());
  for (const auto& q : uncached) {
    coordinator_->Submit(q);
    if (timeline_) timeline_->NegotiateRankReady(OpTypeName(q.type), q.name, q.rank);
  }
  for (int r : membership_.world()) {
    if (r == 0) continue;
    uint64_t c;
    std::vector<RequestMeta> theirs;
    std::vector<uint32_t> their_stale;
    DecodeUncached(AwaitControl(r, kUncachedMessage).payload, &c, &theirs, &their_stale);
    for (auto& q : theirs) {
      q.rank = r;  // trust the connection, not the payload
      coordinator_->Submit(q);
      if (timeline_) timeline_->NegotiateRankReady(OpTypeName(q.type), q.name, q.rank);
    }
    evicted.insert(their_stale.begin(), their_stale.end());
  }
  *responses = coordinator_->TakeReady();
  evict->assign(evicted.begin(), evicted.end());
  const std::string message = EncodeResponses(cycle_, *responses, *evict);
  for (int r : membership_.world()) {
    if (r != 0) SendNegotiation(r, kResponsesMessage, message);
  }
}

void Engine::CoordinatorRoundAcrossHosts(const std::vector<RequestMeta>& uncached, const std::vector<uint32_t>& stale,
                                         std::vector<Response>* responses, std::vector<uint32_t>* evict) {
  if (rank() != host_leader_) {
    SendNegotiation(host_leader_, kUncachedMessage, EncodeUncached(cycle_, uncached, stale));
    uint64_t c;
    DecodeResponses(AwaitControl(host_leader_, kResponsesMessage).payload, &c, responses, evict);
    return;
  }
  // Gather: this leader's requests, its host's (their ranks from the connection), and its
  // children's (gathered the same way by leaders of the same job, their ranks as they set them).
  std::vector<RequestMeta> gathered(uncached);
  for (auto& q : gathered) q.rank = rank();
  std::set<uint32_t> evicted(stale.begin(), stale.end());
  auto take = [&](int from, bool local) {
    uint64_t c;
    std::vector<RequestMeta> theirs;
    std::vector<uint32_t> their_stale;
    DecodeUncached(AwaitControl(from, kUncachedMessage).payload, &c, &theirs, &their_stale);
    for (auto& q : theirs) {
      if (local) q.rank = from;  // trust the connection, not the payload
      gathered.push_back(std::move(q));
    }
    evicted.insert(their_stale.begin(), their_stale.end());
  };
  for (int r : host_ranks_) {
    if (r != rank()) take(r, true);
  }
  for (int c : leader_tree_.children) take(c, false);
  std::string message;
  if (!leader_tree_.root()) {
    SendNegotiation(leader_tree_.parent, kUncachedMessage,
                    EncodeUncached(cycle_, gathered, std::vector<uint32_t>(evicted.begin(), evicted.end())));
    message = AwaitControl(leader_tree_.parent, kResponsesMessage).payload;
    uint64_t c;
    DecodeResponses(message, &c, responses, evict);
  } else {
    // The coordinator sees each rank's requests as the star delivers them: rank by rank.
    std::stable_sort(gathered.begin(), gathered.end(),
                     [](const RequestMeta& a, const RequestMeta& b) { return a.rank < b.rank; });
    for (const auto& q : gathered) {
      coordinator_->Submit(q);
      if (timeline_) timeline_->NegotiateRankReady(OpTypeName(q.type), q.name, q.rank);
    }
    *responses = coordinator_->TakeReady();
    evict->assign(evicted.begin(), evicted.end());
    message = EncodeResponses(cycle_, *responses, *evict);
  }
  for (int c : leader_tree_.children) SendNegotiation(c, kResponsesMessage, message);
  for (int r : host_ranks_) {
    if (r != rank()) SendNegotiation(r, kResponsesMessage, message);
  }
}

void Engine::RouteBlockedReport(int origin, const std::string& report) {
  if (deadlock_) {
    deadlock_->Report(origin, DecodeAwaited(report));
  } else if (!hierarchical_) {
    // The star sends reports straight to rank 0, which has a detector whenever ranks report.
  } else if (rank() != host_leader_) {
    transport_->SendControl(host_leader_, kBlockedReport, report);
  } else if (!leader_tree_.root()) {
    transport_->SendControl(leader_tree_.parent, kRelayedBlockedReport, EncodeRelayedReport(origin, report));
  }
}

}  // namespace herring
