// HOROVOD_AUTOTUNE in the engine. Rank 0's Autotuner (tuning/autotuner.h) decides; a broadcast
// from rank 0 carries its settings to every rank; every rank puts them in force right after the
// cycle that ran the broadcast. That is the same cycle everywhere, because every rank runs the
// same responses in the same cycle: the fusion plan, which every rank computes on its own from
// the threshold, never differs between ranks. The broadcast is an ordinary collective of the
// global set, scheduled by cycle number (which every rank shares), so it needs no channel of its
// own in either control plane.
#include <algorithm>
#include <array>
#include <iterator>

#include "common/logging.h"
#include "engine/engine.h"

namespace herring {
namespace {

const char kAutotuneName[] = "herring.autotune.settings";
// While tuning, rank 0's settings are broadcast every this many cycles: a decision waits a few
// cycles at most, and the broadcast (56 bytes, cached after the first) costs one small collective.
constexpr uint64_t kSyncEveryCycles = 8;
enum AutotuneField { kVersion, kActive, kFusion, kCycleTime, kSmallMessages, kAlgorithm, kTcpStreams };

// Values HERRING_SMALL_MESSAGE_BYTES is tried at (the one-step path's slots cap what it can take).
const double kSmallMessageChoices[] = {16384, 65536, 262144};
// Counts of TCP data streams a message is striped over. Under autotune a pair connects the
// largest (unless HERRING_TCP_STREAMS fixes the count), and messages use the count in force.
const double kTcpStreamChoices[] = {1, 2, 4};

TunedSettings SettingsOf(const Config& c) {
  TunedSettings t;
  t.fusion_threshold_bytes = static_cast<double>(c.fusion_threshold_bytes);
  t.cycle_time_ms = c.cycle_time_ms;
  t.small_message_bytes = static_cast<double>(c.small_message_bytes);
  t.allreduce = static_cast<double>(static_cast<int>(c.allreduce));
  t.tcp_streams = static_cast<double>(c.tcp_streams);
  return t;
}

bool TunesTcpStreams(const Config& c) { return c.autotune && !c.set_in_environment.count("HERRING_TCP_STREAMS"); }

}  // namespace

int Engine::ConnectedTcpStreams() const {
  // Decided before the rendezvous (the transport exists first), so also where StartAutotune will
  // not tune them (one host, dedicated servers): a few idle sockets per peer, under autotune only.
  if (!TunesTcpStreams(config_)) return config_.tcp_streams;
  return std::max(config_.tcp_streams, static_cast<int>(kTcpStreamChoices[std::size(kTcpStreamChoices) - 1]));
}

void Engine::StartAutotune() {
  cycle_config_ = config_;
  PublishTunedSettings();  // the knobs in force, tuned or not
  if (!config_.autotune) return;
  if (is_dedicated_server() || config_.dedicated_servers > 0 || config_.elastic_slots > 0) {
    // Dedicated servers compute the fusion plan too, but take no part in the global set's
    // collectives, so the broadcast would not reach them.
    if (rank() == 0) {
      HLOG(Warning) << "HOROVOD_AUTOTUNE is ignored with HERRING_DEDICATED_SERVERS";
    }
    return;
  }
  if (config_.autotune_start_fusion_bytes >= 0) {
    cycle_config_.fusion_threshold_bytes = static_cast<int64_t>(config_.autotune_start_fusion_bytes);
    cycle_config_.cycle_time_ms = config_.autotune_start_cycle_ms;
  }
  autotune_.enabled = true;
  counters_.autotune_active = 1;
  PublishTunedSettings();
  if (rank() != 0) return;
  const auto& fixed = config_.set_in_environment;
  AutotuneOptions o;
  o.initial = SettingsOf(cycle_config_);
  o.tune_fusion = !fixed.count("HOROVOD_FUSION_THRESHOLD");
  o.tune_cycle_time = !fixed.count("HOROVOD_CYCLE_TIME");
  if (!fixed.count("HERRING_SMALL_MESSAGE_BYTES")) {
    o.small_message_choices.assign(std::begin(kSmallMessageChoices), std::end(kSmallMessageChoices));
  }
  // Across hosts the algorithms differ in what they send where; on one host every algorithm but
  // herring's goes through TCP loopback instead of shared memory, and only loses.
  if (!fixed.count("HERRING_ALLREDUCE") && topo_.num_hosts() > 1 && !config_.psld_balancer) {
    for (auto a : {AllreduceAlgorithm::kHerring, AllreduceAlgorithm::kRing, AllreduceAlgorithm::kHalvingDoubling}) {
      o.allreduce_choices.push_back(static_cast<double>(static_cast<int>(a)));
    }
  }
  // Data crosses TCP only between hosts (one host's ranks reduce in shared memory).
  if (TunesTcpStreams(config_) && topo_.num_hosts() > 1) {
    o.tcp_stream_choices.assign(std::begin(kTcpStreamChoices), std::end(kTcpStreamChoices));
  }
  o.allreduce_names = {"herring", "ring", "hd", "hd-topo"};  // AllreduceAlgorithm's order
  o.warmup_samples = config_.autotune_warmup_samples;
  o.steps_per_sample = config_.autotune_steps_per_sample;
  o.bayes_max_samples = config_.autotune_bayes_max_samples;
  o.gaussian_process_noise = config_.autotune_gp_noise;
  o.log_path = config_.autotune_log;
  o.cache_enabled = config_.cache_capacity > 0;
  autotuner_ = std::make_unique<Autotuner>(std::move(o));
}

void Engine::ObserveForAutotune(const Response& r) {
  // Once the search settled nothing consumes what is collected here (AutotuneAfterCycle returns
  // early): collecting on would grow by every collective's name for the rest of the job.
  if (!autotuner_ || !autotune_.enabled || r.name == kAutotuneName) return;
  autotune_.names.push_back(r.name);
  autotune_.bytes += static_cast<int64_t>(TensorBytes(r));
}

void Engine::AutotuneAfterCycle() {
  if (!autotune_.enabled) return;
  const Clock::time_point now = Clock::now();
  if (autotuner_) {
    // What this cycle ran, under the settings in force during it.
    if (!autotune_.names.empty()) autotuner_->Observe(autotune_.names, autotune_.bytes, now);
    autotune_.names.clear();
    autotune_.bytes = 0;
  }
  if (autotune_.received) {
    autotune_.received = false;
    autotune_.in_flight = false;
    const auto& b = autotune_.buffer;
    const uint64_t version = static_cast<uint64_t>(b[kVersion]);
    if (version != autotune_.applied_version) {
      autotune_.applied_version = version;
      cycle_config_.fusion_threshold_bytes = static_cast<int64_t>(b[kFusion]);
      cycle_config_.cycle_time_ms = b[kCycleTime];
      cycle_config_.small_message_bytes = static_cast<int64_t>(b[kSmallMessages]);
      cycle_config_.allreduce = static_cast<AllreduceAlgorithm>(static_cast<int>(b[kAlgorithm]));
      cycle_config_.tcp_streams = static_cast<int>(b[kTcpStreams]);
      transport_->set_data_streams_in_use(cycle_config_.tcp_streams);
      counters_.autotune_applied_cycle = cycle_;
      if (autotuner_) autotuner_->Applied(version, now);
    }
    if (b[kActive] == 0) {
      autotune_.enabled = false;  // settled: these settings stay
      counters_.autotune_active = 0;
    }
    PublishTunedSettings();
    if (!autotune_.enabled) return;
  }
  if (autotune_.in_flight || cycle_ % kSyncEveryCycles != 0) return;
  if (autotuner_) {
    const TunedSettings& s = autotuner_->proposed();
    autotune_.buffer = {static_cast<double>(autotuner_->proposed_version()), autotuner_->active() ? 1.0 : 0.0,
                        s.fusion_threshold_bytes, s.cycle_time_ms, s.small_message_bytes, s.allreduce,
                        s.tcp_streams};
  }
  Request q;
  q.meta.type = OpType::kBroadcast;
  q.meta.name = kAutotuneName;
  q.meta.process_set = 0;
  q.meta.dtype = DataType::kFloat64;
  q.meta.root = 0;
  q.meta.tensors.push_back(TensorMeta{{static_cast<int64_t>(autotune_.buffer.size())}, {}});
  q.buffers.push_back(TensorBuffers{autotune_.buffer.data(), autotune_.buffer.data()});
  // Runs on the engine's thread, inside the cycle that executes the broadcast: the settings go
  // into force after that cycle (above), on every rank alike. A failed broadcast (a job failing)
  // changes nothing.
  q.on_complete = [this](OpResult result) {
    if (result.status.ok()) {
      autotune_.received = true;
    } else {
      autotune_.in_flight = false;
    }
  };
  autotune_.in_flight = true;
  Enqueue(std::move(q));
}

void Engine::PublishTunedSettings() {
  counters_.autotune_version = autotune_.applied_version;
  counters_.tuned_fusion_threshold_bytes = static_cast<uint64_t>(cycle_config_.fusion_threshold_bytes);
  counters_.tuned_cycle_time_us = static_cast<uint64_t>(cycle_config_.cycle_time_ms * 1000.0 + 0.5);
  counters_.tuned_small_message_bytes = static_cast<uint64_t>(cycle_config_.small_message_bytes);
  counters_.tuned_allreduce = static_cast<uint64_t>(cycle_config_.allreduce);
  counters_.tuned_tcp_streams = static_cast<uint64_t>(cycle_config_.tcp_streams);
}

OperationManager& Engine::Ops() {
  if (cycle_config_.allreduce == config_.allreduce) return *ops_;
  auto& manager = ops_by_algorithm_[static_cast<int>(cycle_config_.allreduce)];
  if (!manager) manager = std::make_unique<OperationManager>(cycle_config_);
  return *manager;
}

}  // namespace herring
