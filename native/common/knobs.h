// Every knob of the product, in one table. Config reads them from the environment; the bindings
// export the table so that Python (README check, `python -m hvd_herring.check`) never repeats a
// name or a default.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace herring {

struct KnobSpec {
  const char* name;
  const char* default_value;  // as a user would write it in the environment
  const char* kind;           // bytes | int | float | ms | seconds | bool | enum | string | path
  const char* description;
  bool must_match_across_ranks;  // checked at init: ranks that differ fail with a clear error
};

const std::vector<KnobSpec>& AllKnobs();

// A bool knob's value in this process's environment (the table's default where unset), parsed as
// Config parses its own: for the knobs that only a front end reads. Throws Error naming the knob.
bool BoolKnobFromProcessEnvironment(const std::string& name);

enum class AllreduceAlgorithm { kHerring, kRing, kHalvingDoubling, kHalvingDoublingTopo };

enum class PushSchedule { kAllAtOnce, kRoundRobin };
// HERRING_READ_PEER_TENSORS, in the knob's order of values.
enum class PeerTensorReads { kAuto, kAlways, kOutputs, kNever };

struct Config {
  int64_t fusion_threshold_bytes;
  double cycle_time_ms;
  int64_t cache_capacity;
  bool dynamic_process_sets;
  AllreduceAlgorithm allreduce;
  std::string topology;      // HERRING_TOPOLOGY: JSON description of the network (hd-topo)
  int num_servers;           // 0: one server shard per rank
  int dedicated_servers;     // processes (the last launched) that only serve shards
  int elastic_slots;         // dedicated servers that may join later
  bool psld_balancer;        // HERRING_BALANCER=psld
  bool shm_control_plane;    // HERRING_CONTROL_PLANE=auto: shared memory where the world is on one host
  int64_t small_message_bytes;  // HERRING_SMALL_MESSAGE_BYTES
  bool caller_runs_cycles;      // HERRING_CALLER_RUNS_CYCLES
  bool spread_cpus;             // HERRING_SPREAD_CPUS
  bool inputs_with_bits;        // HERRING_INPUTS_WITH_BITS
  PushSchedule schedule = PushSchedule::kAllAtOnce;  // HERRING_SCHEDULE
  int balance_interval;
  int slowdown_rank = -1;    // HERRING_SLOWDOWN (tests, benchmarks)
  double slowdown_us_per_mib = 0;
  int tcp_streams;
  bool lazy_connections;     // HERRING_CONNECTIONS=lazy
  bool per_host_rendezvous;  // HERRING_RENDEZVOUS=host
  double timeout_seconds;
  double start_timeout_seconds;
  std::string iface;         // empty: chosen from the launcher's environment
  double stall_check_seconds;
  double stall_shutdown_seconds;  // 0: never
  bool stall_check_disabled;
  double deadlock_seconds;  // 0: off
  bool verify;                // HERRING_VERIFY
  std::string fault;          // HERRING_FAULT spec, empty: none
  std::string timeline;      // HOROVOD_TIMELINE path template, empty: off (or DYNAMIC)
  bool timeline_enabled = false;       // HOROVOD_TIMELINE set (a path or DYNAMIC)
  bool timeline_mark_cycles = false;   // HOROVOD_TIMELINE_MARK_CYCLES
  std::string hostname;      // empty: the launcher's (HOROVOD_HOSTNAME) or gethostname()
  std::string secret;        // HERRING_SECRET; empty: rank 0 draws one
  int64_t shm_slot_bytes;
  int64_t chunk_bytes;
  int64_t zero_copy_bytes;    // HERRING_ZERO_COPY_BYTES
  PeerTensorReads read_peer_tensors;  // HERRING_READ_PEER_TENSORS

  bool autotune = false;             // HOROVOD_AUTOTUNE
  std::string autotune_log;          // HOROVOD_AUTOTUNE_LOG
  double autotune_start_fusion_bytes = -1;  // HERRING_AUTOTUNE_START; < 0: the knobs' values
  double autotune_start_cycle_ms = -1;
  int autotune_warmup_samples = 3;
  int autotune_steps_per_sample = 10;
  int autotune_bayes_max_samples = 20;
  double autotune_gp_noise = 0.8;
  // The knobs the environment sets (autotune keeps them fixed, as Horovod does).
  std::set<std::string> set_in_environment;

  // Every knob's resolved text value (default where unset), by name.
  std::map<std::string, std::string> resolved;

  // Reads every knob from `env` (missing ones take the table's default). Throws Error naming the
  // knob on a value that does not parse.
  static Config FromEnvironment(const std::map<std::string, std::string>& env);
  static Config FromProcessEnvironment();
  // Values of the knobs that must agree on every rank, as "NAME=value;..." for comparison.
  std::string MustMatchFingerprint() const;
};

}  // namespace herring
