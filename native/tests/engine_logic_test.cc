// Unit tests of the engine's pure logic: agreement and its error messages, the response cache,
// the partition map, the negotiation message codecs.
#include <algorithm>
#include <chrono>
#include <set>

#include "runtime/control_messages.h"
#include "engine/coordinator.h"
#include "engine/deadlock_detector.h"
#include "engine/idle_join_patience.h"
#include "runtime/fault_injector.h"
#include "engine/stall_inspector.h"
#include "engine/response_cache.h"
#include "engine/server_membership.h"
#include "runtime/wire.h"
#include "runtime/partition_map.h"
#include "runtime/collective.h"
#include "ps/psld_balancer.h"
#include "ps/psld_policy.h"
#include "ps/r2sp_server.h"
#include "runtime/server_layout.h"
#include <gtest/gtest.h>

using namespace herring;

namespace {

RequestMeta Allreduce(const std::string& name, int rank, std::vector<int64_t> shape) {
  RequestMeta q;
  q.type = OpType::kAllreduce;
  q.name = name;
  q.rank = rank;
  q.tensors.push_back({shape, {}});
  return q;
}

std::unique_ptr<ProcessSet> World(int n) {
  std::vector<std::string> hosts(n, "h");
  static Topology topo;
  topo = Topology(hosts);
  std::vector<int> ranks(n);
  for (int i = 0; i < n; ++i) ranks[i] = i;
  return ProcessSetTable::Make(0, ranks, 0, topo);
}

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(EngineLogic, EngineAgreementMatchingShapes) {
  auto set = World(3);
  auto r = AgreeOnRequests({Allreduce("w", 0, {2, 3}), Allreduce("w", 1, {2, 3}), Allreduce("w", 2, {2, 3})},
                           *set, {});
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.shapes[0], (std::vector<int64_t>{2, 3}));
}

TEST(EngineLogic, EngineAgreementShapeMismatchNamesRanksAndShapes) {
  auto set = World(3);
  auto r = AgreeOnRequests({Allreduce("w", 0, {2, 3}), Allreduce("w", 1, {4}), Allreduce("w", 2, {2, 3})},
                           *set, {});
  EXPECT_TRUE(!r.ok());
  EXPECT_TRUE(Contains(r.error, "'w'"));
  EXPECT_TRUE(Contains(r.error, "ranks 0, 2 have [2, 3]"));
  EXPECT_TRUE(Contains(r.error, "rank 1 has [4]"));
}

TEST(EngineLogic, EngineAgreementDtypeAndOpMismatch) {
  auto set = World(2);
  auto a = Allreduce("g", 0, {5}), b = Allreduce("g", 1, {5});
  b.dtype = DataType::kFloat64;
  auto r = AgreeOnRequests({a, b}, *set, {});
  EXPECT_TRUE(Contains(r.error, "Mismatched data types"));
  EXPECT_TRUE(Contains(r.error, "rank 1 has float64"));
  b = Allreduce("g", 1, {5});
  b.type = OpType::kAllgather;
  r = AgreeOnRequests({a, b}, *set, {});
  EXPECT_TRUE(Contains(r.error, "rank 0 has allreduce; rank 1 has allgather"));
}

TEST(EngineLogic, EngineAgreementAllgatherFirstDimMayDiffer) {
  auto set = World(2);
  auto a = Allreduce("x", 0, {1, 4}), b = Allreduce("x", 1, {3, 4});
  a.type = b.type = OpType::kAllgather;
  auto r = AgreeOnRequests({a, b}, *set, {});
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.per_member[0], (std::vector<int64_t>{1, 3}));
  b.tensors[0].shape = {3, 5};
  r = AgreeOnRequests({a, b}, *set, {});
  EXPECT_TRUE(Contains(r.error, "only the first dimension may differ"));
}

TEST(EngineLogic, EngineCoordinatorWaitsForEveryMemberAndReportsStalls) {
  auto set = World(3);
  ProcessSetTable table;
  table.Add(std::move(set));
  Coordinator c(3, &table);
  c.Submit(Allreduce("a", 0, {1}));
  c.Submit(Allreduce("a", 2, {1}));
  EXPECT_TRUE(c.TakeReady().empty());
  auto stalled = c.StalledEntries(0);
  EXPECT_EQ(stalled.size(), size_t(1));
  EXPECT_EQ(stalled[0].missing_ranks, (std::vector<int>{1}));
  c.Submit(Allreduce("a", 1, {1}));
  auto ready = c.TakeReady();
  EXPECT_EQ(ready.size(), size_t(1));
  EXPECT_TRUE(ready[0].ok());
}

TEST(EngineLogic, EngineCoordinatorJoinedRanksCountAsSubmitted) {
  auto set = World(2);
  ProcessSetTable table;
  table.Add(std::move(set));
  Coordinator c(2, &table);
  RequestMeta join;
  join.type = OpType::kJoin;
  join.name = "join";
  join.rank = 1;
  c.Submit(join);
  c.Submit(Allreduce("a", 0, {3}));
  auto ready = c.TakeReady();
  EXPECT_EQ(ready.size(), size_t(1));
  EXPECT_EQ(ready[0].joined, (std::vector<int32_t>{1}));
  join.rank = 0;
  c.Submit(join);
  ready = c.TakeReady();
  EXPECT_EQ(ready.size(), size_t(1));
  EXPECT_TRUE(ready[0].type == OpType::kJoin);
  EXPECT_EQ(ready[0].root, 0);  // the last rank to join
}

TEST(EngineLogic, EngineResponseCacheHitStaleAndLru) {
  ResponseCache cache(2);
  auto set = World(2);
  auto agreed = AgreeOnRequests({Allreduce("a", 0, {4}), Allreduce("a", 1, {4})}, *set, {});
  int64_t evicted;
  uint32_t pa = cache.Put(agreed, &evicted);
  EXPECT_EQ(evicted, int64_t(-1));
  uint32_t pos;
  EXPECT_TRUE(cache.Lookup(Allreduce("a", 0, {4}), 0, &pos) == ResponseCache::Match::kHit);
  EXPECT_EQ(pos, pa);
  EXPECT_TRUE(cache.Lookup(Allreduce("a", 0, {5}), 0, &pos) == ResponseCache::Match::kStale);
  EXPECT_TRUE(cache.Lookup(Allreduce("zz", 0, {4}), 0, &pos) == ResponseCache::Match::kMiss);
  auto b = AgreeOnRequests({Allreduce("b", 0, {1}), Allreduce("b", 1, {1})}, *set, {});
  auto c = AgreeOnRequests({Allreduce("c", 0, {1}), Allreduce("c", 1, {1})}, *set, {});
  cache.Put(b, &evicted);
  cache.Touch(pa);  // "a" is now more recently used than "b"
  uint32_t pc = cache.Put(c, &evicted);
  EXPECT_TRUE(evicted >= 0);
  EXPECT_TRUE(cache.Lookup(Allreduce("b", 0, {1}), 0, &pos) == ResponseCache::Match::kMiss);
  EXPECT_EQ(pc, static_cast<uint32_t>(evicted));  // the freed position is reused
}

TEST(EngineLogic, EngineResponseCacheDoesNotCacheErrorsOrJoins) {
  Response r;
  r.error = "x";
  EXPECT_TRUE(!ResponseCache::Cacheable(r));
  Response j;
  j.type = OpType::kJoin;
  EXPECT_TRUE(!ResponseCache::Cacheable(j));
}

TEST(EngineLogic, EnginePartitionMapBalancedAndMoved) {
  auto map = PartitionMap::Balanced(4);
  auto r = map.Ranges(1000, 16);
  EXPECT_EQ(r.size(), size_t(4));
  EXPECT_EQ(r[0].begin, 0);
  EXPECT_EQ(r[3].end, 1000);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r[i].end, r[i + 1].begin);
    EXPECT_EQ(r[i].end % 16, 0);
  }
  int64_t widest = 0, narrowest = 1 << 30;
  for (auto& x : r) {
    widest = std::max(widest, x.size());
    narrowest = std::min(narrowest, x.size());
  }
  EXPECT_TRUE(widest - narrowest <= 16);
  auto moved = map.Moved(0, 1, 0.5);
  EXPECT_EQ(moved.version(), uint64_t(1));
  auto m = moved.Ranges(1000, 1);
  EXPECT_TRUE(m[0].size() < m[1].size());
  auto grown = map.WithShardAdded(0.2);
  EXPECT_EQ(grown.num_shards(), 5);
  EXPECT_EQ(grown.Ranges(1000, 1).back().end, 1000);
  EXPECT_EQ(map.WithShardRemoved(2).num_shards(), 3);
}

TEST(EngineLogic, EngineServerLayoutInterleavesHosts) {
  // Two hosts with two members each: shards go host 0, host 1, host 0, host 1.
  const std::vector<int> ranks = {10, 11, 12, 13};  // member index -> transport rank
  auto layout = ServerLayout::Colocated({{0, 1}, {2, 3}}, ranks, 0);
  EXPECT_EQ(layout.shard_rank, (std::vector<int>{10, 12, 11, 13}));
  auto three = ServerLayout::Colocated({{0, 1}, {2, 3}}, ranks, 3);
  EXPECT_EQ(three.shard_rank, (std::vector<int>{10, 12, 11}));
  auto dedicated = ServerLayout::Dedicated({4, 5});
  EXPECT_TRUE(dedicated.dedicated);
  EXPECT_EQ(dedicated.map.num_shards(), 2);
}

TEST(EngineLogic, EngineControlMessagesRoundTrip) {
  auto set = World(2);
  auto resp = AgreeOnRequests({Allreduce("a", 0, {4, 2}), Allreduce("a", 1, {4, 2})}, *set, {});
  uint64_t cycle = 0;
  std::vector<Response> out;
  std::vector<uint32_t> evict;
  DecodeResponses(EncodeResponses(77, {resp}, {3, 9}), &cycle, &out, &evict);
  EXPECT_EQ(cycle, uint64_t(77));
  EXPECT_EQ(out.size(), size_t(1));
  EXPECT_EQ(out[0].name, std::string("a"));
  EXPECT_EQ(out[0].shapes[0], (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(evict, (std::vector<uint32_t>{3, 9}));
  std::vector<RequestMeta> reqs;
  std::vector<uint32_t> stale;
  DecodeUncached(EncodeUncached(5, {Allreduce("q", 1, {7})}, {2}), &cycle, &reqs, &stale);
  EXPECT_EQ(reqs[0].tensors[0].shape, (std::vector<int64_t>{7}));
  EXPECT_EQ(CycleOf(EncodeBits(123, {1, 2})), uint64_t(123));
}

TEST(EngineLogic, EngineWireRejectsTruncatedAndHugeCounts) {
  std::string msg = EncodeUncached(5, {Allreduce("q", 1, {7})}, {});
  bool threw = false;
  try {
    std::vector<RequestMeta> reqs;
    std::vector<uint32_t> stale;
    uint64_t c;
    DecodeUncached(msg.substr(0, msg.size() - 3), &c, &reqs, &stale);
  } catch (const Error&) {
    threw = true;
  }
  EXPECT_TRUE(threw);
  WireWriter w;
  w.U64(1);
  w.U32(0xffffffffu);  // a count no message could hold
  std::string bad = w.Take();
  threw = false;
  try {
    std::vector<RequestMeta> reqs;
    std::vector<uint32_t> stale;
    uint64_t c;
    DecodeUncached(bad, &c, &reqs, &stale);
  } catch (const Error& e) {
    threw = std::string(e.what()).find("count exceeds message") != std::string::npos;
  }
  EXPECT_TRUE(threw);
}

TEST(EngineLogic, EngineFaultInjectorParsesAndArmsOnlyItsRank) {
  EXPECT_TRUE(FaultInjector("kill:push:2", 2).armed());
  EXPECT_TRUE(!FaultInjector("kill:push:2", 1).armed());
  EXPECT_TRUE(!FaultInjector("", 0).armed());
  for (const char* bad : {"kill:push", "explode:push:1", "kill:nowhere:1", "kill:push:x", "kill:push:1:0"}) {
    bool threw = false;
    try {
      FaultInjector f(bad, 1);
    } catch (const Error& e) {
      threw = std::string(e.what()).find("HERRING_FAULT") != std::string::npos;
    }
    EXPECT_TRUE(threw);
  }
  // "delay" holds the rank from the configured occurrence on, every time.
  FaultInjector delay("delay:pull:0:2", 0);
  auto held = [&delay]() {
    const auto start = std::chrono::steady_clock::now();
    delay.At("pull", nullptr);
    return std::chrono::steady_clock::now() - start >= FaultInjector::kDelay;
  };
  EXPECT_FALSE(held());
  EXPECT_TRUE(held());
  EXPECT_TRUE(held());
  // "corrupt" flips one bit of the given result, on the configured occurrence only.
  FaultInjector corrupt("corrupt:scatter:0:2", 0);
  unsigned char byte = 0x10;
  corrupt.At("scatter", nullptr, &byte, 1);
  EXPECT_EQ(int(byte), 0x10);
  corrupt.At("scatter", nullptr, &byte, 1);
  EXPECT_EQ(int(byte), 0x11);
}

TEST(EngineLogic, EngineStallInspectorReportsMissingRanksAndShutsDown) {
  auto set = World(3);
  ProcessSetTable table;
  table.Add(std::move(set));
  Coordinator c(3, &table);
  auto q = Allreduce("late", 0, {1});
  q.waited_ms = 5000;  // it had waited on its rank before reaching the coordinator
  c.Submit(q);
  Config cfg = Config::FromEnvironment({{"HOROVOD_STALL_CHECK_TIME_SECONDS", "2"},
                                        {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "4"}});
  StallInspector inspector(cfg);
  Status s = inspector.Inspect(c);
  EXPECT_TRUE(s.code() == StatusCode::kAborted);
  EXPECT_TRUE(Contains(s.message(), "1: ['late'] 2: ['late']"));
}

TEST(EngineLogic, EnginePsldBalancerMovesLoadToTheFastShardAndSettles) {
  BalancerOptions o;
  o.decision_interval = 1;
  o.exploration = 0;  // deterministic for the test
  PsldBalancer b(o);
  PartitionMap map = PartitionMap::Balanced(2);
  // Shard 1 costs four times as much per MiB: balanced shares are 4/5 and 1/5.
  for (int round = 0; round < 12; ++round) {
    auto shares = map.weights();
    double total = shares[0] + shares[1];
    b.Observe(0, 1.0 * shares[0] / total, shares[0] / total);
    b.Observe(1, 4.0 * shares[1] / total, shares[1] / total);
    if (auto next = b.AfterExecution(map)) map = *next;
  }
  double share1 = map.weights()[1] / (map.weights()[0] + map.weights()[1]);
  EXPECT_TRUE(share1 > 0.17 && share1 < 0.25);
  EXPECT_TRUE(b.settled());
  EXPECT_TRUE(map.version() > 0);
}

TEST(EngineLogic, EnginePsldPolicyMeasuresTheGlobalSetAndOnlyRankZeroDecides) {
  PsldPolicy off(false, true, 1);
  EXPECT_FALSE(off.Measures(0));
  // Another rank: keeps one running total per shard for its next contribution.
  PsldPolicy worker(true, false, 1);
  EXPECT_TRUE(worker.Measures(0));
  EXPECT_FALSE(worker.Measures(1));
  worker.Observe(1, 0.5, 2.0);
  worker.Observe(0, 1.0, 1.0);
  worker.Observe(1, 0.25, 1.0);
  auto samples = worker.TakeSamples();
  EXPECT_EQ(samples.size(), size_t(2));
  EXPECT_EQ(samples[0].shard, 1);
  EXPECT_EQ(samples[0].seconds, 0.75);
  EXPECT_EQ(samples[0].mib, 3.0);
  EXPECT_TRUE(worker.TakeSamples().empty());
  worker.AfterAllreduce(0, 2, PartitionMap::Balanced(2));
  EXPECT_FALSE(worker.TakeDecision().has_value());
  // Rank 0: its own and the others' samples feed the balancer; only the global set, across hosts.
  PsldPolicy rank0(true, true, 1);
  PartitionMap map = PartitionMap::Balanced(2);
  rank0.Observe(0, 1.0, 1.0);
  rank0.Receive({{1, 4.0, 1.0}});
  rank0.AfterAllreduce(1, 2, map);
  rank0.AfterAllreduce(0, 1, map);
  EXPECT_FALSE(rank0.TakeDecision().has_value());
  rank0.AfterAllreduce(0, 2, map);
  auto decided = rank0.TakeDecision();
  EXPECT_TRUE(decided.has_value());
  EXPECT_EQ(decided->process_set, 0);
  EXPECT_TRUE(decided->weights[0] > decided->weights[1]);  // shard 1 is slower: it owns less
  EXPECT_FALSE(rank0.TakeDecision().has_value());
}

TEST(EngineLogic, EngineServerMembershipRosterAndRequests) {
  // Two workers (0, 1) and two launched dedicated servers (2, 3).
  ServerMembership m;
  m.Reset(2, {0, 1, 2, 3}, {"w0", "w1", "s0", "s1"});
  EXPECT_TRUE(m.ActiveServers() == std::vector<int>({2, 3}));
  // A worker is not a server; an unreadable request names nobody.
  m.RequestLeave(1, "1");
  m.RequestLeave(1, "not-a-rank");
  EXPECT_FALSE(m.HasPending());
  m.RequestLeave(0, "3");
  EXPECT_TRUE(m.HasPending());
  m.RequestLeave(0, "2");  // would leave no server: ignored
  // A joiner whose knobs differ is refused with the knob and both ranks named.
  std::string refused = m.RequestJoin(0, "K=1;", 4, JoinRequest{"s2", "K=2;"});
  EXPECT_TRUE(refused.find("K differs between ranks: rank 0 has '1', rank 4 has '2'") != std::string::npos);
  EXPECT_EQ(m.RequestJoin(0, "K=1;", 4, JoinRequest{"s2", "K=1;"}), std::string(""));
  const auto& announced = m.AnnouncePending();
  EXPECT_EQ(announced.size(), size_t(2));
  EXPECT_FALSE(m.HasPending());
  for (const auto& c : m.TakeAnnounced()) m.Apply(c);
  EXPECT_TRUE(m.TakeAnnounced().empty());
  EXPECT_TRUE(m.world() == std::vector<int>({0, 1, 2, 4}));
  EXPECT_EQ(m.hostnames().size(), size_t(5));
  EXPECT_EQ(m.hostnames()[4], std::string("s2"));
  // The roster's part of the join snapshot.
  WireWriter w;
  m.EncodeTo(w);
  std::string bytes = w.Take();
  WireReader r(bytes, "roster");
  ServerMembership joiner;
  joiner.RestoreFrom(r);
  r.ExpectEnd();
  EXPECT_EQ(joiner.workers(), 2);
  EXPECT_TRUE(joiner.world() == m.world());
  EXPECT_TRUE(joiner.hostnames() == m.hostnames());
}

TEST(EngineLogic, EngineResultCarriesPartitionMapUpdates) {
  uint64_t cycle = 0;
  std::vector<MapUpdate> maps;
  std::vector<MembershipChange> members;
  auto bits = DecodeResult(EncodeResult(9, {7, 8}, {MapUpdate{0, 3, {0.25, 0.75}}}, {}), &cycle, &maps, &members);
  EXPECT_EQ(cycle, uint64_t(9));
  EXPECT_EQ(bits, (std::vector<uint64_t>{7, 8}));
  EXPECT_EQ(maps.size(), size_t(1));
  EXPECT_EQ(maps[0].version, uint64_t(3));
  EXPECT_EQ(maps[0].weights[1], 0.75);
  std::vector<ShardSample> samples;
  DecodeContribution(EncodeContribution(4, {1}, {ShardSample{1, 0.5, 2.0}}), &cycle, &samples);
  EXPECT_EQ(samples[0].shard, 1);
  EXPECT_EQ(samples[0].mib, 2.0);
}

TEST(EngineLogic, HostSumsClimbWithTheContributionAndTheTotalComesDownWithTheResult) {
  uint64_t cycle = 0;
  std::vector<ShardSample> samples;
  std::vector<HostSum> sums;
  const std::string zeros("\0\0\x01", 3);  // bytes, not text
  auto bits = DecodeContribution(EncodeContribution(5, {3}, {}, {HostSum{4, 7, zeros}, HostSum{8, 7, "abcd"}}), &cycle,
                                 &samples, &sums);
  EXPECT_EQ(bits, (std::vector<uint64_t>{3}));
  ASSERT_EQ(sums.size(), size_t(2));
  EXPECT_EQ(sums[0].leader, 4);
  EXPECT_EQ(sums[0].position, uint32_t(7));
  EXPECT_EQ(sums[0].bytes, zeros);
  EXPECT_EQ(sums[1].bytes, "abcd");
  // A node that does not collect them (the star) reads past them.
  EXPECT_NO_THROW(DecodeContribution(EncodeContribution(5, {3}, {}, {HostSum{4, 7, "ab"}}), &cycle, &samples));

  std::vector<MapUpdate> maps;
  std::vector<MembershipChange> members;
  CarriedTotal total;
  DecodeResult(EncodeResult(6, {1}, {}, {}, CarriedTotal{7, "wxyz"}), &cycle, &maps, &members, &total);
  EXPECT_EQ(total.position, uint32_t(7));
  EXPECT_EQ(total.bytes, "wxyz");
  DecodeResult(EncodeResult(6, {1}, {}, {}), &cycle, &maps, &members, &total);
  EXPECT_TRUE(total.bytes.empty());
  // A host sum whose length runs past the message is an error, not a read out of bounds.
  std::string cut = EncodeContribution(5, {3}, {}, {HostSum{4, 7, "abcd"}});
  cut.resize(cut.size() - 2);
  EXPECT_THROW(DecodeContribution(cut, &cycle, &samples, &sums), Error);
}

TEST(EngineLogic, EngineResponseCacheSnapshotRestoresPositionsAndLruOrder) {
  ResponseCache cache(3);
  auto set = World(2);
  int64_t evicted;
  for (const char* name : {"a", "b", "c"}) {
    cache.Put(AgreeOnRequests({Allreduce(name, 0, {2}), Allreduce(name, 1, {2})}, *set, {}), &evicted);
  }
  uint32_t pa;
  cache.Lookup(Allreduce("a", 0, {2}), 0, &pa);
  cache.Touch(pa);  // LRU order now b, c, a
  ResponseCache copy(3);
  copy.Restore(cache.Serialize());
  uint32_t p1, p2;
  EXPECT_TRUE(copy.Lookup(Allreduce("a", 0, {2}), 0, &p1) == ResponseCache::Match::kHit);
  EXPECT_EQ(p1, pa);
  // The same next eviction in both: b is the least recently used.
  auto d = AgreeOnRequests({Allreduce("d", 0, {1}), Allreduce("d", 1, {1})}, *set, {});
  int64_t e1, e2;
  p1 = cache.Put(d, &e1);
  p2 = copy.Put(d, &e2);
  EXPECT_EQ(e1, e2);
  EXPECT_EQ(p1, p2);
  EXPECT_TRUE(copy.Lookup(Allreduce("b", 0, {2}), 0, &p1) == ResponseCache::Match::kMiss);
}

TEST(EngineLogic, EngineResultCarriesMembershipChanges) {
  uint64_t cycle;
  std::vector<MapUpdate> maps;
  std::vector<MembershipChange> members;
  DecodeResult(EncodeResult(3, {1}, {}, {{MembershipChange::kJoin, 6, "simhost3"}, {MembershipChange::kLeave, 4, ""}}),
               &cycle, &maps, &members);
  EXPECT_EQ(members.size(), size_t(2));
  EXPECT_EQ(members[0].hostname, std::string("simhost3"));
  EXPECT_EQ(members[1].rank, 4);
}

TEST(EngineLogic, R2spSessionRoundTripsAndRejectsRangesOutsideTheParameters) {
  R2spSessionSpec spec;
  spec.id = 7;
  spec.count = 100;
  spec.lr = 0.5;
  spec.momentum = 0.9;
  spec.workers = {0, 1, 2};
  spec.shards = {{2, 64, 100}};
  R2spSessionSpec back = DecodeR2spSession(EncodeR2spSession(spec));
  EXPECT_EQ(back.id, 7u);
  EXPECT_EQ(back.workers.size(), size_t(3));
  EXPECT_EQ(back.shards[0].begin, int64_t(64));
  EXPECT_TRUE(back.momentum == 0.9);
  spec.shards = {{2, 64, 101}};
  bool rejected = false;
  try {
    DecodeR2spSession(EncodeR2spSession(spec));
  } catch (const Error&) {
    rejected = true;
  }
  EXPECT_TRUE(rejected);
  EXPECT_EQ(DecodeR2spEnd(EncodeR2spEnd(9)), 9u);
}

TEST(EngineLogic, R2spTagsNeverMeetCollectiveTags) {
  std::set<uint64_t> tags;
  for (uint64_t step : {0ull, 1ull, (1ull << 18) - 1}) {
    for (uint32_t session : {1u, 255u}) {
      for (int shard : {0, 2047}) {
        for (bool pull : {false, true}) {
          for (uint32_t chunk : {0u, kMaxR2spChunks - 1}) tags.insert(MakeR2spTag(step, session, shard, chunk, pull));
        }
      }
    }
  }
  EXPECT_EQ(tags.size(), size_t(3 * 2 * 2 * 2 * 2));
  // Collectives' units stop below the one R2SP uses.
  const uint64_t collective = MakeTagBase((1ull << 28) - 1, 0xfffe) | ((1ull << ExecContext::kSubTagBits) - 1);
  EXPECT_TRUE(tags.count(collective) == 0);
  EXPECT_TRUE((collective >> ExecContext::kSubTagBits & 0xffff) != 0xffff);
  bool rejected = false;
  try {
    MakeTagBase(1, 0xffff);
  } catch (const Error&) {
    rejected = true;
  }
  EXPECT_TRUE(rejected);
}

TEST(EngineLogic, R2spUpdateIsSgdWithMomentumAndWeightDecay) {
  R2spSessionSpec spec;
  spec.lr = 0.5;
  spec.momentum = 0.5;
  spec.weight_decay = 0.25;
  float params[2] = {2.0f, -4.0f};
  float velocity[2] = {1.0f, 0.0f};
  const float grad[2] = {1.0f, 1.0f};
  R2spApplyUpdate(spec, grad, params, velocity, 2);
  // g' = 1 + 0.25 * 2 = 1.5; v = 0.5 * 1 + 1.5 = 2; p = 2 - 0.5 * 2 = 1.
  EXPECT_TRUE(velocity[0] == 2.0f && params[0] == 1.0f);
  // g' = 1 - 1 = 0; v = 0; p unchanged.
  EXPECT_TRUE(velocity[1] == 0.0f && params[1] == -4.0f);
  spec.momentum = 0;
  R2spApplyUpdate(spec, grad, params, nullptr, 2);  // plain SGD needs no velocity
  EXPECT_TRUE(params[0] == 1.0f - 0.5f * 1.25f);
}

TEST(EngineLogic, R2spChunksCoverTheRangeWithinTheTagLimit) {
  for (int64_t n : {int64_t(0), int64_t(5), int64_t(262144), int64_t(262145), int64_t(1) << 30}) {
    auto chunks = R2spChunks({0, 100, 100 + n});
    EXPECT_TRUE(chunks.size() >= 1 && chunks.size() <= kMaxR2spChunks);
    EXPECT_EQ(chunks.front().begin, int64_t(0));
    EXPECT_EQ(chunks.back().end, n);
    for (size_t i = 1; i < chunks.size(); ++i) {
      EXPECT_EQ(chunks[i].begin, chunks[i - 1].end);
      EXPECT_EQ(chunks[i].begin % 16, int64_t(0));
    }
  }
}

TEST(EngineLogic, EngineAgreementOnlyAllreduceAndBarrierRunWhileRanksJoined) {
  auto set = World(3);
  RequestMeta gather = Allreduce("g", 0, {2});
  gather.type = OpType::kAllgather;
  RequestMeta other = gather;
  other.rank = 2;
  auto r = AgreeOnRequests({gather, other}, *set, {1});
  EXPECT_TRUE(!r.ok());
  EXPECT_TRUE(Contains(r.error, "allgather 'g' cannot run while rank 1 has joined"));
  EXPECT_TRUE(AgreeOnRequests({Allreduce("a", 0, {2}), Allreduce("a", 2, {2})}, *set, {1}).ok());
}

namespace {

struct DeadlockFixture {
  // deadlock_seconds 0: no waiting time, decided at the first check.
  explicit DeadlockFixture(int n, double deadlock_seconds = 0.0) : coordinator(n, &table), detector(deadlock_seconds) {
    table.Add(World(n));
  }
  // A time `seconds` after the fixture was made: tests that wait drive the detector's clock.
  DeadlockDetector::Clock::time_point At(double seconds) const {
    return start + std::chrono::duration_cast<DeadlockDetector::Clock::duration>(std::chrono::duration<double>(seconds));
  }
  ProcessSetTable table;
  Coordinator coordinator;
  DeadlockDetector detector;
  const DeadlockDetector::Clock::time_point start = DeadlockDetector::Clock::now();
};

AwaitedCollective Awaited(const std::string& name, OpType type = OpType::kAllreduce) {
  AwaitedCollective a;
  a.name = name;
  a.type = type;
  return a;
}

}  // namespace

TEST(EngineLogic, EngineDeadlockRanksWaitingOnEachOtherAreNamedAndFailed) {
  DeadlockFixture f(2);
  f.coordinator.Submit(Allreduce("a", 0, {1}));
  f.coordinator.Submit(Allreduce("b", 1, {1}));
  f.detector.Report(0, {Awaited("a")});
  EXPECT_TRUE(!f.detector.Check(f.coordinator, 2));  // rank 1 could still submit 'a'
  f.detector.Report(1, {Awaited("b")});
  auto v = f.detector.Check(f.coordinator, 2);
  EXPECT_TRUE(v.has_value());
  EXPECT_TRUE(Contains(v->message, "rank 0 waits on allreduce 'a' (not submitted by rank 1)"));
  EXPECT_TRUE(Contains(v->message, "rank 1 waits on allreduce 'b' (not submitted by rank 0)"));
  EXPECT_EQ(v->collectives.size(), size_t(2));
  f.coordinator.FailEntries(v->collectives, v->fail_join, v->message);
  auto failed = f.coordinator.TakeReady();
  EXPECT_EQ(failed.size(), size_t(2));
  EXPECT_TRUE(!failed[0].ok() && !failed[1].ok());
  EXPECT_TRUE(f.coordinator.Entries().empty());
}

TEST(EngineLogic, EngineDeadlockWaitsForLateRanksThatMissItsCollectivesSoThatOneErrorNamesThemAll) {
  // 4 ranks, each on a name of its own. Ranks 2 and 3 block first: already a deadlock (each
  // misses the other), but ranks 0 and 1 have not reported and miss their collectives too.
  DeadlockFixture f(4, 4.0);
  const std::vector<std::string> names = {"by.rank0", "by.rank1", "by.rank2", "by.rank3"};
  for (int r = 0; r < 4; ++r) f.coordinator.Submit(Allreduce(names[r], r, {1}));
  f.detector.Report(2, {Awaited(names[2])}, f.At(0));
  f.detector.Report(3, {Awaited(names[3])}, f.At(0));
  // Half the deadlock time after the reports (the whole time blocked): still waiting for 0 and 1.
  EXPECT_TRUE(!f.detector.Check(f.coordinator, 4, f.At(2.5)));
  // They report a second and a half late: one verdict names all four.
  f.detector.Report(0, {Awaited(names[0])}, f.At(1.5));
  f.detector.Report(1, {Awaited(names[1])}, f.At(1.5));
  EXPECT_TRUE(!f.detector.Check(f.coordinator, 4, f.At(3.0)));
  auto v = f.detector.Check(f.coordinator, 4, f.At(3.6));
  ASSERT_TRUE(v.has_value());
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(Contains(v->message, "rank " + std::to_string(r) + " waits on allreduce '" + names[r] + "'"))
        << v->message;
  }
  EXPECT_EQ(v->collectives.size(), size_t(4));
}

TEST(EngineLogic, EngineDeadlockAmongSomeRanksIsAnnouncedWhenTheOthersNeverReport) {
  // Ranks 1 and 2 deadlock; rank 0 computes on and never blocks: the verdict comes half the
  // deadlock time late, naming the two.
  DeadlockFixture f(3, 4.0);
  f.coordinator.Submit(Allreduce("x", 1, {1}));
  f.coordinator.Submit(Allreduce("y", 2, {1}));
  f.detector.Report(1, {Awaited("x")}, f.At(0));
  f.detector.Report(2, {Awaited("y")}, f.At(0));
  EXPECT_TRUE(!f.detector.Check(f.coordinator, 3, f.At(3.9)));
  auto v = f.detector.Check(f.coordinator, 3, f.At(4.0));
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(Contains(v->message, "Deadlock: ranks 1, 2 are blocked")) << v->message;
  EXPECT_EQ(v->collectives.size(), size_t(2));
}

TEST(EngineLogic, EngineDeadlockNotWhileAFreeRankCouldComplete) {
  // Ranks 0 and 1 wait on 'a', which rank 2 (busy, not blocked) has not submitted yet: a stall.
  DeadlockFixture f(3);
  f.coordinator.Submit(Allreduce("a", 0, {1}));
  f.coordinator.Submit(Allreduce("a", 1, {1}));
  f.detector.Report(0, {Awaited("a")});
  f.detector.Report(1, {Awaited("a")});
  EXPECT_TRUE(!f.detector.Check(f.coordinator, 3));
  // Rank 2 now blocks on something else: nobody can complete anything any more.
  f.coordinator.Submit(Allreduce("c", 2, {1}));
  f.detector.Report(2, {Awaited("c")});
  auto v = f.detector.Check(f.coordinator, 3);
  EXPECT_TRUE(v.has_value());
  EXPECT_TRUE(Contains(v->message, "ranks 0, 1, 2"));
  EXPECT_TRUE(Contains(v->message, "rank 2 waits on allreduce 'c' (not submitted by ranks 0, 1)"));
}

TEST(EngineLogic, EngineDeadlockWaitsUntilTheCoordinatorSeesTheRequests) {
  // Rank 1's report arrived, but its request is still on the way (it was a cached hit).
  DeadlockFixture f(2);
  f.coordinator.Submit(Allreduce("a", 0, {1}));
  f.detector.Report(0, {Awaited("a")});
  f.detector.Report(1, {Awaited("b")});
  EXPECT_TRUE(!f.detector.Check(f.coordinator, 2));
  f.coordinator.Submit(Allreduce("b", 1, {1}));
  EXPECT_TRUE(f.detector.Check(f.coordinator, 2).has_value());
}

TEST(EngineLogic, EngineDeadlockBesideAJoinedRankFailsTheOthersCollectivesNotTheJoin) {
  // Rank 1 joined; ranks 0 and 2 wait on allgathers of different names (Horovod's unnamed ops).
  DeadlockFixture f(3);
  RequestMeta join;
  join.type = OpType::kJoin;
  join.name = "join";
  join.rank = 1;
  f.coordinator.Submit(join);
  RequestMeta g0 = Allreduce("allgather.noname.1", 0, {2});
  g0.type = OpType::kAllgather;
  RequestMeta g2 = Allreduce("allgather.noname.2", 2, {2});
  g2.type = OpType::kAllgather;
  f.coordinator.Submit(g0);
  f.coordinator.Submit(g2);
  EXPECT_TRUE(f.coordinator.TakeReady().empty());
  f.detector.Report(0, {Awaited("allgather.noname.1", OpType::kAllgather)});
  f.detector.Report(1, {Awaited("join", OpType::kJoin)});
  f.detector.Report(2, {Awaited("allgather.noname.2", OpType::kAllgather)});
  auto v = f.detector.Check(f.coordinator, 3);
  EXPECT_TRUE(v.has_value() && !v->fail_join);
  EXPECT_TRUE(Contains(v->message, "rank 1 waits on join"));
  f.coordinator.FailEntries(v->collectives, v->fail_join, v->message);
  // The two allgathers fail; rank 1 stays joined, so that ranks 0 and 2, released by the error,
  // join too and the join completes (Horovod's test_horovod_join_allgather at np=3).
  auto failed = f.coordinator.TakeReady();
  EXPECT_EQ(failed.size(), size_t(2));
  EXPECT_TRUE(failed[0].type == OpType::kAllgather && !failed[0].ok());
  EXPECT_TRUE(f.coordinator.joined().count(1) == 1);
  RequestMeta j0 = join, j2 = join;
  j0.rank = 0;
  j2.rank = 2;
  f.coordinator.Submit(j0);
  f.coordinator.Submit(j2);
  auto joined = f.coordinator.TakeReady();
  EXPECT_EQ(joined.size(), size_t(1));
  EXPECT_TRUE(joined[0].type == OpType::kJoin && joined[0].ok());
}

TEST(EngineLogic, EngineDeadlockKeepsWhatMostRanksWaitOnAndFailsTheRest) {
  // Rank 0 left a loop early (a failed assertion) and waits on the next test's 'y'; ranks 1 and 2
  // wait on the loop's next 'x'. Failing only 'y' sends rank 0 on to 'x': the ranks are in step.
  DeadlockFixture f(3);
  f.coordinator.Submit(Allreduce("x", 1, {1}));
  f.coordinator.Submit(Allreduce("x", 2, {1}));
  f.coordinator.Submit(Allreduce("y", 0, {1}));
  f.detector.Report(0, {Awaited("y")});
  f.detector.Report(1, {Awaited("x")});
  f.detector.Report(2, {Awaited("x")});
  auto v = f.detector.Check(f.coordinator, 3);
  EXPECT_TRUE(v.has_value());
  EXPECT_EQ(v->collectives.size(), size_t(1));
  EXPECT_TRUE(v->collectives[0].second == "y");
  EXPECT_TRUE(Contains(v->message, "'x', which 2 of them wait on, stays pending"));
  f.coordinator.FailEntries(v->collectives, v->fail_join, v->message);
  auto failed = f.coordinator.TakeReady();
  EXPECT_EQ(failed.size(), size_t(1));
  EXPECT_TRUE(failed[0].name == "y" && !failed[0].ok());
  f.coordinator.Submit(Allreduce("x", 0, {1}));  // rank 0, released, catches up
  auto done = f.coordinator.TakeReady();
  EXPECT_EQ(done.size(), size_t(1));
  EXPECT_TRUE(done[0].name == "x" && done[0].ok());
}

TEST(EngineLogic, EngineDeadlockFailsEveryPositionalCollective) {
  // torch.distributed pairs by position: rank 0's allreduce of another shape at the same position
  // is a mismatch, not a rank gone astray. Every rank's collective fails (as on c10d's peers).
  DeadlockFixture f(3);
  f.coordinator.Submit(Allreduce("torch.allreduce.float32.3.sum", 1, {3}));
  f.coordinator.Submit(Allreduce("torch.allreduce.float32.3.sum", 2, {3}));
  f.coordinator.Submit(Allreduce("torch.allreduce.float32.4.sum", 0, {4}));
  AwaitedCollective mine = Awaited("torch.allreduce.float32.4.sum"), theirs = Awaited("torch.allreduce.float32.3.sum");
  mine.in_program_order = theirs.in_program_order = true;
  f.detector.Report(0, {mine});
  f.detector.Report(1, {theirs});
  f.detector.Report(2, {theirs});
  auto v = f.detector.Check(f.coordinator, 3);
  EXPECT_TRUE(v.has_value());
  EXPECT_EQ(v->collectives.size(), size_t(2));
  EXPECT_TRUE(!Contains(v->message, "stays pending"));
}

TEST(EngineLogic, EngineDeadlockReportRoundTripsAndRejectsBadTypes) {
  std::vector<AwaitedCollective> awaited = {Awaited("x"), Awaited("join", OpType::kJoin)};
  awaited[0].in_program_order = true;
  auto back = DecodeAwaited(EncodeAwaited(awaited));
  EXPECT_TRUE(back == awaited);
  EXPECT_TRUE(back[0].in_program_order && !back[1].in_program_order);
  std::string bad = EncodeAwaited({Awaited("x")});
  bad.back() = static_cast<char>(200);
  bool threw = false;
  try {
    DecodeAwaited(bad);
  } catch (const Error&) {
    threw = true;
  }
  EXPECT_TRUE(threw);
}

// Engine::MissingRanks' question and answer (engine/missing_ranks.cc): the collective, and the
// missing members or "not known", round-trip; a malformed answer is rejected.
TEST(EngineLogic, EngineMissingRanksQueryAndAnswerRoundTrip) {
  const CollectiveKey key{3, "torch.allreduce.float32"};
  EXPECT_TRUE(DecodeMissingQuery(EncodeMissingQuery(key)) == key);
  std::optional<std::vector<int>> missing;
  EXPECT_TRUE(DecodeMissingAnswer(EncodeMissingAnswer(key, std::vector<int>{1, 4}), &missing) == key);
  EXPECT_TRUE(missing.has_value() && *missing == std::vector<int>({1, 4}));
  EXPECT_TRUE(DecodeMissingAnswer(EncodeMissingAnswer(key, std::vector<int>{}), &missing) == key);
  EXPECT_TRUE(missing.has_value() && missing->empty());  // everyone submitted: still a known answer
  EXPECT_TRUE(DecodeMissingAnswer(EncodeMissingAnswer(key, std::nullopt), &missing) == key);
  EXPECT_FALSE(missing.has_value());
  std::string bad = EncodeMissingAnswer(key, std::nullopt);
  bad.back() = static_cast<char>(2);  // neither known nor unknown
  bool threw = false;
  try {
    DecodeMissingAnswer(bad, &missing);
  } catch (const Error&) {
    threw = true;
  }
  EXPECT_TRUE(threw);
}

// A departure (engine/departures.cc): the leaving rank's request is decided at once, and the
// entries of the sets that include it are dropped, those of the other sets kept.
TEST(EngineLogic, EngineCoordinatorDecidesALeaveAtOnceAndForgetsTheSetsWithIt) {
  ProcessSetTable table;
  table.Add(World(4));
  static Topology topo(std::vector<std::string>(4, "h"));
  table.Add(ProcessSetTable::Make(1, {0, 1, 2}, 0, topo));
  Coordinator c(4, &table);
  RequestMeta in_world = Allreduce("w", 0, {1});
  RequestMeta in_sub = Allreduce("s", 0, {1});
  in_sub.process_set = 1;
  c.Submit(in_world);
  c.Submit(in_sub);
  RequestMeta leave;
  leave.type = OpType::kLeave;
  leave.name = "leave.3";
  leave.rank = 3;
  c.Submit(leave);
  auto ready = c.TakeReady();
  ASSERT_EQ(ready.size(), size_t(1));
  EXPECT_EQ(ready[0].type, OpType::kLeave);
  EXPECT_EQ(ready[0].root, 3);
  EXPECT_FALSE(ResponseCache::Cacheable(ready[0]));
  c.ForgetSetsWith(3);
  auto left = c.Entries();
  ASSERT_EQ(left.size(), size_t(1));  // the world's allreduce is gone, the subset's waits on
  EXPECT_EQ(left[0].name, "s");
  for (int r : {1, 2}) {
    RequestMeta q = Allreduce("s", r, {1});
    q.process_set = 1;
    c.Submit(q);
  }
  ready = c.TakeReady();
  ASSERT_EQ(ready.size(), size_t(1));
  EXPECT_TRUE(ready[0].ok());
}

TEST(IdleJoinPatience, GrowsAfterWastedJoinsUpToTheCeilingAndFallsBackAfterOneThatHelped) {
  const IdleJoinPatience::Duration base = std::chrono::microseconds(50);
  IdleJoinPatience patience(base);
  EXPECT_EQ(patience.current(), base);
  patience.Joined(false);
  EXPECT_EQ(patience.current(), IdleJoinPatience::kGrowth * base);
  patience.Joined(false);
  EXPECT_EQ(patience.current(), IdleJoinPatience::kGrowth * IdleJoinPatience::kGrowth * base);
  for (int i = 0; i < 40; ++i) patience.Joined(false);  // a long lockstep phase
  EXPECT_EQ(patience.current(), IdleJoinPatience::kMax);
  patience.Joined(true);  // a non-member's join that let a process set's collective run
  EXPECT_EQ(patience.current(), base);
}
