#include "tests/collective_harness.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <thread>

#include "common/knobs.h"
#include "kernels/reduce.h"
#include "ops/herring/herring_allreduce.h"
#include "ps/shard_server.h"
#include "runtime/control_messages.h"
#include "runtime/counters.h"
#include "runtime/fault_injector.h"
#include "runtime/process_sets.h"
#include "runtime/topology.h"
#include "transport/shm_arena.h"

namespace herring {
namespace test {
namespace {

// Every repeat gets the tag space of a cycle of its own, as consecutive executions do in the
// engine; the unit is arbitrary.
constexpr uint64_t kFirstCycle = 7;
constexpr uint32_t kUnit = 3;

std::vector<std::string> Hostnames(const AllreduceCase& c) {
  std::vector<std::string> names = c.hosts;
  if (names.empty()) {
    for (int r = 0; r < c.workers; ++r) names.push_back("simhost" + std::to_string(r));
  }
  if (static_cast<int>(names.size()) != c.workers) {
    throw Error(Status::InvalidArgument("AllreduceCase: " + std::to_string(names.size()) + " hosts for " +
                                        std::to_string(c.workers) + " workers"));
  }
  for (int s = 0; s < c.dedicated_servers; ++s) names.push_back("simserver" + std::to_string(s));
  return names;
}

Config MakeConfig(const AllreduceCase& c) {
  std::map<std::string, std::string> env = {{"HERRING_TIMEOUT_SECONDS", "20"}};
  if (c.dedicated_servers > 0) env["HERRING_DEDICATED_SERVERS"] = std::to_string(c.dedicated_servers);
  for (const auto& [knob, value] : c.knobs) env[knob] = value;
  return Config::FromEnvironment(env);
}

// Rank r's view of the job's one process set (every worker), laid out as
// Engine::CreateProcessSet lays it out. Attaching the arena waits for the host's other workers.
std::unique_ptr<ProcessSet> MakeSet(const AllreduceCase& c, const Config& config, const Topology& topo, int rank,
                                    const std::string& arena_prefix, Transport& net) {
  std::vector<int> workers(c.workers);
  for (int r = 0; r < c.workers; ++r) workers[r] = r;
  auto set = ProcessSetTable::Make(0, workers, rank, topo);
  if (c.dedicated_servers > 0) {
    std::vector<int> servers;
    for (int s = 0; s < c.dedicated_servers; ++s) servers.push_back(c.workers + s);
    set->servers = ServerLayout::Dedicated(servers);
  } else {
    set->servers = ServerLayout::Colocated(set->hosts, set->ranks, config.num_servers);
  }
  if (c.shared_memory && set->my_index >= 0 && set->local_members().size() > 1) {
    ShmArenaOptions o;
    o.name = arena_prefix + std::to_string(set->my_host);
    o.local_index = set->my_local_index;
    o.local_size = static_cast<int>(set->local_members().size());
    o.member_ranks = set->local_members();  // member indices are ranks in a set of every worker
    o.slot_bytes = SlotBytes(config, set->hosts.size() > 1);
    o.deadline = Deadline::AfterSeconds(config.timeout_seconds);
    o.check_abort = [&net] { return net.FirstFailure(); };
    set->arena = ShmArena::Attach(o);
  }
  return set;
}

AllreduceBatch MakeBatch(const AllreduceCase& c, std::vector<uint8_t>* input, std::vector<uint8_t>* output) {
  AllreduceBatch batch;
  batch.dtype = c.dtype;
  batch.op = c.op;
  batch.prescale = c.prescale;
  batch.postscale = c.postscale;
  batch.label = "harness.tensor";
  const size_t esz = ElementSize(c.dtype);
  int64_t at = 0;
  for (int64_t count : c.entries) {
    // A dedicated server has no tensors, only the layout (as in Engine::ServeAllreduceBatch).
    if (input) {
      batch.entries.push_back({input->data() + at * esz, output->data() + at * esz, count});
    } else {
      batch.entries.push_back({nullptr, nullptr, count});
    }
    at += count;
  }
  return batch;
}

// What Engine::Abort does with a failure, so that ranks blocked on this one stop as well instead
// of sitting out their deadline.
void AbortLikeTheEngine(Transport& net, ProcessSet* set, const Status& status) {
  net.Abort(status);
  if (set && set->arena) set->arena->Poison(status.message());
  for (int peer = 0; peer < net.size(); ++peer) {
    if (peer == net.rank() || !net.PeerStatus(peer).ok()) continue;
    try {
      net.SendControl(peer, kAbortMessage, status.message());
    } catch (const std::exception&) {
      // Not connected yet (a failed ConnectMesh): nobody to tell.
    }
  }
}

}  // namespace

int64_t AllreduceCase::total() const {
  int64_t n = 0;
  for (int64_t count : entries) n += count;
  return n;
}

std::string AllreduceCase::Describe() const {
  std::string entries_text;
  for (int64_t count : entries) entries_text += (entries_text.empty() ? "" : ",") + std::to_string(count);
  std::string text = std::string(DataTypeName(dtype)) + " " + ReduceOpName(op) + ", " + std::to_string(workers) +
                     " workers";
  if (!hosts.empty()) text += " on given hosts";
  if (dedicated_servers) text += ", " + std::to_string(dedicated_servers) + " dedicated servers";
  if (shared_memory) text += ", shared memory";
  if (!fault.empty()) text += ", HERRING_FAULT=" + fault;
  return text + ", entries {" + entries_text + "}" + (noisy ? ", noisy" : "");
}

double InputValue(const AllreduceCase& c, int rank, int64_t i) {
  if (c.op == ReduceOp::kProduct) return 1 + (rank + i) % 2;
  if (c.noisy) {
    // splitmix64 of (rank, i): random enough, and cheap for the millions of elements of the
    // multi-chunk cases (seeding a generator per element is not).
    uint64_t z = static_cast<uint64_t>(rank) * 1000003 + static_cast<uint64_t>(i) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) / static_cast<double>(1ull << 52) - 1.0;  // [-1, 1)
  }
  return static_cast<double>((rank * 7 + i * 13) % 11) - (c.dtype == DataType::kUInt8 ? 0 : 5);
}

double ReferenceValue(const AllreduceCase& c, int64_t i) {
  double acc = 0;
  for (int r = 0; r < c.workers; ++r) {
    const double x = InputValue(c, r, i) * c.prescale;
    if (r == 0) {
      acc = x;
    } else if (c.op == ReduceOp::kSum) {
      acc += x;
    } else if (c.op == ReduceOp::kMin) {
      acc = std::min(acc, x);
    } else if (c.op == ReduceOp::kMax) {
      acc = std::max(acc, x);
    } else {
      acc *= x;
    }
  }
  return acc * c.postscale;
}

void StoreValue(DataType t, uint8_t* p, double x) {
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

double LoadValue(DataType t, const uint8_t* p) {
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

std::string AllreduceOutcome::AllErrors() const {
  std::string text;
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r].empty()) text += "rank " + std::to_string(r) + ": " + errors[r] + "; ";
  }
  return text;
}

AllreduceOutcome RunAllreduce(const AllreduceCase& c, const std::function<Transport&(int)>& net,
                              const AllreduceFactory& make, const std::function<void(int)>& connect) {
  static std::atomic<int> runs{0};
  const std::string arena_prefix =
      "/herring.test." + std::to_string(getpid()) + "." + std::to_string(runs++) + ".";
  const Topology topo(Hostnames(c));
  const Config config = MakeConfig(c);
  const size_t bytes = c.total() * ElementSize(c.dtype);
  AllreduceOutcome outcome;
  // Poisoned, so an implementation that writes nothing cannot pass.
  outcome.outputs.assign(c.workers, std::vector<uint8_t>(bytes, 0xA5));
  outcome.errors.resize(c.ranks());
  outcome.seconds.resize(c.ranks());
  outcome.counters.resize(c.ranks());
  // Kept until every rank is done: a rank that finishes first must not take its arena away from
  // the others.
  std::vector<std::unique_ptr<ProcessSet>> sets(c.ranks());
  // Likewise each rank's implementation and input, as the engine keeps its operations past a
  // failure: another rank may be copying into a receive this rank posted (into the shards'
  // staging, or a pull into its buffers) while this one unwinds.
  std::vector<std::unique_ptr<AllreduceImpl>> impls(c.ranks());
  std::vector<std::vector<uint8_t>> inputs(c.ranks());
  std::vector<std::thread> threads;
  for (int r = 0; r < c.ranks(); ++r) {
    threads.emplace_back([&, r] {
      const auto start = Clock::now();
      Transport& t = net(r);
      Counters counters;
      try {
        if (connect) connect(r);
        sets[r] = MakeSet(c, config, topo, r, arena_prefix, t);
        FaultInjector faults(c.fault, r);
        ExecContext ctx{config, t, *sets[r], topo, r, 0, counters, [&t] { return t.FirstFailure(); },
                        nullptr, "", &faults, nullptr};
        const bool worker = r < c.workers;
        std::vector<uint8_t>& input = inputs[r];
        input.resize(worker ? bytes : 0);
        for (int64_t i = 0; worker && i < c.total(); ++i) {
          StoreValue(c.dtype, &input[i * ElementSize(c.dtype)], InputValue(c, r, i));
        }
        AllreduceBatch batch = MakeBatch(c, worker ? &input : nullptr, worker ? &outcome.outputs[r] : nullptr);
        std::unique_ptr<AllreduceImpl>& impl = impls[r];
        impl = make();
        auto* herring = dynamic_cast<HerringAllreduce*>(impl.get());
        if (!worker && !herring) throw Error(Status::Internal(std::string(impl->name()) + " has no servers"));
        if (worker && !impl->Enabled(ctx, batch)) {
          throw Error(Status::Internal(std::string(impl->name()) + " is not enabled for this case"));
        }
        for (int rep = 0; rep < c.repeats; ++rep) {
          ctx.tag_base = MakeTagBase(kFirstCycle + rep, kUnit);
          if (worker) {
            impl->Execute(ctx, batch);
          } else {
            herring->ServeAsDedicatedServer(ctx, batch);
          }
        }
      } catch (const std::exception& e) {
        const auto* error = dynamic_cast<const Error*>(&e);
        const Status status = error ? error->status() : Status::Internal(e.what());
        outcome.errors[r] = status.message().empty() ? "(an error without a message)" : status.message();
        AbortLikeTheEngine(t, sets[r].get(), status);
      }
      outcome.seconds[r] = std::chrono::duration<double>(Clock::now() - start).count();
      outcome.counters[r] = counters.Snapshot();
    });
  }
  for (auto& thread : threads) thread.join();
  return outcome;
}

std::string CompareWithReference(const AllreduceCase& c, const AllreduceOutcome& outcome) {
  const std::string errors = outcome.AllErrors();
  if (!errors.empty()) return "failed: " + errors;
  const size_t esz = ElementSize(c.dtype);
  const int64_t total = c.total();
  bool reduces = total == 0;
  for (int r = 0; r < c.workers && !reduces; ++r) {
    for (int64_t i = 0; i < total && !reduces; ++i) {
      reduces = InputValue(c, r, i) * c.prescale * c.postscale != ReferenceValue(c, i);
    }
  }
  if (!reduces) return "the inputs equal the reference: this case cannot tell a reduction from a copy";
  for (int r = 1; r < c.workers; ++r) {
    if (outcome.outputs[r] != outcome.outputs[0]) return "rank " + std::to_string(r) + " differs bitwise from rank 0";
  }
  const double tolerance = c.noisy ? 1e-5 * c.workers : 0;
  for (int64_t i = 0; i < total; ++i) {
    const double got = LoadValue(c.dtype, &outcome.outputs[0][i * esz]), want = ReferenceValue(c, i);
    if (!(std::fabs(got - want) <= tolerance)) {
      return "element " + std::to_string(i) + " is " + std::to_string(got) + ", expected " + std::to_string(want);
    }
  }
  return "";
}

}  // namespace test
}  // namespace herring
