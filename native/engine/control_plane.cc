// How the ranks of a job spanning hosts agree each cycle, over TCP: the star (rank 0 hears from
// everyone and answers everyone) or the hierarchical plane (each host ANDs in shared memory, its
// leader combines the hosts' ANDs in a binomial tree rooted at rank 0: engine/control_tree.h).
// The tree carries exactly the star's messages (contributions up, invitations and results down),
// so rank 0's authority is unchanged: PSLD's samples are merged on the way up, its maps and the
// membership announcements ride down in the result every rank decodes. The deadlock detector's
// reports (rare: when what a rank is blocked on changes) climb the same tree to rank 0.
#include <algorithm>
#include <set>

#include "engine/engine.h"

namespace herring {

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
