// Test support for the allreduce algorithms: a simulated job whose ranks are threads of this
// process, each with the process set, topology and execution context the engine would build for
// it, over whatever Transport the test hands in (TcpTransport in eflops_test, InMemoryFabric in
// algorithms_test); and typed inputs with the reference reduction the results must match.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/reduce_op.h"
#include "runtime/collective.h"
#include "transport/transport.h"

namespace herring {
namespace test {

struct AllreduceCase {
  int workers = 2;
  std::vector<std::string> hosts;  // host of each worker; empty: one host each ("simhost<r>")
  // Ranks workers .. workers + dedicated_servers - 1 serve the shards (each on a host of its own);
  // only the herring allreduce has servers.
  int dedicated_servers = 0;
  // Workers sharing a host attach a ShmArena together, as the engine does (the herring allreduce
  // stages through it); without, hd and ring never look at it.
  bool shared_memory = false;
  std::map<std::string, std::string> knobs;  // HERRING_* settings of every rank's Config
  std::string fault;                         // HERRING_FAULT spec, "" for none

  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::vector<int64_t> entries = {1000};  // tensors fused into one batch (elements)
  double prescale = 1.0, postscale = 1.0;
  bool noisy = false;  // random fractions (float dtypes) instead of small integers
  // Executions on the same implementation objects: reused scratch must not change the result.
  int repeats = 2;

  int ranks() const { return workers + dedicated_servers; }
  int64_t total() const;
  std::string Describe() const;  // for failure messages
};

// Rank r's input at element i of the fused layout: a small integer every dtype holds exactly,
// 1 or 2 for products (so they neither overflow nor vanish), or a fraction in [-1, 1) when noisy.
double InputValue(const AllreduceCase& c, int rank, int64_t i);
// Every worker's element i reduced in rank order, in double precision, scaled as the batch says.
double ReferenceValue(const AllreduceCase& c, int64_t i);
void StoreValue(DataType t, uint8_t* p, double x);
double LoadValue(DataType t, const uint8_t* p);

struct AllreduceOutcome {
  std::vector<std::vector<uint8_t>> outputs;             // per worker: the fused result
  std::vector<std::string> errors;                       // per rank: "" if it finished
  std::vector<double> seconds;                           // per rank: until it finished or failed
  std::vector<std::map<std::string, uint64_t>> counters;  // per rank, at the end
  std::string AllErrors() const;                         // "" if no rank failed
};

// The implementation one rank runs (a fresh one per rank, kept across the repeats).
using AllreduceFactory = std::function<std::unique_ptr<AllreduceImpl>()>;

// Runs the case on one thread per rank: rank r calls connect(r) if given, builds its process set
// and context over net(r), and executes the implementation c.repeats times (a dedicated server
// serves instead, which needs the herring allreduce). A rank that fails aborts the way the engine
// does (its transport, its arena, a kAbortMessage to every live peer), so the others stop too.
AllreduceOutcome RunAllreduce(const AllreduceCase& c, const std::function<Transport&(int)>& net,
                              const AllreduceFactory& make, const std::function<void(int)>& connect = nullptr);

// "" when every worker's output matches the reference (exactly, or within a rounding tolerance
// for noisy inputs) and all workers hold the same bits; otherwise what differs. Also refuses
// inputs that would let a non-reducing implementation pass (the reference equals every input).
std::string CompareWithReference(const AllreduceCase& c, const AllreduceOutcome& outcome);

}  // namespace test
}  // namespace herring
