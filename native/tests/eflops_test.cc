// Tests of the EFLOPS pieces: the JSON reader, the topology description (HERRING_TOPOLOGY), the
// link model and the rank mapping onto it, and the halving-doubling allreduce itself, run in one
// process by n threads over real TCP transports on 127.0.0.1.
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/json.h"
#include "common/knobs.h"
#include "common/status.h"
#include "runtime/counters.h"
#include "runtime/process_sets.h"
#include "runtime/topology.h"
#include "kernels/reduce.h"
#include "ops/halving_doubling_allreduce.h"
#include "ops/topology_map.h"
#include <gtest/gtest.h>
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

struct Job {
  int n = 2;
  std::vector<std::string> hosts;                     // per rank; default: one host each
  std::shared_ptr<const NetworkTopology> topology;    // null: hd; else hd-topo
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::vector<int64_t> entries = {1000};              // tensors fused into one batch (elements)
  double prescale = 1.0, postscale = 1.0;
};

size_t Esz(const Job& job) { return ElementSize(job.dtype); }

// Rank r's input, element i of the fused layout, as a double that the dtype holds exactly
// (small integers) or, for float32/float64 with `noisy`, a random fraction.
double InputValue(const Job& job, int r, int64_t i, bool noisy) {
  if (job.op == ReduceOp::kProduct) return 1 + (r + i) % 2;
  if (noisy) {
    std::mt19937_64 g(static_cast<uint64_t>(r) * 1000003 + static_cast<uint64_t>(i));
    return std::uniform_real_distribution<double>(-1, 1)(g);
  }
  return static_cast<double>((r * 7 + i * 13) % 11) - (job.dtype == DataType::kUInt8 ? 0 : 5);
}

void Store(DataType t, uint8_t* p, double x) {
  switch (t) {
    case DataType::kFloat32: { float v = static_cast<float>(x); std::memcpy(p, &v, 4); break; }
    case DataType::kFloat64: std::memcpy(p, &x, 8); break;
    case DataType::kInt32: { int32_t v = static_cast<int32_t>(x); std::memcpy(p, &v, 4); break; }
    case DataType::kInt64: { int64_t v = static_cast<int64_t>(x); std::memcpy(p, &v, 8); break; }
    case DataType::kUInt8: *p = static_cast<uint8_t>(x); break;
    case DataType::kFloat16: { unsigned short v = FloatToHalf(static_cast<float>(x)); std::memcpy(p, &v, 2); break; }
    case DataType::kBFloat16: { unsigned short v = FloatToBFloat16(static_cast<float>(x)); std::memcpy(p, &v, 2); break; }
    default: throw Error(Status::Internal("dtype not used by these tests"));
  }
}

double Load(DataType t, const uint8_t* p) {
  switch (t) {
    case DataType::kFloat32: { float v; std::memcpy(&v, p, 4); return v; }
    case DataType::kFloat64: { double v; std::memcpy(&v, p, 8); return v; }
    case DataType::kInt32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DataType::kInt64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case DataType::kUInt8: return *p;
    case DataType::kFloat16: { unsigned short v; std::memcpy(&v, p, 2); return HalfToFloat(v); }
    case DataType::kBFloat16: { unsigned short v; std::memcpy(&v, p, 2); return BFloat16ToFloat(v); }
    default: throw Error(Status::Internal("dtype not used by these tests"));
  }
}

// Runs the allreduce on n transports (one thread per rank); returns each rank's fused output.
std::vector<std::vector<uint8_t>> RunAllreduce(const Job& job, bool noisy, std::string* error) {
  const int n = job.n;
  std::vector<std::string> hostnames = job.hosts;
  if (hostnames.empty()) {
    for (int r = 0; r < n; ++r) hostnames.push_back("simhost" + std::to_string(r));
  }
  Topology topo(hostnames);
  Config config = Config::FromEnvironment({{"HERRING_TIMEOUT_SECONDS", "20"}});
  std::vector<std::unique_ptr<TcpTransport>> nets;
  std::vector<Endpoint> endpoints;
  for (int r = 0; r < n; ++r) {
    TransportOptions o;
    o.rank = r;
    o.size = n;
    o.job_token = 0xEF10A5;
    o.secret = "eflops-test";
    nets.push_back(std::make_unique<TcpTransport>(o));
    endpoints.push_back(nets.back()->listen_endpoint());
  }
  int64_t total = 0;
  for (int64_t c : job.entries) total += c;
  const size_t esz = Esz(job);
  std::vector<std::vector<uint8_t>> outputs(n, std::vector<uint8_t>(total * esz));
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        nets[r]->ConnectMesh(endpoints, Deadline::AfterSeconds(20));
        std::vector<int> ranks(n);
        for (int i = 0; i < n; ++i) ranks[i] = i;
        auto set = ProcessSetTable::Make(0, ranks, r, topo);
        Counters counters;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // the rest: no timeline, faults...
        ExecContext ctx{config, *nets[r], *set, topo, r, MakeTagBase(7, 3), counters, [] { return Status::OK(); }};
#pragma GCC diagnostic pop
        std::vector<uint8_t> input(total * esz);
        for (int64_t i = 0; i < total; ++i) Store(job.dtype, &input[i * esz], InputValue(job, r, i, noisy));
        AllreduceBatch batch;
        batch.dtype = job.dtype;
        batch.op = job.op;
        batch.prescale = job.prescale;
        batch.postscale = job.postscale;
        batch.label = "eflops.test";
        int64_t at = 0;
        for (int64_t c : job.entries) {
          batch.entries.push_back({&input[at * esz], &outputs[r][at * esz], c});
          at += c;
        }
        HalvingDoublingAllreduce impl(job.topology);
        impl.Execute(ctx, batch);
        impl.Execute(ctx, batch);  // a second run on the same scratch: same result
      } catch (const std::exception& e) {
        errors[r] = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& net : nets) net->Close();
  for (const auto& e : errors) {
    if (!e.empty()) *error += e + "; ";
  }
  return outputs;
}

// Checks every rank's result against the reference and the ranks' bits against each other.
void CheckJob(const Job& job, bool noisy, const std::string& what) {
  std::string error;
  auto outputs = RunAllreduce(job, noisy, &error);
  if (!error.empty()) {
    ADD_FAILURE() << what + ": " + error;
    return;
  }
  const size_t esz = Esz(job);
  const int64_t total = static_cast<int64_t>(outputs[0].size() / esz);
  for (int r = 1; r < job.n; ++r) {
    if (outputs[r] != outputs[0]) {
      ADD_FAILURE() << what + ": rank " + std::to_string(r) + " differs bitwise from rank 0";
      return;
    }
  }
  for (int64_t i = 0; i < total; ++i) {
    double acc = 0;
    for (int r = 0; r < job.n; ++r) {
      double x = InputValue(job, r, i, noisy) * job.prescale;
      if (r == 0) acc = x;
      else if (job.op == ReduceOp::kSum) acc += x;
      else if (job.op == ReduceOp::kMin) acc = std::min(acc, x);
      else if (job.op == ReduceOp::kMax) acc = std::max(acc, x);
      else acc *= x;
    }
    acc *= job.postscale;
    double got = Load(job.dtype, &outputs[0][i * esz]);
    double tolerance = noisy ? 1e-5 * job.n : 0;
    if (!(std::fabs(got - acc) <= tolerance)) {
      ADD_FAILURE() << what + ": element " + std::to_string(i) + " is " +
                                                            std::to_string(got) + ", expected " + std::to_string(acc);
      return;
    }
  }
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
      Job job;
      job.n = n;
      if (topo) job.topology = AlternatingGroups(n);
      job.entries = {3, 1000, 0, 37};  // a fused batch, with an empty tensor in it
      CheckJob(job, true, "float32 sum n=" + std::to_string(n) + (topo ? " hd-topo" : " hd"));
    }
  }
}

TEST(Eflops, HalvingDoublingEveryOpAndSeveralDtypes) {
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kInt64, DataType::kUInt8,
                     DataType::kFloat16, DataType::kBFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      Job job;
      job.n = 5;
      job.dtype = t;
      job.op = op;
      job.entries = {129, 7};
      if (t == DataType::kUInt8 && op == ReduceOp::kSum) continue;  // sums overflow uint8 (wrap tested in Python)
      CheckJob(job, false, std::string("dtype ") + DataTypeName(t) + " op " + std::to_string(static_cast<int>(op)));
    }
  }
}

TEST(Eflops, HalvingDoublingScalesAndCrossesPieces) {
  // 3 MiB of float32 per rank: the halves travel in several 1 MiB pieces; n = 6 folds 2 in.
  Job job;
  job.n = 6;
  job.topology = AlternatingGroups(6);
  job.entries = {(3 << 20) / 4 + 5};
  job.prescale = 0.5;
  job.postscale = 4.0;
  CheckJob(job, false, "large, scaled, hd-topo n=6");
  job.topology = nullptr;
  job.n = 4;
  CheckJob(job, false, "large, scaled, hd n=4");
}

TEST(Eflops, HalvingDoublingFewerElementsThanPositions) {
  for (int n : {3, 8}) {
    Job job;
    job.n = n;
    job.entries = {1};
    CheckJob(job, false, "one element, n=" + std::to_string(n));
    job.entries = {5};
    CheckJob(job, false, "five elements, n=" + std::to_string(n));
  }
}

TEST(Eflops, HalvingDoublingTwoRanksPerHostWithTopology) {
  Job job;
  job.n = 8;
  job.hosts = {"simhost0", "simhost0", "simhost1", "simhost1", "simhost2", "simhost2", "simhost3", "simhost3"};
  job.topology = std::make_shared<const NetworkTopology>(Parse(ClusterJson({"a", "a", "b", "b"}, kSharedIntra, kDirectCross)));
  job.entries = {4099};
  CheckJob(job, true, "hd-topo 4 hosts x 2");
}
