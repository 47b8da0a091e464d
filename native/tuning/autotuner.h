// Autotuner: HOROVOD_AUTOTUNE's search, on rank 0. It scores the settings in force by the bytes
// the job's collectives move per microsecond (the median of several samples, each a number of
// steps, as Horovod's autotuner scores them), and moves through a chain of stages: fusion
// threshold and cycle time jointly by Bayesian optimisation, then each categorical knob (the
// small-message size, the allreduce algorithm, the TCP streams a message is striped over) value
// by value. Every stage starts from the best
// settings so far; at the end the best settings and the start are scored in turn again, and the
// search settles on the best only if it beats the start there. It only decides: the engine
// broadcasts its settings to every rank and tells it when they are in force (Applied).
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tuning/bayesian_optimizer.h"

namespace herring {

// What the autotuner can change, as numbers (the wire form the engine broadcasts).
struct TunedSettings {
  double fusion_threshold_bytes = 0;
  double cycle_time_ms = 0;
  double small_message_bytes = 0;
  double allreduce = 0;  // an AllreduceAlgorithm's value
  double tcp_streams = 0;  // data streams a message is striped over
  bool operator==(const TunedSettings& o) const {
    return fusion_threshold_bytes == o.fusion_threshold_bytes && cycle_time_ms == o.cycle_time_ms &&
           small_message_bytes == o.small_message_bytes && allreduce == o.allreduce && tcp_streams == o.tcp_streams;
  }
};

struct AutotuneOptions {
  TunedSettings initial;
  bool tune_fusion = true;   // false where the user set the knob (Horovod keeps set knobs fixed)
  bool tune_cycle_time = true;
  std::pair<double, double> fusion_bounds_bytes{0, 128.0 * 1024 * 1024};
  std::pair<double, double> cycle_time_bounds_ms{0, 10};
  std::vector<double> small_message_choices;  // empty: not tuned
  std::vector<double> allreduce_choices;      // empty: not tuned
  std::vector<double> tcp_stream_choices;     // empty: not tuned
  int warmup_samples = 3;       // HOROVOD_AUTOTUNE_WARMUP_SAMPLES
  int steps_per_sample = 10;    // HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE
  int bayes_max_samples = 20;   // HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES
  double gaussian_process_noise = 0.8;  // HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE
  // HOROVOD_AUTOTUNE_LOG: one CSV row per scored setting, in Horovod's columns and units first
  // (horovod/common/parameter_manager.cc: hierarchical_allreduce, hierarchical_allgather,
  // torus_allreduce, cache_enabled as 0/1, cycle_time_ms in ms, tensor_fusion_threshold in MiB,
  // score in bytes per microsecond), then herring's own (tensor_fusion_threshold_bytes: the
  // threshold exact, small_message_bytes, allreduce, tcp_streams, note).
  std::string log_path;
  bool cache_enabled = true;    // the response cache is on (HOROVOD_CACHE_CAPACITY > 0): Horovod's column
  // Names the settings' allreduce values in the log.
  std::vector<std::string> allreduce_names;
};

class Autotuner {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Autotuner(AutotuneOptions options);

  // The collectives one cycle ran on this rank (their names and bytes). Ignored while settings
  // proposed are not in force yet.
  void Observe(const std::vector<std::string>& names, int64_t bytes, Clock::time_point now);
  // The settings to be in force next, and their version (raised at every change).
  const TunedSettings& proposed() const { return proposed_; }
  uint64_t proposed_version() const { return proposed_version_; }
  // Still searching (false once it settled on the best settings, which are then proposed).
  bool active() const { return active_; }
  // The engine put version `version` in force on every rank (in the same cycle): score it from now.
  void Applied(uint64_t version, Clock::time_point now);
  // Scored settings so far (for tests and the log).
  int scored() const { return scored_; }

 private:
  // The categorical stages run in this order, between kJoint and kConfirm.
  enum class Stage { kJoint, kSmallMessage, kAllreduce, kTcpStreams, kConfirm, kDone };
  // A categorical stage's values and the field of the settings it sets.
  std::vector<double>& Choices(Stage stage);
  static double& Field(TunedSettings* settings, Stage stage);
  void Score(double score);
  void Propose(const TunedSettings& next);
  void NextStage();
  void Log(const TunedSettings& s, double score, const char* note);
  std::vector<double> JointPoint(const TunedSettings& s) const;
  TunedSettings WithJoint(const std::vector<double>& point) const;

  AutotuneOptions options_;
  TunedSettings proposed_;
  uint64_t proposed_version_ = 0;
  uint64_t applied_version_ = 0;
  bool active_ = true;
  int warmups_left_;
  int scored_ = 0;

  // The current sample: steps counted per collective name, bytes since it began.
  std::map<std::string, int> steps_;
  int64_t sample_bytes_ = 0;
  Clock::time_point sample_start_;
  bool sampling_ = false;
  std::vector<double> sample_scores_;

  Stage stage_ = Stage::kJoint;
  std::unique_ptr<BayesianOptimizer> bayes_;
  std::vector<TunedSettings> joint_trials_;  // fixed first points of the joint stage
  size_t choice_ = 0;                        // categorical stage: index of the value being scored
  TunedSettings best_;
  double best_score_ = -1;
  // The confirmation: the start and the best, scored in turn kConfirmRounds times each; the best
  // stays only if its scores beat the start's (one lucky sample must not end the search slower
  // than where it began).
  std::vector<double> confirm_scores_[2];  // [0] the start, [1] the best
  size_t confirm_turn_ = 0;

  std::ofstream log_;
};

}  // namespace herring
