// The allreduce algorithms run by n threads on an InMemoryFabric, with no processes or sockets:
// ring, halving-doubling (in rank order and mapped onto a topology) and the Herring PS
// allreduce (server shards colocated or dedicated, ranks alone on their hosts or sharing one
// through a ShmArena). Each result is checked against a reference reduction computed here and
// must hold the same bits on every rank; a rank killed mid-collective must turn into an error
// naming it on every survivor, well before the step deadline.
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include <gtest/gtest.h>
#include "ops/halving_doubling_allreduce.h"
#include "ops/herring/herring_allreduce.h"
#include "ops/ring_allreduce.h"
#include "ops/topology_map.h"
#include "runtime/control_messages.h"
#include "tests/collective_harness.h"
#include "transport/in_memory_transport.h"

using namespace herring;
using test::AllreduceCase;
using test::AllreduceFactory;
using test::AllreduceOutcome;

namespace {

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The abort message is the engine's, so one rank's failure reaches the others as it would there.
InMemoryFabricOptions FabricFor(const AllreduceCase& c) { return InMemoryFabricOptions{c.ranks(), kAbortMessage}; }

AllreduceOutcome RunInMemory(const AllreduceCase& c, const AllreduceFactory& make) {
  InMemoryFabric fabric(FabricFor(c));
  return test::RunAllreduce(c, [&](int r) -> Transport& { return fabric.endpoint(r); }, make);
}

AllreduceFactory Ring() {
  return [] { return std::make_unique<RingAllreduce>(); };
}
AllreduceFactory HalvingDoubling(std::shared_ptr<const NetworkTopology> topology = nullptr) {
  return [topology] { return std::make_unique<HalvingDoublingAllreduce>(topology); };
}
AllreduceFactory Herring() {
  return [] { return std::make_unique<HerringAllreduce>(); };
}

// Runs the case and checks the result, and that `counter` says the algorithm itself ran on
// every worker (not a fallback, not an early return).
void Check(const AllreduceCase& c, const AllreduceFactory& make, const char* counter) {
  AllreduceOutcome outcome = RunInMemory(c, make);
  EXPECT_EQ(test::CompareWithReference(c, outcome), "") << c.Describe();
  const uint64_t runs = c.total() > 0 ? static_cast<uint64_t>(c.repeats) : 0;
  for (int r = 0; r < c.workers; ++r) {
    EXPECT_EQ(outcome.counters[r].at(counter), runs) << c.Describe() << ", rank " << r;
  }
}

// Every reduction on float32 and int32, at sizes 0, 1, odd, and a fused batch with an empty
// tensor in it.
std::vector<AllreduceCase> EveryOpDtypeAndSize(int workers) {
  std::vector<AllreduceCase> cases;
  for (DataType t : {DataType::kFloat32, DataType::kInt32}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      for (std::vector<int64_t> entries : std::vector<std::vector<int64_t>>{{0}, {1}, {37}, {3, 0, 129}}) {
        AllreduceCase c;
        c.workers = workers;
        c.dtype = t;
        c.op = op;
        c.entries = entries;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

// Groups a and b alternate over the hosts; links inside a group are shared, across groups direct.
std::shared_ptr<const NetworkTopology> AlternatingGroups(int hosts) {
  std::string list;
  for (int i = 0; i < hosts; ++i) list += std::string(i ? "," : "") + "{\"group\": \"" + (i % 2 ? "b" : "a") + "\"}";
  const std::string json = "{\"rate\": \"1gbit\", \"hosts\": [" + list +
                           "], \"intra\": {\"link\": \"shared\", \"rate\": \"500mbit\"}, "
                           "\"cross\": {\"link\": \"direct\", \"rate\": \"1gbit\"}}";
  return std::make_shared<const NetworkTopology>(NetworkTopology::FromJson(ParseJson(json, "t.json"), "t.json"));
}

// Elements per Herring chunk when the set spans hosts (ps/shard_server.h), so a test can ask for
// more than one.
int64_t HerringChunkElements(bool dedicated, DataType t) {
  return static_cast<int64_t>((dedicated ? kDedicatedServerSlotBytes : kCrossHostSlotBytes) / kPipelineDepth /
                              ElementSize(t));
}

// A rank whose process dies just before its n-th Send: everything else is the fabric's.
class CrashingTransport final : public Transport {
 public:
  CrashingTransport(InMemoryFabric& fabric, int rank, int crash_at_send)
      : fabric_(fabric), inner_(fabric.endpoint(rank)), crash_at_(crash_at_send) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  CompletionPtr Send(int peer, uint64_t tag, const void* data, size_t bytes) override {
    if (++sends_ == crash_at_) fabric_.Kill(rank());
    return inner_.Send(peer, tag, data, bytes);
  }
  CompletionPtr Recv(int peer, uint64_t tag, void* data, size_t bytes) override {
    return inner_.Recv(peer, tag, data, bytes);
  }
  void SendControl(int peer, uint32_t type, const std::string& payload) override {
    inner_.SendControl(peer, type, payload);
  }
  bool PopControl(ControlMessage* out) override { return inner_.PopControl(out); }
  Status PeerStatus(int peer) const override { return inner_.PeerStatus(peer); }
  Status FirstFailure() const override { return inner_.FirstFailure(); }
  void Abort(const Status& reason) override { inner_.Abort(reason); }
  void ResetConnections() override { inner_.ResetConnections(); }

 private:
  InMemoryFabric& fabric_;
  Transport& inner_;
  const int crash_at_;
  std::atomic<int> sends_{0};
};

// Runs the case with rank `victim` crashing before its crash_at_send-th Send (0: never, the
// case's HERRING_FAULT does it) and checks that every survivor failed, naming the victim,
// before the step deadline (HERRING_TIMEOUT_SECONDS) could have fired.
void ExpectSurvivorsNameTheDeadRank(AllreduceCase c, const AllreduceFactory& make, int victim, int crash_at_send) {
  constexpr double kStepDeadline = 10;
  c.knobs["HERRING_TIMEOUT_SECONDS"] = "10";
  InMemoryFabric fabric(FabricFor(c));
  CrashingTransport crashing(fabric, victim, crash_at_send);
  AllreduceOutcome outcome = test::RunAllreduce(
      c,
      [&](int r) -> Transport& {
        if (r == victim && crash_at_send > 0) return crashing;
        return fabric.endpoint(r);
      },
      make);
  const std::string dead = "rank " + std::to_string(victim);
  EXPECT_TRUE(Contains(outcome.errors[victim], "killed")) << c.Describe() << ": " << outcome.errors[victim];
  for (int r = 0; r < c.ranks(); ++r) {
    if (r == victim) continue;
    const std::string& e = outcome.errors[r];
    EXPECT_TRUE(Contains(e, dead + ": killed")) << c.Describe() << ", rank " << r << ": '" << e << "'";
    EXPECT_FALSE(Contains(e, "made no progress")) << c.Describe() << ", rank " << r << ": " << e;
    EXPECT_LT(outcome.seconds[r], kStepDeadline) << c.Describe() << ", rank " << r;
  }
}

// Copies each rank's own input: what a broken allreduce might do.
class CopyInsteadOfReduce : public AllreduceImpl {
 public:
  const char* name() const override { return "copy"; }
  bool Enabled(const ExecContext&, const AllreduceBatch&) const override { return true; }
  void Execute(ExecContext&, AllreduceBatch& batch) override {
    for (const auto& e : batch.entries) std::memcpy(e.output, e.input, e.count * ElementSize(batch.dtype));
  }
};

// Does nothing at all.
class LeaveOutputsAlone : public CopyInsteadOfReduce {
 public:
  void Execute(ExecContext&, AllreduceBatch&) override {}
};

}  // namespace

// --- the checks can fail ----------------------------------------------------------------------

TEST(Algorithms, TheReferenceCheckRejectsAllreducesThatDoNotReduce) {
  for (const AllreduceCase& c : EveryOpDtypeAndSize(3)) {
    if (c.total() == 0) continue;  // nothing to get wrong
    EXPECT_NE(test::CompareWithReference(c, RunInMemory(c, [] { return std::make_unique<CopyInsteadOfReduce>(); })), "")
        << c.Describe();
    EXPECT_NE(test::CompareWithReference(c, RunInMemory(c, [] { return std::make_unique<LeaveOutputsAlone>(); })), "")
        << c.Describe();
  }
}

// --- ring -------------------------------------------------------------------------------------

TEST(Algorithms, RingEveryOpDtypeAndSize) {
  for (int n : {2, 3, 5}) {
    for (const AllreduceCase& c : EveryOpDtypeAndSize(n)) Check(c, Ring(), "ring_allreduces");
  }
}

TEST(Algorithms, RingOtherDtypesLargeBuffersAndScaling) {
  for (DataType t : {DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16, DataType::kInt64}) {
    AllreduceCase c;
    c.workers = 4;
    c.dtype = t;
    c.entries = {1001, 15};
    Check(c, Ring(), "ring_allreduces");
  }
  AllreduceCase big;
  big.workers = 3;
  big.entries = {300007};
  big.noisy = true;
  big.prescale = 0.5;
  big.postscale = 3.0;
  Check(big, Ring(), "ring_allreduces");
}

TEST(Algorithms, RingPeerKilledMidCollective) {
  AllreduceCase c;
  c.workers = 4;
  c.entries = {4096};
  ExpectSurvivorsNameTheDeadRank(c, Ring(), 2, 2);  // rank 2 dies after its first segment left
}

// --- halving-doubling -------------------------------------------------------------------------

TEST(Algorithms, HalvingDoublingEveryOpDtypeAndSize) {
  for (int n : {2, 4, 6}) {  // a power of two, and one that folds two extra positions in
    for (const AllreduceCase& c : EveryOpDtypeAndSize(n)) Check(c, HalvingDoubling(), "hd_allreduces");
  }
}

TEST(Algorithms, HalvingDoublingTopologyAwareAndInPieces) {
  for (int n : {3, 5, 8}) {
    AllreduceCase c;
    c.workers = n;
    c.entries = {3, 1000, 0, 37};
    c.noisy = true;
    Check(c, HalvingDoubling(AlternatingGroups(n)), "hd_allreduces");
  }
  // More than 1 MiB per half: each exchange travels in several pieces.
  AllreduceCase big;
  big.workers = 6;
  big.entries = {(3 << 20) / 4 + 5};
  big.prescale = 0.5;
  big.postscale = 4.0;
  Check(big, HalvingDoubling(AlternatingGroups(6)), "hd_allreduces");
  big.dtype = DataType::kInt32;
  big.prescale = big.postscale = 1.0;
  big.op = ReduceOp::kMax;
  Check(big, HalvingDoubling(), "hd_allreduces");
}

TEST(Algorithms, HalvingDoublingPeerKilledMidCollective) {
  AllreduceCase c;
  c.workers = 5;  // rank 4 folds into rank 0
  c.entries = {4096};
  ExpectSurvivorsNameTheDeadRank(c, HalvingDoubling(), 2, 2);
}

// --- Herring: server shards -------------------------------------------------------------------

// The sizes of EveryOpDtypeAndSize are small batches: across hosts they take the exchange of host
// sums unless the small-message path is off. The PS tests turn it off to reach the shards.
AllreduceCase ThroughTheShards(AllreduceCase c) {
  c.knobs["HERRING_SMALL_MESSAGE_BYTES"] = "0";
  return c;
}

// Checks the case and that no rank took the exchange of host sums.
void CheckOnTheShards(const AllreduceCase& c) {
  AllreduceOutcome outcome = RunInMemory(c, Herring());
  EXPECT_EQ(test::CompareWithReference(c, outcome), "") << c.Describe();
  for (int r = 0; r < c.ranks(); ++r) {
    EXPECT_EQ(outcome.counters[r].at("host_sum_exchanges"), 0u) << c.Describe() << ", rank " << r;
  }
}

TEST(Algorithms, HerringColocatedShardsEveryOpDtypeAndSize) {
  for (int n : {2, 3, 4}) {  // every rank alone on its simulated host
    for (const AllreduceCase& c : EveryOpDtypeAndSize(n)) {
      Check(ThroughTheShards(c), Herring(), "herring_allreduces");
      CheckOnTheShards(ThroughTheShards(c));
    }
  }
}

// --- Herring: small batches across hosts, host sums exchanged ----------------------------------

// Runs the case on the exchange and on the shards: both correct, on the exchange every time, with
// the same bits (the exchange reduces in the order the shards do).
void CheckExchangeMatchesTheShards(const AllreduceCase& c) {
  Check(c, Herring(), "host_sum_exchanges");
  AllreduceOutcome exchanged = RunInMemory(c, Herring());
  AllreduceOutcome sharded = RunInMemory(ThroughTheShards(c), Herring());
  for (int r = 0; r < c.workers; ++r) {
    EXPECT_EQ(exchanged.counters[r].at("server_pushes"), 0u) << c.Describe() << ", rank " << r;
    EXPECT_EQ(exchanged.outputs[r], sharded.outputs[r]) << c.Describe() << ", rank " << r;
  }
}

TEST(Algorithms, HerringSmallBatchesAcrossHostsExchangeHostSums) {
  // Every rank alone on its simulated host; with 3, 5 and 7 hosts Bruck's last round is partial.
  for (int n : {2, 3, 4, 5, 7, 8}) {
    for (const AllreduceCase& c : EveryOpDtypeAndSize(n)) CheckExchangeMatchesTheShards(c);
  }
  AllreduceCase c;
  c.workers = 4;
  c.hosts = {"hostA", "hostA", "hostB", "hostB"};  // host sums in shared memory first
  c.shared_memory = true;
  c.prescale = 0.5;
  c.postscale = 0.25;
  for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kFloat64}) {
    c.dtype = t;
    // Half types hold small integers exactly; random fractions would round at each host sum, past
    // the reference check's tolerance (the bits are still compared with the shards' below).
    c.noisy = t == DataType::kFloat32 || t == DataType::kFloat64;
    c.entries = {3, 0, 1000};
    CheckExchangeMatchesTheShards(c);
  }
  c.dtype = DataType::kFloat32;
  c.workers = 6;
  c.hosts = {"hostA", "hostA", "hostB", "hostB", "hostC", "hostC"};
  c.entries = {16384};  // exactly HERRING_SMALL_MESSAGE_BYTES
  CheckExchangeMatchesTheShards(c);
}

TEST(Algorithms, HerringSmallBatchesAcrossHostsStayOnTheShardsWhenTheyMust) {
  AllreduceCase c;
  c.workers = 3;
  c.hosts = {"hostA", "hostA", "hostB"};  // hosts of different sizes: no counterpart for rank 1
  c.shared_memory = true;
  c.entries = {100};
  CheckOnTheShards(c);
  c.hosts = {};
  c.shared_memory = false;
  c.entries = {16385};  // one element above the threshold
  CheckOnTheShards(c);
  c.entries = {100};
  c.dedicated_servers = 2;  // dedicated servers serve every allreduce
  CheckOnTheShards(c);
}

TEST(Algorithms, HerringPeerKilledDuringTheExchangeOfHostSums) {
  AllreduceCase c;
  c.workers = 3;
  c.entries = {256};
  ExpectSurvivorsNameTheDeadRank(c, Herring(), 1, 1);  // dies at its first send of its host sum
}

TEST(Algorithms, HerringColocatedShardsSeveralChunks) {
  AllreduceCase c;
  c.workers = 3;
  c.entries = {HerringChunkElements(false, DataType::kFloat32) * 2 + 77, 5};
  c.noisy = true;
  c.prescale = 0.25;
  Check(c, Herring(), "herring_allreduces");
  c.knobs["HERRING_NUM_SERVERS"] = "2";  // fewer shards than ranks: rank 2 serves none
  c.knobs["HERRING_SCHEDULE"] = "r2sp";  // pushes visit the shards in turn
  Check(c, Herring(), "herring_allreduces");
}

TEST(Algorithms, HerringDedicatedServers) {
  AllreduceCase c;
  c.workers = 3;
  c.dedicated_servers = 2;
  for (std::vector<int64_t> entries : std::vector<std::vector<int64_t>>{
           {0}, {1}, {37, 0, 3}, {HerringChunkElements(true, DataType::kFloat32) * 2 + 9}}) {
    c.entries = entries;
    AllreduceOutcome outcome = RunInMemory(c, Herring());
    EXPECT_EQ(test::CompareWithReference(c, outcome), "") << c.Describe();
    // Shard ranges are cut on 64-byte boundaries: below two of them the second server has none.
    for (int s = c.workers; s < c.ranks() && c.total() >= 32; ++s) {
      EXPECT_GT(outcome.counters[s].at("server_ranges"), 0u) << c.Describe() << ", server rank " << s;
    }
  }
  c.dtype = DataType::kInt32;
  c.op = ReduceOp::kMin;
  c.entries = {513};
  Check(c, Herring(), "herring_allreduces");
}

TEST(Algorithms, HerringTwoHostsOfTwoThroughSharedMemory) {
  AllreduceCase c;
  c.workers = 4;
  c.hosts = {"hostA", "hostA", "hostB", "hostB"};
  c.shared_memory = true;
  for (AllreduceCase each : EveryOpDtypeAndSize(4)) {
    each.hosts = c.hosts;
    each.shared_memory = true;
    Check(ThroughTheShards(each), Herring(), "herring_allreduces");
  }
  c.entries = {HerringChunkElements(false, DataType::kFloat32) + 1001};  // two chunks
  c.noisy = true;
  AllreduceOutcome outcome = RunInMemory(c, Herring());
  EXPECT_EQ(test::CompareWithReference(c, outcome), "") << c.Describe();
  EXPECT_GT(outcome.counters[0].at("shm_chunks"), 0u);
  c.dedicated_servers = 2;  // the same hosts with their shards on servers
  Check(c, Herring(), "herring_allreduces");
  c.dedicated_servers = 0;
  c.hosts = {"hostA", "hostA", "hostA"};  // one host: shared memory alone, no shards
  c.workers = 3;
  Check(c, Herring(), "herring_allreduces");
}

// Without a prescale each slice's owner reads its own input from its tensors, not from its slot;
// fused tensors whose edges fall inside, across and on the owners' slices of several chunks must
// give the same bits on every rank, with and without a prescale (which stages everything).
TEST(Algorithms, HerringOneHostOwnersReadTheirOwnInputsFromTheirTensors) {
  constexpr size_t kChunkBytes = 65536;  // a sub-slot: batches of two chunks, above the one-step size
  for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kInt32}) {
    for (double prescale : {1.0, 0.5}) {
      if (t == DataType::kInt32 && prescale != 1.0) continue;  // halving odd integers would truncate
      AllreduceCase c;
      c.workers = 3;
      c.hosts = {"hostA", "hostA", "hostA"};
      c.shared_memory = true;
      c.knobs = {{"HERRING_SHM_SLOT_BYTES", std::to_string(kChunkBytes * kPipelineDepth)}};
      c.dtype = t;
      c.noisy = t == DataType::kFloat32;
      c.prescale = prescale;
      const int64_t chunk = kChunkBytes / ElementSize(t);
      c.entries = {chunk / 3 - 5, 11, 0, chunk + 2000, 37};
      AllreduceOutcome outcome = RunInMemory(c, Herring());
      EXPECT_EQ(test::CompareWithReference(c, outcome), "") << c.Describe();
      EXPECT_EQ(outcome.counters[0].at("shm_chunks"), 2u * c.repeats) << c.Describe();
    }
  }
}

TEST(Algorithms, HerringServerKilledWhileServing) {
  AllreduceCase c;
  c.workers = 4;
  c.entries = {4096};
  c.knobs["HERRING_SMALL_MESSAGE_BYTES"] = "0";  // through the shards, not the exchange of host sums
  c.fault = "reset:serve:2";  // rank 2's shard drops its links holding everyone's pushes
  ExpectSurvivorsNameTheDeadRank(c, Herring(), 2, 0);
  c.dedicated_servers = 2;
  c.fault = "reset:serve:5";  // a dedicated server
  ExpectSurvivorsNameTheDeadRank(c, Herring(), 5, 0);
}
