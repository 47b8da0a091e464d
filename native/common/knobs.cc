#include "common/knobs.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "common/environment.h"
#include "common/status.h"


namespace herring {

const std::vector<KnobSpec>& AllKnobs() {
  static const std::vector<KnobSpec> knobs = {
      {"HOROVOD_BACKEND", "", "enum",
       "`herring` makes `import horovod.torch` (and the other Horovod frameworks) run on this "
       "engine; unset, empty or `horovod`: Horovod behaves as installed. Any other value (a typo "
       "such as `hering`) makes `import horovod` (so horovodrun too) raise ValueError naming the "
       "choices, instead of running stock Horovod unnoticed; Python without Horovod is unaffected.", false},
      {"HOROVOD_FUSION_THRESHOLD", "134217728", "bytes",
       "Largest fused buffer; tensors ready in the same cycle are packed up to this size "
       "(a group is never split). 0 disables fusion.", true},
      {"HOROVOD_CYCLE_TIME", "1", "ms",
       "Longest a request waits to be batched: one that finds the engine idle starts a cycle at "
       "once; requests arriving while a cycle runs (a burst) go together into the next cycle, "
       "which starts when the burst pauses or after this long. 0: never batch.", false},
      {"HOROVOD_CACHE_CAPACITY", "1024", "int",
       "Entries of the response cache; in steady state one bit-vector AND per cycle replaces the "
       "coordinator. 0 disables the cache.", true},
      {"HERRING_CONTROL_PLANE", "auto", "enum",
       "How ranks agree each cycle. `auto`: on one host the bit vectors meet in shared memory and "
       "each rank ANDs them itself; across hosts the plane is hierarchical: each host ANDs in "
       "shared memory, its first rank (the leader) combines the hosts' ANDs in a binomial tree over "
       "TCP rooted at rank 0 and posts the result for its host, and the coordinator's rounds go up "
       "and down the same tree (O(log hosts) messages per leader per cycle). `tcp`: the star, every "
       "rank's vector to rank 0 over TCP and rank 0 answers everyone (O(ranks) at rank 0). PSLD "
       "(HERRING_BALANCER=psld), dedicated servers and HERRING_ELASTIC_SLOTS always use the star.", true},
      {"HERRING_SMALL_MESSAGE_BYTES", "65536", "bytes",
       "Fused allreduces up to this size within one host take the one-step path: every rank "
       "writes its input to shared memory and reduces all inputs itself, in rank order (one "
       "hand-off instead of a reduce-scatter and an all-gather); across hosts, each host's sum "
       "goes straight to the other hosts instead of through the server shards. Where a host's ranks "
       "outnumber its cores, its one-step allreduces stop at 16 KiB (larger ones measured faster "
       "pipelined there). 0 turns it off.", true},
      {"HERRING_CALLER_RUNS_CYCLES", "1", "bool",
       "A synchronous collective (hvd.allreduce, allreduce_, broadcast, broadcast_; on the "
       "torch.distributed backend all_reduce, broadcast and barrier without async_op) that finds "
       "the background loop idle runs its cycle (negotiation and execution) on the calling "
       "thread, instead of waking the loop's thread and sleeping until it is done: two thread "
       "hand-offs fewer, each a wake-up on another core when the scheduler puts the threads "
       "apart. Any size where the process may use at least as many CPUs as its host has ranks; "
       "with more ranks than CPUs, at most 1 MiB. Asynchronous requests "
       "stay with the loop, which batches their bursts. 0: only the loop's thread runs cycles.", false},
      {"HERRING_SPREAD_CPUS", "1", "bool",
       "Where the process may use at least as many CPUs as its host has ranks: a rank whose "
       "cycle finds itself on the CPU another local rank's cycle last ran on moves that thread "
       "to a CPU of its affinity mask that none is on (at most once a millisecond), and gives the "
       "thread its whole mask back. Ranks in lockstep that the scheduler leaves on one core take "
       "turns on it while another core idles, 10-50x slower per small collective. The mask is "
       "never narrowed: no binding is imposed (a launcher's binding, e.g. mpirun's, is kept). "
       "0: threads stay where the scheduler puts them.", false},
      {"HERRING_INPUTS_WITH_BITS", "1", "bool",
       "With the shared-memory control plane, a rank whose only request is one small cached "
       "allreduce writes its input beside its bit vector. When every rank did so for the same "
       "allreduce, each reduces the inputs at once, in rank order: one hand-off per collective "
       "instead of two (the AND, then the one-step exchange). Across hosts the same holds within "
       "each host, before its leader trades the host's sum. The result is bitwise the same. "
       "0: the inputs always go through the one-step exchange.", false},
      {"HOROVOD_AUTOTUNE", "0", "bool",
       "Tune, while the job trains, the fusion threshold and cycle time (jointly, by Bayesian "
       "optimisation of a Gaussian process, as Horovod's autotuner) and then "
       "HERRING_SMALL_MESSAGE_BYTES and, across hosts, HERRING_ALLREDUCE and the TCP streams a "
       "message is striped over (1, 2, 4: 4 are connected), value by value; knobs "
       "set in the environment stay fixed, as in Horovod. The score is the bytes the collectives "
       "move per microsecond on rank 0; every rank switches settings in the same cycle (rank 0's "
       "choice travels in a broadcast); the search ends on the best settings it measured.", true},
      {"HERRING_AUTOTUNE_START", "", "string",
       "Autotune: `<fusion threshold bytes>,<cycle time ms>` in force when the search starts, "
       "instead of the knobs' values, and still tuned (benchmarks and tests show the search "
       "leaving a bad start with it).", true},
      {"HOROVOD_AUTOTUNE_LOG", "", "path",
       "With HOROVOD_AUTOTUNE: rank 0 writes one CSV row per scored setting here (the last row, "
       "note `best`, is what it settled on), flushed row by row.", false},
      {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "3", "int",
       "Autotune: scores discarded at the start (the job warms up its caches).", false},
      {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "10", "int",
       "Autotune: a sample ends when some collective ran this many times in it; the score is the "
       "median of 5 samples.", false},
      {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "20", "int",
       "Autotune: settings of fusion threshold and cycle time scored before it picks the best.", false},
      {"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.8", "float",
       "Autotune: observation noise of the Gaussian process, relative to the scores' variance.", false},
      {"HOROVOD_DYNAMIC_PROCESS_SETS", "0", "bool",
       "Allow hvd.add_process_set / remove_process_set after init.", true},
      {"HOROVOD_TIMELINE", "", "path",
       "Write a Chrome trace (chrome://tracing, Perfetto) of every collective's phases in Horovod's "
       "format, as it happens (valid JSON while the job runs and after a crash): rank 0 to this "
       "path, rank r to it with .rank<r> before the extension (or {rank} replaced). `DYNAMIC`: "
       "nothing until hvd.start_timeline(path); hvd.start_timeline/stop_timeline need this set, "
       "as in Horovod.", false},
      {"HOROVOD_TIMELINE_MARK_CYCLES", "0", "bool",
       "Mark every negotiation cycle in the timeline with Horovod's CYCLE_START instant event.", false},
      {"HOROVOD_STALL_CHECK_TIME_SECONDS", "60", "seconds",
       "Rank 0 warns, naming the missing ranks and tensors, when some ranks submitted a collective "
       "and others have not for this long.", false},
      {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0", "seconds",
       "If > 0, a collective stalled this long ends the job with the stall report as the error.", false},
      {"HOROVOD_STALL_CHECK_DISABLE", "0", "bool", "Turns the stall inspector off.", false},
      {"HERRING_DEADLOCK_TIME_SECONDS", "15", "seconds",
       "Ranks that have all been blocked waiting this long on collectives that none of them can "
       "complete (each waits on one another has not submitted: the ranks diverged) raise, naming "
       "each rank and what it waits on, instead of hanging; the collective most of them wait on "
       "(and a join) stays pending, so that the ranks that went astray catch up. Up to half this time "
       "more while ranks that have not reported miss those collectives, so that one error names "
       "them all. 0 turns it off.", false},
      {"HERRING_VERIFY", "0", "bool",
       "After every allreduce, broadcast and allgather, members compare a hash of the result and "
       "fail the job naming the ranks that differ.", true},
      {"HERRING_FAULT", "", "string",
       "Fault injection for tests: action:phase:rank[:occurrence], e.g. kill:push:2 (actions kill, "
       "stop, exit, reset, corrupt, and delay: a sleep there every time from the occurrence on; phases "
       "negotiate, gather, shm, push, serve, pull, scatter).", false},
      {"HOROVOD_LOG_LEVEL", "WARNING", "enum", "TRACE, DEBUG, INFO, WARNING, ERROR or FATAL.", false},
      {"HERRING_ALLREDUCE", "herring", "enum",
       "Allreduce implementation tried first: `herring` (hierarchical parameter-server reduction), "
       "`ring`, `hd` (halving-doubling over TCP, ranks in rank order) or `hd-topo` (halving-doubling "
       "with the ranks mapped onto HERRING_TOPOLOGY so that no two exchanges of a step share a link; "
       "docs/eflops.md).", true},
      {"HERRING_TOPOLOGY", "", "path",
       "JSON description of the network for `HERRING_ALLREDUCE=hd-topo`: hosts in groups and how "
       "pairs inside a group and across groups are linked (the simulated cluster's file works as "
       "is; docs/eflops.md). Must be the same file on every host: init compares the JSON it holds "
       "(whitespace and key order aside) as well as the path.", true},
      {"HERRING_NUM_SERVERS", "0", "int",
       "Server shards the fused buffers are cut over; 0 means one per rank, colocated.", true},
      {"HERRING_DEDICATED_SERVERS", "0", "int",
       "The last N launched processes (e.g. the slots of server hosts in horovodrun -H) run only "
       "server shards, as in Herring and BytePS; hvd.size() counts the others. 0: shards are "
       "colocated with the workers.", true},
      {"HERRING_ELASTIC_SLOTS", "0", "int",
       "How many dedicated servers may join the running job later (`python -m hvd_herring.server "
       "join`); servers leave on SIGTERM or hvd_herring.remove_server(rank). Needs horovodrun's "
       "rendezvous and HERRING_DEDICATED_SERVERS > 0.", true},
      {"HERRING_BALANCER", "none", "enum",
       "`psld`: rank 0 measures each server shard's service time and moves byte ranges from slow "
       "shards to fast ones (PSLD), every rank switching maps at the same step; `none`: static "
       "equal shares.", true},
      {"HERRING_BALANCE_INTERVAL", "10", "int", "Allreduce executions between two PSLD decisions.", false},
      {"HERRING_SLOWDOWN", "", "string",
       "Simulated slow server for tests and benchmarks: `rank:microseconds_per_MiB` makes that "
       "process's server shards sleep this long per MiB they reduce.", false},
      {"HERRING_SCHEDULE", "all", "enum",
       "Order of the pushes to the server shards: `all` at once, or `r2sp`: each worker starts at "
       "an evenly spaced shard and visits the shards in turn, one push at a time (round-robin "
       "synchronous parallel), so a shard receives from one worker at a time. Same sums either way.", true},
      {"HERRING_TCP_STREAMS", "2", "int",
       "TCP streams per peer for bulk data. Under HOROVOD_AUTOTUNE, unset means a pair connects the "
       "most autotune tries and uses the count in force: set on some ranks only, init fails "
       "naming it.", true},
      {"HERRING_CONNECTIONS", "mesh", "enum",
       "`mesh`: every pair of ranks connects at init (the full mesh, O(N) sockets per rank); "
       "`lazy`: a pair connects (control stream and data streams, authenticated as always) when "
       "one first sends to or receives from the other, so a rank holds sockets only to the peers "
       "its algorithms and control plane use (about 1/16 of the mesh's at 256 ranks on 16 hosts). "
       "Not the default yet: a rank stopped (not dead) is then named only by the ranks connected "
       "to it and its host's ranks; the others may name the rank that told them "
       "(docs/reliability.md). Jobs with elastic dedicated servers keep the mesh.", true},
      {"HERRING_RENDEZVOUS", "host", "enum",
       "How init exchanges the ranks' records through horovodrun's store: `host`: one round per "
       "host (a host's ranks meet in shared memory, where its local rank 0 gathers their records "
       "and stores them as one; host 0's leader publishes the world; each host's leader reads it "
       "and hands it to its ranks in shared memory: about 3H requests for H hosts); `rank`: every "
       "rank reads every record (N^2 requests). Elastic jobs (their driver's exchange), mpirun, torchrun and jobs "
       "with elastic dedicated servers (joiners read the per-rank records) use per-rank records.", true},
      {"HERRING_TIMEOUT_SECONDS", "30", "seconds",
       "Deadline of every blocking step; a peer silent for this long is declared lost. Waits for "
       "transfers from other hosts get 1.5 times as long, so that when a rank is stuck, its own "
       "host's ranks (which wait on it in shared memory) time out first and name it.", false},
      {"HERRING_START_TIMEOUT_SECONDS", "60", "seconds",
       "Deadline for rendezvous and connecting to every peer at init.", false},
      {"HERRING_ELASTIC_RESET_TIMEOUT_SECONDS", "660", "seconds",
       "Elastic workers (horovodrun --host-discovery-script): how long a resetting worker waits "
       "for the elastic driver to give it its place in the next round (the driver's own "
       "--elastic-timeout defaults to 600 s).", false},
      {"HERRING_IFACE", "", "string",
       "Network interface to listen on and advertise (default: HOROVOD_GLOO_IFACE from "
       "horovodrun, else loopback for single-host jobs).", false},
      {"HERRING_HOSTNAME", "", "string",
       "Host name this rank reports (default HOROVOD_HOSTNAME, else gethostname()). Ranks with the "
       "same name share memory; different names on one machine simulate separate hosts.", false},
      {"HERRING_SECRET", "", "secret",
       "The job's secret, which every connection proves with an HMAC challenge-response. Under "
       "HOROVOD_BACKEND=herring horovodrun draws one and passes it to the workers' environment; "
       "unset otherwise, rank 0 draws one and hands it out through the rendezvous (mpirun: MPI).", false},
      {"HERRING_SHM_SLOT_BYTES", "2097152", "bytes",
       "Per-rank shared-memory staging slot (for process sets spanning hosts at least 16 MiB, 4 MiB "
       "with dedicated servers), cut "
       "into 4 pipelined chunks; every buffer streams "
       "through it chunk by chunk (small chunks stay in cache between staging, reduction and "
       "copy-out; chunks are also the unit pushed to the server shards).", true},
      {"HERRING_ZERO_COPY_BYTES", "17179869184", "bytes",
       "Address space of this process's zero-copy memory (hvd.zero_copy_empty and friends): "
       "tensors there are reduced in place by the ranks of their host, without staging copies. "
       "Pages are used only as tensors are allocated; 0 turns the allocator off.", false},
      {"HERRING_READ_PEER_TENSORS", "auto", "enum",
       "One-host allreduces above HERRING_SMALL_MESSAGE_BYTES reach the other local ranks' tensors "
       "in their processes (process_vm_readv/writev, same user) instead of staging everything in "
       "shared memory. `always`: no staging at all: each rank claims units of the buffer, copies "
       "the others' inputs of a unit into its cache, sums, and writes the sum into every rank's "
       "output (cross-memory allreduce). `outputs`: inputs are staged, and each rank sums its slice "
       "straight into its own tensors, from where the others copy it (instead of through the shared "
       "result area, whose lines every sum would first have to take back from the other cores' "
       "caches). `never`: everything through shared memory. `auto` measures the routes as the job "
       "runs, per size, and keeps the fastest. Where some local rank cannot reach another's memory "
       "(another pid namespace, a seccomp profile without the calls), everything is staged.", true},
      {"HERRING_DIST_ZERO_COPY", "1", "bool",
       "torch.distributed (backend \"herring\"), every rank on one host: a buffer allreduced a "
       "second time while still alive (DDP's buckets) is moved, once and in place, into zero-copy "
       "memory, so that the engine reduces it without staging copies; its views (DDP's gradients "
       "with gradient_as_bucket_view) follow. Like share_memory_(), a moved storage can no longer "
       "be resized. 0: buffers stay where their owner put them.", false},
      {"HERRING_CHUNK_BYTES", "1048576", "bytes",
       "Unit in which bulk TCP messages are striped over the streams.", false},
  };
  return knobs;
}

namespace {

const KnobSpec& Spec(const std::string& name) {
  for (const auto& k : AllKnobs()) {
    if (name == k.name) return k;
  }
  throw Error(Status::Internal("unknown knob " + name));
}

// Numbers and flags parse strictly, Horovod's knobs (HOROVOD_*) as herring's own: a value that is
// not a number of the kind the table gives fails init, naming the knob, the value and what was
// expected. Horovod's core reads its knobs with std::strtol / std::strtod
// (horovod/common/utils/env_parser.cc), so there HOROVOD_FUSION_THRESHOLD=abc is silently 0 (no
// fusion) and HOROVOD_CYCLE_TIME=5ms is 5; we refuse both. What Horovod's own launchers export
// still reads: integers written as floats ("524288.0", horovodrun's config file), flags as any
// integer (> 0 is on, as Horovod reads them) or true/false, and kHorovodRunUnset (below).
// A well-formed number below a HOROVOD_* knob's minimum counts as the minimum (a negative fusion
// threshold or cycle time: 0, which in Horovod means no fusion, no wait); HERRING_* knobs refuse it.
bool HorovodKnob(const std::string& name) { return name.rfind("HOROVOD_", 0) == 0; }

// horovod.run() exports HOROVOD_CYCLE_TIME='(None,)' and HOROVOD_CACHE_CAPACITY='(None,)' when
// the caller did not set them (a stray comma in Horovod 0.28.1's _HorovodArgs); Horovod's core
// reads that as 0 (no batching wait, no response cache) and carries on, and so do we: the user
// wrote nothing wrong.
constexpr const char* kHorovodRunUnset = "(None,)";

std::string Trimmed(const std::string& v) {
  const size_t first = v.find_first_not_of(" \t\n\r");
  if (first == std::string::npos) return "";
  return v.substr(first, v.find_last_not_of(" \t\n\r") - first + 1);
}

// What a number knob of this kind must be, for the error.
std::string NumberWanted(const KnobSpec& spec, const std::string& bound) {
  const std::string kind = spec.kind;
  if (kind == "bytes") return "an integer number of bytes " + bound;
  if (kind == "int") return "an integer " + bound;
  if (kind == "ms") return "a number of milliseconds " + bound;
  if (kind == "seconds") return "a number of seconds " + bound;
  return "a number " + bound;
}

std::string Bound(double min_value) {
  std::ostringstream s;
  s << ">= " << min_value;
  return s.str();
}

class KnobReader {
 public:
  explicit KnobReader(const std::map<std::string, std::string>& env) : env_(env) {}

  std::string Raw(const std::string& name) const {
    auto it = env_.find(name);
    if (it != env_.end() && !it->second.empty()) return it->second;
    return Spec(name).default_value;
  }
  int64_t Int(const std::string& name, int64_t min_value) const {
    const std::string v = Raw(name), t = Trimmed(v);
    if (HorovodKnob(name) && t == kHorovodRunUnset) return std::max<int64_t>(0, min_value);
    char* end = nullptr;
    errno = 0;
    long long x = std::strtoll(t.c_str(), &end, 10);
    bool ok = !t.empty() && *end == '\0' && errno != ERANGE;
    if (!ok && HorovodKnob(name)) {  // an integer written as a float: "524288.0", "1e6"
      const double d = std::strtod(t.c_str(), &end);
      ok = !t.empty() && *end == '\0' && std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 9.2e18;
      x = ok ? static_cast<long long>(d) : 0;
    }
    if (!ok || (x < min_value && !HorovodKnob(name))) Bad(name, v, NumberWanted(Spec(name), Bound(min_value)));
    return std::max<int64_t>(x, min_value);
  }
  double Double(const std::string& name, double min_value) const {
    const std::string v = Raw(name), t = Trimmed(v);
    if (HorovodKnob(name) && t == kHorovodRunUnset) return std::max(0.0, min_value);
    char* end = nullptr;
    const double x = std::strtod(t.c_str(), &end);
    const bool ok = !t.empty() && *end == '\0' && std::isfinite(x);
    if (!ok || (x < min_value && !HorovodKnob(name))) Bad(name, v, NumberWanted(Spec(name), Bound(min_value)));
    return std::max(x, min_value);
  }
  bool Bool(const std::string& name) const {
    const std::string v = Raw(name), t = Trimmed(v);
    if (t == "1" || t == "true" || t == "True" || t == "TRUE") return true;
    if (t == "0" || t == "false" || t == "False" || t == "FALSE") return false;
    if (HorovodKnob(name)) {  // Horovod's flags: any integer, on when > 0
      char* end = nullptr;
      const long long x = std::strtoll(t.c_str(), &end, 10);
      if (!t.empty() && *end == '\0') return x > 0;
      Bad(name, v, "0 or 1 (or true/false; an integer > 0 is on)");
    }
    Bad(name, v, "0 or 1");
  }
  // An enum knob: its value when it is `first` or `second`, an error naming both otherwise.
  bool Is(const std::string& name, const std::string& first, const std::string& second) const {
    std::string v = Raw(name);
    if (v != first && v != second) Bad(name, v, first + " or " + second);
    return v == first;
  }
  // The index of the value among `values` (the first is the table's default).
  size_t Choice(const std::string& name, const std::vector<std::string>& values) const {
    const std::string v = Raw(name);
    for (size_t i = 0; i < values.size(); ++i) {
      if (v == values[i]) return i;
    }
    std::string want;
    for (size_t i = 0; i < values.size(); ++i) want += (i ? (i + 1 == values.size() ? " or " : ", ") : "") + values[i];
    Bad(name, v, want);
  }
  [[noreturn]] static void Bad(const std::string& name, const std::string& v, const std::string& want) {
    throw Error(Status::InvalidArgument(name + "='" + v + "' is not valid: expected " + want));
  }

 private:
  const std::map<std::string, std::string>& env_;
};

}  // namespace

Config Config::FromEnvironment(const std::map<std::string, std::string>& env) {
  KnobReader r(env);
  Config c;
  c.fusion_threshold_bytes = r.Int("HOROVOD_FUSION_THRESHOLD", 0);
  c.cycle_time_ms = r.Double("HOROVOD_CYCLE_TIME", 0.0);
  c.cache_capacity = r.Int("HOROVOD_CACHE_CAPACITY", 0);
  c.dynamic_process_sets = r.Bool("HOROVOD_DYNAMIC_PROCESS_SETS");
  std::string algo = r.Raw("HERRING_ALLREDUCE");
  if (algo == "herring") {
    c.allreduce = AllreduceAlgorithm::kHerring;
  } else if (algo == "ring") {
    c.allreduce = AllreduceAlgorithm::kRing;
  } else if (algo == "hd") {
    c.allreduce = AllreduceAlgorithm::kHalvingDoubling;
  } else if (algo == "hd-topo") {
    c.allreduce = AllreduceAlgorithm::kHalvingDoublingTopo;
  } else {
    KnobReader::Bad("HERRING_ALLREDUCE", algo, "herring, ring, hd or hd-topo");
  }
  c.topology = r.Raw("HERRING_TOPOLOGY");
  if (c.allreduce == AllreduceAlgorithm::kHalvingDoublingTopo && c.topology.empty()) {
    KnobReader::Bad("HERRING_ALLREDUCE", algo, "a topology for hd-topo: set HERRING_TOPOLOGY to its JSON file");
  }
  c.num_servers = static_cast<int>(r.Int("HERRING_NUM_SERVERS", 0));
  c.dedicated_servers = static_cast<int>(r.Int("HERRING_DEDICATED_SERVERS", 0));
  c.elastic_slots = static_cast<int>(r.Int("HERRING_ELASTIC_SLOTS", 0));
  c.schedule = r.Is("HERRING_SCHEDULE", "r2sp", "all") ? PushSchedule::kRoundRobin : PushSchedule::kAllAtOnce;
  c.psld_balancer = r.Is("HERRING_BALANCER", "psld", "none");
  c.shm_control_plane = r.Is("HERRING_CONTROL_PLANE", "auto", "tcp");
  c.small_message_bytes = r.Int("HERRING_SMALL_MESSAGE_BYTES", 0);
  c.caller_runs_cycles = r.Bool("HERRING_CALLER_RUNS_CYCLES");
  c.spread_cpus = r.Bool("HERRING_SPREAD_CPUS");
  c.inputs_with_bits = r.Bool("HERRING_INPUTS_WITH_BITS");
  c.balance_interval = static_cast<int>(r.Int("HERRING_BALANCE_INTERVAL", 1));
  std::string slow = r.Raw("HERRING_SLOWDOWN");
  if (!slow.empty()) {
    auto colon = slow.find(':');
    char* end = nullptr;
    c.slowdown_rank = colon == std::string::npos ? -1 : static_cast<int>(std::strtol(slow.c_str(), &end, 10));
    c.slowdown_us_per_mib = colon == std::string::npos ? -1 : std::strtod(slow.c_str() + colon + 1, nullptr);
    if (c.slowdown_rank < 0 || !(c.slowdown_us_per_mib >= 0)) {
      KnobReader::Bad("HERRING_SLOWDOWN", slow, "rank:microseconds_per_MiB");
    }
  }
  c.tcp_streams = static_cast<int>(r.Int("HERRING_TCP_STREAMS", 1));
  c.lazy_connections = r.Is("HERRING_CONNECTIONS", "lazy", "mesh");
  c.per_host_rendezvous = r.Is("HERRING_RENDEZVOUS", "host", "rank");
  c.timeout_seconds = r.Double("HERRING_TIMEOUT_SECONDS", 0.001);
  c.start_timeout_seconds = r.Double("HERRING_START_TIMEOUT_SECONDS", 0.001);
  c.iface = r.Raw("HERRING_IFACE");
  c.timeline = r.Raw("HOROVOD_TIMELINE");
  // Set at all (a path or "DYNAMIC"): hvd.start_timeline may be called, as in Horovod.
  c.timeline_enabled = !c.timeline.empty();
  // Horovod's "DYNAMIC" means: no trace until hvd.start_timeline(path).
  if (c.timeline == "DYNAMIC") c.timeline.clear();
  c.timeline_mark_cycles = r.Bool("HOROVOD_TIMELINE_MARK_CYCLES");
  c.verify = r.Bool("HERRING_VERIFY");
  c.fault = r.Raw("HERRING_FAULT");
  c.stall_check_seconds = r.Double("HOROVOD_STALL_CHECK_TIME_SECONDS", 0.001);
  c.stall_shutdown_seconds = r.Double("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", 0.0);
  c.stall_check_disabled = r.Bool("HOROVOD_STALL_CHECK_DISABLE");
  c.deadlock_seconds = r.Double("HERRING_DEADLOCK_TIME_SECONDS", 0.0);
  c.hostname = r.Raw("HERRING_HOSTNAME");
  c.secret = r.Raw("HERRING_SECRET");
  c.shm_slot_bytes = r.Int("HERRING_SHM_SLOT_BYTES", 4096);
  c.chunk_bytes = r.Int("HERRING_CHUNK_BYTES", 4096);
  c.zero_copy_bytes = r.Int("HERRING_ZERO_COPY_BYTES", 0);
  c.read_peer_tensors = static_cast<PeerTensorReads>(r.Choice("HERRING_READ_PEER_TENSORS", {"auto", "always", "outputs", "never"}));
  c.autotune = r.Bool("HOROVOD_AUTOTUNE");
  c.autotune_log = r.Raw("HOROVOD_AUTOTUNE_LOG");
  const std::string start = r.Raw("HERRING_AUTOTUNE_START");
  if (!start.empty()) {
    char* end = nullptr;
    c.autotune_start_fusion_bytes = std::strtod(start.c_str(), &end);
    const bool comma = end != nullptr && *end == ',';
    c.autotune_start_cycle_ms = comma ? std::strtod(end + 1, &end) : -1;
    if (!comma || *end != '\0' || !(c.autotune_start_fusion_bytes >= 0) || !(c.autotune_start_cycle_ms >= 0)) {
      KnobReader::Bad("HERRING_AUTOTUNE_START", start, "<fusion threshold bytes>,<cycle time ms>");
    }
  }
  c.autotune_warmup_samples = static_cast<int>(r.Int("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", 0));
  c.autotune_steps_per_sample = static_cast<int>(r.Int("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", 1));
  c.autotune_bayes_max_samples = static_cast<int>(r.Int("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", 1));
  c.autotune_gp_noise = r.Double("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", 1e-6);
  for (const auto& k : AllKnobs()) {
    auto it = env.find(k.name);
    if (it != env.end() && !it->second.empty()) c.set_in_environment.insert(k.name);
  }
  r.Bool("HERRING_DIST_ZERO_COPY");  // the torch.distributed front reads it; a bad value fails init
  for (const auto& k : AllKnobs()) c.resolved[k.name] = r.Raw(k.name);
  return c;
}

bool BoolKnobFromProcessEnvironment(const std::string& name) {
  const std::map<std::string, std::string> env = ProcessEnvironment();
  return KnobReader(env).Bool(name);
}

Config Config::FromProcessEnvironment() {
  return FromEnvironment(ProcessEnvironment());
}

std::string Config::MustMatchFingerprint() const {
  std::ostringstream s;
  for (const auto& k : AllKnobs()) {
    if (k.must_match_across_ranks) s << k.name << "=" << resolved.at(k.name) << ";";
  }
  return s.str();
}

}  // namespace herring
