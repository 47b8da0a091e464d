// Tests of the EFLOPS pieces: the JSON reader, the topology description (HERRING_TOPOLOGY), the
// link model and the rank mapping onto it, and the halving-doubling allreduce itself, run in one
// process by n threads over real TCP transports on 127.0.0.1 (tests/collective_harness.h; the
// same algorithm over memory, without sockets, is in algorithms_test.cc).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/knobs.h"
#include "common/status.h"
#include "ops/halving_doubling_allreduce.h"
#include "ops/topology_map.h"
#include <gtest/gtest.h>
#include "tests/collective_harness.h"
#include "transport/tcp_transport.h"

using namespace herring;

namespace {

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The message of the Error `body` throws ("" if it throws nothing).
template <typename F>
std::string ErrorOf(F body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

NetworkTopology Parse(const std::string& json) { return NetworkTopology::FromJson(ParseJson(json, "t.json"), "t.json"); }

// Hosts simhost0..simhost<h-1>, the first half in group "a", the rest in "b" (or as `groups` says).
std::string ClusterJson(const std::vector<std::string>& groups, const std::string& intra, const std::string& cross) {
  std::string hosts;
  for (size_t i = 0; i < groups.size(); ++i) {
    hosts += std::string(i ? "," : "") + "{\"slots\": 1, \"group\": \"" + groups[i] + "\"}";
  }
  return "{\"rate\": \"1gbit\", \"hosts\": [" + hosts + "], \"intra\": " + intra + ", \"cross\": " + cross + "}";
}

const char* kSharedIntra = "{\"link\": \"shared\", \"rate\": \"500mbit\"}";
const char* kDirectCross = "{\"link\": \"direct\", \"rate\": \"1gbit\"}";
const char* kDirectIntra = "{\"link\": \"direct\", \"rate\": \"1gbit\"}";
const char* kSharedCross = "{\"link\": \"shared\", \"rate\": \"500mbit\"}";

// Member m runs on host host_of[m] (named simhost<i>).
LinkModel Model(const NetworkTopology& t, const std::vector<int>& host_of) {
  std::vector<std::string> names;
  std::vector<int> ranks;
  for (size_t m = 0; m < host_of.size(); ++m) {
    names.push_back("simhost" + std::to_string(host_of[m]));
    ranks.push_back(static_cast<int>(m));
  }
  return LinkModel(t, names, ranks);
}

std::vector<int> OneRankPerHost(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

// Every exchange of every step joins members of different groups.
bool EveryExchangeCrosses(const LinkModel& model, const HalvingDoublingPlan& plan) {
  for (const auto& step : AllreduceSteps(plan, 1.0)) {
    for (const Flow& f : step) {
      if (model.group_of_member(f.src) == model.group_of_member(f.dst)) return false;
    }
  }
  return true;
}

bool AllOnes(const std::vector<int>& v) {
  for (int x : v) {
    if (x != 1) return false;
  }
  return !v.empty();
}

}  // namespace

// --- JSON -----------------------------------------------------------------------------------

TEST(Eflops, JsonKeepsDocumentOrderAndErrorsSayWhere) {
  // Group indices follow the order of the document's members (ordered_json), not sorted keys.
  Json v = ParseJson(R"({"b": [1, -2.5e3], "a": {"s": "x"}})", "doc");
  EXPECT_EQ(v.begin().key(), std::string("b"));
  EXPECT_EQ(v["b"][1].get<double>(), -2500.0);
  EXPECT_TRUE(Contains(ErrorOf([] { ParseJson("{\n  \"a\": 1,\n  \"b\" 2\n}", "f.json"); }),
                       "f.json: parse error at line 3"));
  EXPECT_TRUE(Contains(ErrorOf([] { ParseJson("{} x", "f.json"); }), "f.json: parse error"));
  EXPECT_TRUE(Contains(ErrorOf([] { ReadJsonFile("/nonexistent/topology.json"); }),
                       "cannot read /nonexistent/topology.json"));
}

// --- the description ------------------------------------------------------------------------

TEST(Eflops, TopologyRatesUseTcUnits) {
  EXPECT_EQ(ParseRateBps("1gbit", "x"), 1e9);
  EXPECT_EQ(ParseRateBps("250Mbit", "x"), 250e6);
  EXPECT_EQ(ParseRateBps("100mbps", "x"), 800e6);  // tc: mbps is megaBYTES per second
  EXPECT_EQ(ParseRateBps("none", "x"), 0.0);
  EXPECT_TRUE(Contains(ErrorOf([] { ParseRateBps("fast", "t.json: intra.rate"); }),
                       "t.json: intra.rate: rate 'fast' is not understood"));
}

TEST(Eflops, TopologyReadsTheSimulatedClustersFile) {
  NetworkTopology t = Parse(R"({"rate": "200mbit",
      "hosts": [{"slots": 2, "group": "a"}, {"name": "big", "group": "a", "rate": "1gbit"},
                {"group": "b"}, {"role": "server", "group": "b"}],
      "intra": {"link": "shared", "rate": "100mbit"}, "cross": {"link": "direct"}})");
  EXPECT_EQ(t.group_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(t.GroupOf("simhost0"), 0);
  EXPECT_EQ(t.GroupOf("big"), 0);
  EXPECT_EQ(t.GroupOf("simhost2"), 1);
  EXPECT_EQ(t.GroupOf("simhost3"), 1);  // server hosts are placed too
  EXPECT_EQ(t.GroupOf("simhost9"), -1);
  EXPECT_EQ(t.host_rate_bps.at("simhost0"), 200e6);
  EXPECT_EQ(t.host_rate_bps.at("big"), 1e9);
  EXPECT_TRUE(t.intra.link == LinkKind::kShared);
  EXPECT_EQ(t.intra.rate_bps, 100e6);
  EXPECT_TRUE(t.cross.link == LinkKind::kDirect);
  EXPECT_EQ(t.cross.rate_bps, 200e6);  // no rate of its own: the cluster's
}

TEST(Eflops, TopologyReadsTheGroupsForm) {
  NetworkTopology t = Parse(R"({"groups": {"left": ["n1", "n2"], "right": ["n3"]},
                                "cross": {"link": "direct", "rate": "10gbit"}})");
  EXPECT_EQ(t.GroupOf("n2"), 0);
  EXPECT_EQ(t.GroupOf("n3"), 1);
  EXPECT_TRUE(t.intra.link == LinkKind::kSwitch);
  EXPECT_EQ(t.host_rate_bps.at("n1"), 1e9);
  EXPECT_EQ(t.cross.rate_bps, 10e9);
}

TEST(Eflops, TopologyRejectsBadFilesNamingTheField) {
  EXPECT_TRUE(Contains(ErrorOf([] { Parse(R"({"groups": {"a": ["x"]}, "intra": {"link": "fat"}})"); }),
                       "t.json: intra.link 'fat' is not one of switch, shared, direct"));
  EXPECT_TRUE(Contains(ErrorOf([] { Parse(R"({"groups": {"a": ["x"], "b": ["x"]}})"); }),
                       "t.json: groups.b: host 'x' is named twice"));
  EXPECT_TRUE(Contains(ErrorOf([] { Parse(R"({"rate": "1gbit"})"); }),
                       "give either \"hosts\" (the simulated cluster's list) or \"groups\""));
  EXPECT_TRUE(Contains(ErrorOf([] { Parse(R"({"hosts": [{"group": "a"}, {}]})"); }),
                       "either every host has a \"group\" or none has"));
  EXPECT_TRUE(Contains(ErrorOf([] { Parse(R"({"hosts": "four"})"); }), "t.json: hosts must be a non-empty array"));
  EXPECT_TRUE(Contains(ErrorOf([] { Parse(R"({"hosts": 2.5})"); }), "t.json: hosts must be a positive count"));
  EXPECT_TRUE(Contains(ErrorOf([] { Parse(R"({"groups": {"a": ["x"]}, "cross": {"link": 3}})"); }),
                       "t.json: cross.link must be a string, not a number"));
}

TEST(Eflops, KnobsSelectHalvingDoubling) {
  EXPECT_TRUE(Config::FromEnvironment({{"HERRING_ALLREDUCE", "hd"}}).allreduce == AllreduceAlgorithm::kHalvingDoubling);
  Config c = Config::FromEnvironment({{"HERRING_ALLREDUCE", "hd-topo"}, {"HERRING_TOPOLOGY", "/x/t.json"}});
  EXPECT_TRUE(c.allreduce == AllreduceAlgorithm::kHalvingDoublingTopo);
  EXPECT_EQ(c.topology, std::string("/x/t.json"));
  EXPECT_TRUE(Contains(ErrorOf([] { Config::FromEnvironment({{"HERRING_ALLREDUCE", "hd-topo"}}); }),
                       "set HERRING_TOPOLOGY"));
  EXPECT_TRUE(Contains(ErrorOf([] { Config::FromEnvironment({{"HERRING_ALLREDUCE", "tree"}}); }),
                       "herring, ring, hd or hd-topo"));
  // A bad file fails when the implementation is made (at init), naming the file.
  EXPECT_TRUE(Contains(ErrorOf([] { MakeHalvingDoublingAllreduce(Config::FromEnvironment(
                           {{"HERRING_ALLREDUCE", "hd-topo"}, {"HERRING_TOPOLOGY", "/nonexistent/t.json"}})); }),
                       "cannot read /nonexistent/t.json"));
}

// --- plans and the link model ---------------------------------------------------------------

TEST(Eflops, PlanFoldsExtrasIntoTheCore) {
  HalvingDoublingPlan p6 = HalvingDoublingPlan::RankOrder(6);
  EXPECT_EQ(p6.p, 4);
  EXPECT_EQ(p6.extras(), 2);
  EXPECT_EQ(p6.rounds(), 2);
  auto steps = AllreduceSteps(p6, 8.0);
  ASSERT_TRUE(steps.size() == 6u);  // fold, 2 halving, 2 doubling, unfold
  EXPECT_EQ(steps[0].size(), size_t(2));
  EXPECT_EQ(steps[0][0].src, 4);
  EXPECT_EQ(steps[0][0].dst, 0);
  EXPECT_EQ(steps[0][0].bytes, 8.0);
  EXPECT_EQ(steps[1][0].bytes, 4.0);   // halves first, with the neighbour at distance 1
  EXPECT_EQ(steps[1][0].dst, 1);
  EXPECT_EQ(steps[2][0].bytes, 2.0);   // then quarters at distance 2
  EXPECT_EQ(steps[2][0].dst, 2);
  EXPECT_EQ(steps[3][0].bytes, 2.0);   // the all-gather mirrors it
  EXPECT_EQ(steps[5][1].src, 1);
  EXPECT_EQ(steps[5][1].dst, 5);
  EXPECT_EQ(AllreduceSteps(HalvingDoublingPlan::RankOrder(2), 1.0).size(), size_t(2));
  EXPECT_TRUE(Contains(ErrorOf([] { HalvingDoublingPlan::FromOrder({0, 0, 1}); }), "exactly once"));
}

TEST(Eflops, ModelChargesTheBusiestLink) {
  // 4 hosts, a = {0,1}, b = {2,3}; intra shared 500 Mbit/s, cross direct 1 Gbit/s.
  NetworkTopology t = Parse(ClusterJson({"a", "a", "b", "b"}, kSharedIntra, kDirectCross));
  LinkModel m = Model(t, OneRankPerHost(4));
  const double mb = 1e6;
  // Two intra flows of group a share its 500 Mbit/s link: 2 * 8 Mbit / 500 Mbit/s.
  EXPECT_EQ(m.StepSeconds({{0, 1, mb}, {1, 0, mb}}), 2 * 8e6 / 500e6);
  // Cross flows each have a direct link of their own: 8 Mbit / 1 Gbit/s, whatever their number.
  EXPECT_EQ(m.StepSeconds({{0, 2, mb}, {2, 0, mb}, {1, 3, mb}, {3, 1, mb}}), 8e6 / 1e9);
  // The same host: no network.
  LinkModel same = Model(t, {0, 0, 2, 2});
  EXPECT_EQ(same.StepSeconds({{0, 1, mb}}), 0.0);
  // Switch paths are limited by the senders' and receivers' own links (1 Gbit/s): two flows into
  // host 0 share its link.
  NetworkTopology flat = Parse(R"({"rate": "1gbit", "hosts": 3})");
  LinkModel f = Model(flat, OneRankPerHost(3));
  EXPECT_EQ(f.StepSeconds({{1, 0, mb}, {2, 0, mb}}), 2 * 8e6 / 1e9);
  // A shared cross link: one uplink per group and direction.
  NetworkTopology racks = Parse(ClusterJson({"a", "a", "b", "b"}, kDirectIntra, kSharedCross));
  LinkModel r = Model(racks, OneRankPerHost(4));
  EXPECT_EQ(r.StepSeconds({{0, 2, mb}, {1, 3, mb}}), 2 * 8e6 / 500e6);
  EXPECT_EQ(r.StepSeconds({{0, 2, mb}, {3, 1, mb}}), 8e6 / 500e6);  // opposite directions
}

TEST(Eflops, ModelNamesHostsMissingFromTheTopology) {
  NetworkTopology t = Parse(ClusterJson({"a", "b"}, kSharedIntra, kDirectCross));
  EXPECT_TRUE(Contains(ErrorOf([&] { LinkModel(t, {"simhost0", "gpu7"}, {0, 5}); }),
                       "does not name host 'gpu7' of rank 5"));
}

// --- the mapping ----------------------------------------------------------------------------

TEST(Eflops, MappingBiGraphEveryExchangeCrossesOnItsOwnLink) {
  NetworkTopology t = Parse(ClusterJson({"a", "a", "a", "a", "b", "b", "b", "b"}, kSharedIntra, kDirectCross));
  LinkModel m = Model(t, OneRankPerHost(8));
  TopologyMapping map = MapOntoTopology(m);
  EXPECT_TRUE(EveryExchangeCrosses(m, map.plan));
  EXPECT_TRUE(AllOnes(m.MostFlowsPerLink(map.plan)));
  // 2 * (1/2 + 1/4 + 1/8) of the buffer, every step over a 1 Gbit/s link of its own.
  EXPECT_TRUE(std::fabs(map.modeled_seconds_per_byte - 1.75 * 8 / 1e9) < 1e-15);
  // Rank order: the halves and quarters go over the group's shared link, 4 flows at a time:
  // 2 * (4 * (1/2 + 1/4) * 8 / 500e6) + 2 * (1/8 * 8 / 1e9).
  const double rank_order = 2 * (4 * 0.75 * 8 / 500e6) + 2 * (0.125 * 8 / 1e9);
  EXPECT_TRUE(std::fabs(map.rank_order_seconds_per_byte - rank_order) < 1e-15);
  // The parity construction alone already achieves it: position v is in the group of v's parity.
  EXPECT_EQ(map.strategy, std::string("bigraph"));
  for (int v = 0; v < 8; ++v) {
    int ones = __builtin_popcount(v) & 1;
    EXPECT_EQ(m.group_of_member(map.plan.member_at[v]), ones);
  }
  EXPECT_TRUE(Contains(DescribeMapping(map, m), "most flows on one link per step: 1 1 1 1 1 1"));
}

TEST(Eflops, MappingBiGraphWithInterleavedHostsAndNonPowersOfTwo) {
  // Hosts alternate between the groups; n = 3, 5, 6, 7 fold extras in across the groups too.
  for (int n : {2, 3, 4, 5, 6, 7}) {
    std::vector<std::string> groups;
    for (int i = 0; i < n; ++i) groups.push_back(i % 2 ? "b" : "a");
    NetworkTopology t = Parse(ClusterJson(groups, kSharedIntra, kDirectCross));
    LinkModel m = Model(t, OneRankPerHost(n));
    TopologyMapping map = MapOntoTopology(m);
    const std::string what = "n=" + std::to_string(n) + ": " + DescribeMapping(map, m);
    if (!AllOnes(m.MostFlowsPerLink(map.plan))) ADD_FAILURE() << what;
    // With groups of ceil(n/2) and floor(n/2) hosts every exchange can cross.
    if (!EveryExchangeCrosses(m, map.plan)) ADD_FAILURE() << what;
    EXPECT_TRUE(map.modeled_seconds_per_byte <= map.rank_order_seconds_per_byte);
  }
}

TEST(Eflops, MappingTwoRanksPerHostUseDistinctDirectLinks) {
  // 4 hosts x 2 ranks (a = hosts 0, 1; b = hosts 2, 3): each host's two ranks must talk to two
  // different hosts of the other group at every step, or a direct link would carry two flows.
  NetworkTopology t = Parse(ClusterJson({"a", "a", "b", "b"}, kSharedIntra, kDirectCross));
  LinkModel m = Model(t, {0, 0, 1, 1, 2, 2, 3, 3});
  TopologyMapping map = MapOntoTopology(m);
  const std::string what = DescribeMapping(map, m);
  if (!AllOnes(m.MostFlowsPerLink(map.plan))) ADD_FAILURE() << what;
  EXPECT_TRUE(std::fabs(map.modeled_seconds_per_byte - 1.75 * 8 / 1e9) < 1e-15);
}

TEST(Eflops, MappingReverseTopologyKeepsTrafficInsideGroups) {
  // Cross-group traffic shares one uplink per group: only the last, smallest exchange of the
  // halving (and the first of the doubling) should cross, even when the hosts alternate.
  NetworkTopology t = Parse(ClusterJson({"a", "b", "a", "b", "a", "b", "a", "b"}, kDirectIntra, kSharedCross));
  LinkModel m = Model(t, OneRankPerHost(8));
  TopologyMapping map = MapOntoTopology(m);
  auto steps = AllreduceSteps(map.plan, 1.0);
  ASSERT_TRUE(steps.size() == 6u);
  for (int s : {0, 1, 4, 5}) {  // the rounds at distance 1 and 2 stay inside the groups
    for (const Flow& f : steps[s]) EXPECT_EQ(m.group_of_member(f.src), m.group_of_member(f.dst));
  }
  for (const Flow& f : steps[2]) EXPECT_TRUE(m.group_of_member(f.src) != m.group_of_member(f.dst));
  // Cross part: 4 flows of 1/8 each way per group uplink (500 Mbit/s), twice; the rest direct.
  const double expected = 2 * (0.5 * 8 / 1e9 + 0.25 * 8 / 1e9 + 4 * 0.125 * 8 / 500e6);
  EXPECT_TRUE(std::fabs(map.modeled_seconds_per_byte - expected) < 1e-15);
  EXPECT_TRUE(map.modeled_seconds_per_byte < map.rank_order_seconds_per_byte);
}

TEST(Eflops, MappingKeepsRankOrderWhenTheTopologyDoesNotMatter) {
  NetworkTopology t = Parse(R"({"rate": "1gbit", "hosts": 6})");
  LinkModel m = Model(t, OneRankPerHost(6));
  TopologyMapping map = MapOntoTopology(m);
  EXPECT_EQ(map.strategy, std::string("rank order"));
  EXPECT_EQ(map.plan.member_at, HalvingDoublingPlan::RankOrder(6).member_at);
}

TEST(Eflops, MappingIsDeterministic) {
  NetworkTopology t = Parse(ClusterJson({"a", "b", "b", "a", "b", "a", "a", "b", "a", "b", "a", "b"},
                                        kSharedIntra, kDirectCross));
  std::vector<int> hosts;
  for (int i = 0; i < 24; ++i) hosts.push_back(i / 2);
  LinkModel m1 = Model(t, hosts), m2 = Model(t, hosts);
  EXPECT_EQ(MapOntoTopology(m1).plan.member_at, MapOntoTopology(m2).plan.member_at);
}

// --- the allreduce over real transports -----------------------------------------------------

namespace {

using test::AllreduceCase;

// Runs halving-doubling (mapped onto `topology` when given: hd-topo) on TcpTransports over
// 127.0.0.1, one thread per rank, and checks every rank's result against the reference.
void CheckJob(const AllreduceCase& c, std::shared_ptr<const NetworkTopology> topology, const std::string& what) {
  std::vector<std::unique_ptr<TcpTransport>> nets;
  std::vector<Endpoint> endpoints;
  for (int r = 0; r < c.ranks(); ++r) {
    TransportOptions o;
    o.rank = r;
    o.size = c.ranks();
    o.job_token = 0xEF10A5;
    o.secret = "eflops-test";
    nets.push_back(std::make_unique<TcpTransport>(o));
    endpoints.push_back(nets.back()->listen_endpoint());
  }
  test::AllreduceOutcome outcome = test::RunAllreduce(
      c, [&](int r) -> Transport& { return *nets[r]; },
      [&] { return std::make_unique<HalvingDoublingAllreduce>(topology); },
      [&](int r) { nets[r]->ConnectMesh(endpoints, Deadline::AfterSeconds(20)); });
  for (auto& net : nets) net->Close();
  const std::string mismatch = test::CompareWithReference(c, outcome);
  if (!mismatch.empty()) ADD_FAILURE() << what << " (" << c.Describe() << "): " << mismatch;
}

std::shared_ptr<const NetworkTopology> AlternatingGroups(int hosts) {
  std::vector<std::string> groups;
  for (int i = 0; i < hosts; ++i) groups.push_back(i % 2 ? "b" : "a");
  return std::make_shared<const NetworkTopology>(Parse(ClusterJson(groups, kSharedIntra, kDirectCross)));
}

}  // namespace

TEST(Eflops, HalvingDoublingMatchesReferencesForEverySize) {
  for (int n = 2; n <= 9; ++n) {
    for (bool topo : {false, true}) {
      AllreduceCase c;
      c.workers = n;
      c.entries = {3, 1000, 0, 37};  // a fused batch, with an empty tensor in it
      c.noisy = true;
      CheckJob(c, topo ? AlternatingGroups(n) : nullptr, topo ? "hd-topo" : "hd");
    }
  }
}

TEST(Eflops, HalvingDoublingEveryOpAndSeveralDtypes) {
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kInt64, DataType::kUInt8,
                     DataType::kFloat16, DataType::kBFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      AllreduceCase c;
      c.workers = 5;
      c.dtype = t;
      c.op = op;
      c.entries = {129, 7};
      if (t == DataType::kUInt8 && op == ReduceOp::kSum) continue;  // sums overflow uint8 (wrap tested in Python)
      CheckJob(c, nullptr, "hd");
    }
  }
}

TEST(Eflops, HalvingDoublingScalesAndCrossesPieces) {
  // 3 MiB of float32 per rank: the halves travel in several 1 MiB pieces; n = 6 folds 2 in.
  AllreduceCase c;
  c.workers = 6;
  c.entries = {(3 << 20) / 4 + 5};
  c.prescale = 0.5;
  c.postscale = 4.0;
  CheckJob(c, AlternatingGroups(6), "large, scaled, hd-topo");
  c.workers = 4;
  CheckJob(c, nullptr, "large, scaled, hd");
}

TEST(Eflops, HalvingDoublingFewerElementsThanPositions) {
  for (int n : {3, 8}) {
    AllreduceCase c;
    c.workers = n;
    c.entries = {1};
    CheckJob(c, nullptr, "one element");
    c.entries = {5};
    CheckJob(c, nullptr, "five elements");
  }
}

TEST(Eflops, HalvingDoublingTwoRanksPerHostWithTopology) {
  AllreduceCase c;
  c.workers = 8;
  c.hosts = {"simhost0", "simhost0", "simhost1", "simhost1", "simhost2", "simhost2", "simhost3", "simhost3"};
  c.entries = {4099};
  c.noisy = true;
  auto topology = std::make_shared<const NetworkTopology>(Parse(ClusterJson({"a", "a", "b", "b"}, kSharedIntra, kDirectCross)));
  CheckJob(c, topology, "hd-topo 4 hosts x 2");
}
