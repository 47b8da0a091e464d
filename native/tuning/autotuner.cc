#include "tuning/autotuner.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <stdexcept>

#include "common/logging.h"

namespace herring {
namespace {

// Samples per score, whose median is the score: one slow sample (a page fault storm, a core taken
// by another process) must not decide. Horovod takes the median of 5 too.
constexpr size_t kSamplesPerScore = 5;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr size_t kConfirmRounds = 2;

}  // namespace

Autotuner::Autotuner(AutotuneOptions options)
    : options_(std::move(options)), proposed_(options_.initial), warmups_left_(options_.warmup_samples) {
  best_ = proposed_;
  std::vector<std::pair<double, double>> bounds;
  if (options_.tune_fusion) bounds.push_back({options_.fusion_bounds_bytes.first / kMiB, options_.fusion_bounds_bytes.second / kMiB});
  if (options_.tune_cycle_time) bounds.push_back(options_.cycle_time_bounds_ms);
  if (!bounds.empty()) {
    bayes_ = std::make_unique<BayesianOptimizer>(bounds, options_.gaussian_process_noise);
    // Spread first points (the initial settings are scored first, as they are in force), as
    // Horovod seeds its search with fixed test points: the GP needs a few to model anything.
    const double f_hi = options_.fusion_bounds_bytes.second, c_hi = options_.cycle_time_bounds_ms.second;
    for (auto [f, c] : {std::pair<double, double>{f_hi / 8, c_hi / 20}, {f_hi / 2, c_hi / 2}, {f_hi / 32, c_hi / 4}}) {
      TunedSettings t = options_.initial;
      if (options_.tune_fusion) t.fusion_threshold_bytes = std::round(f);
      if (options_.tune_cycle_time) t.cycle_time_ms = c;
      joint_trials_.push_back(t);
    }
  } else {
    NextStage();  // fusion and cycle time both fixed: the first categorical stage, incumbent first
  }
  if (!options_.log_path.empty()) {
    log_.open(options_.log_path, std::ios::out | std::ios::trunc);
    if (log_) {
      // Horovod's header, column for column (tools read the file by these names), then ours.
      log_ << "hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,cycle_time_ms,"
              "tensor_fusion_threshold,score,tensor_fusion_threshold_bytes,small_message_bytes,allreduce,tcp_streams,note\n";
      log_.flush();
    } else {
      HLOG(Warning) << "HOROVOD_AUTOTUNE_LOG: cannot write " << options_.log_path;
    }
  }
}

std::vector<double> Autotuner::JointPoint(const TunedSettings& s) const {
  std::vector<double> p;
  if (options_.tune_fusion) p.push_back(s.fusion_threshold_bytes / kMiB);
  if (options_.tune_cycle_time) p.push_back(s.cycle_time_ms);
  return p;
}

TunedSettings Autotuner::WithJoint(const std::vector<double>& point) const {
  TunedSettings t = best_;
  size_t i = 0;
  if (options_.tune_fusion) t.fusion_threshold_bytes = std::round(point[i++] * kMiB);
  if (options_.tune_cycle_time) t.cycle_time_ms = point[i++];
  return t;
}

void Autotuner::Applied(uint64_t version, Clock::time_point now) {
  applied_version_ = version;
  steps_.clear();
  sample_bytes_ = 0;
  sample_start_ = now;
  sampling_ = true;
  sample_scores_.clear();
}

void Autotuner::Observe(const std::vector<std::string>& names, int64_t bytes, Clock::time_point now) {
  if (!active_ || applied_version_ != proposed_version_) return;
  if (!sampling_) Applied(applied_version_, now);
  // A sample ends when some collective has run steps_per_sample times in it: then it spans that
  // many training steps, whatever the step's shape.
  bool sample_done = false;
  for (const auto& n : names) {
    if (++steps_[n] > options_.steps_per_sample) sample_done = true;
  }
  if (sample_done) {
    const double us = std::chrono::duration<double, std::micro>(now - sample_start_).count();
    sample_scores_.push_back(us > 0 ? static_cast<double>(sample_bytes_) / us : 0.0);
    steps_.clear();
    for (const auto& n : names) steps_[n] = 1;  // this cycle opens the next sample
    sample_bytes_ = 0;
    sample_start_ = now;
  }
  sample_bytes_ += bytes;
  if (sample_scores_.size() < kSamplesPerScore) return;
  std::vector<double> s = sample_scores_;
  std::nth_element(s.begin(), s.begin() + s.size() / 2, s.end());
  sample_scores_.clear();
  Score(s[s.size() / 2]);
}

void Autotuner::Score(double score) {
  if (warmups_left_ > 0) {
    --warmups_left_;  // the first scores measure a job still warming its caches
    return;
  }
  ++scored_;
  if (stage_ == Stage::kConfirm) {
    Log(proposed_, score, "confirm");
    confirm_scores_[confirm_turn_ % 2].push_back(score);
    if (++confirm_turn_ < 2 * kConfirmRounds) {
      Propose(confirm_turn_ % 2 == 0 ? options_.initial : best_);
      return;
    }
    double sums[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      for (double v : confirm_scores_[i]) sums[i] += v;
    }
    if (sums[0] >= sums[1]) {
      best_ = options_.initial;
      best_score_ = sums[0] / static_cast<double>(kConfirmRounds);
    } else {
      best_score_ = sums[1] / static_cast<double>(kConfirmRounds);
    }
    NextStage();
    return;
  }
  Log(proposed_, score, "");
  if (score > best_score_) {
    best_score_ = score;
    best_ = proposed_;
  }
  switch (stage_) {
    case Stage::kJoint: {
      bayes_->AddSample(JointPoint(proposed_), score);
      if (static_cast<int>(bayes_->samples()) >= options_.bayes_max_samples) {
        NextStage();
        return;
      }
      const size_t trial = bayes_->samples() - 1;
      Propose(trial < joint_trials_.size() ? joint_trials_[trial] : WithJoint(bayes_->NextPoint()));
      return;
    }
    case Stage::kSmallMessage:
    case Stage::kAllreduce:
    case Stage::kTcpStreams: {
      const auto& choices = Choices(stage_);
      const double field = Field(&best_, stage_);
      // The next value not yet scored (the values are distinct, the incumbent came first).
      while (++choice_ < choices.size() && choices[choice_] == field) {
      }
      if (choice_ >= choices.size()) {
        NextStage();
        return;
      }
      TunedSettings t = best_;
      Field(&t, stage_) = choices[choice_];
      Propose(t);
      return;
    }
    case Stage::kConfirm:
    case Stage::kDone:
      return;
  }
}

void Autotuner::NextStage() {
  // Each categorical stage first scores the incumbent (already in force or proposed now), then
  // every other value.
  while (true) {
    stage_ = static_cast<Stage>(static_cast<int>(stage_) + 1);
    if (stage_ == Stage::kConfirm) {
      if (best_ == options_.initial) continue;  // nothing beat the start: nothing to confirm
      confirm_turn_ = 0;
      Propose(options_.initial);
      return;
    }
    if (stage_ == Stage::kDone) break;
    auto& choices = Choices(stage_);
    if (choices.empty()) continue;
    choice_ = 0;
    const double incumbent = Field(&best_, stage_);
    // Score the incumbent as value 0: move it to the front of this stage's order.
    auto it = std::find(choices.begin(), choices.end(), incumbent);
    if (it != choices.end()) std::rotate(choices.begin(), it, it + 1);
    else choices.insert(choices.begin(), incumbent);
    Propose(best_);
    return;
  }
  active_ = false;
  Log(best_, best_score_, "best");
  HLOG(Info) << "autotune: settled on fusion threshold " << best_.fusion_threshold_bytes << " bytes, cycle time "
             << best_.cycle_time_ms << " ms, small messages " << best_.small_message_bytes << " bytes, "
             << best_.tcp_streams << " TCP streams (score " << best_score_ << " bytes/us)";
  Propose(best_);
}

std::vector<double>& Autotuner::Choices(Stage stage) {
  switch (stage) {
    case Stage::kSmallMessage: return options_.small_message_choices;
    case Stage::kAllreduce: return options_.allreduce_choices;
    case Stage::kTcpStreams: return options_.tcp_stream_choices;
    default: throw std::logic_error("autotune: not a categorical stage");
  }
}

double& Autotuner::Field(TunedSettings* settings, Stage stage) {
  switch (stage) {
    case Stage::kSmallMessage: return settings->small_message_bytes;
    case Stage::kAllreduce: return settings->allreduce;
    case Stage::kTcpStreams: return settings->tcp_streams;
    default: throw std::logic_error("autotune: not a categorical stage");
  }
}

void Autotuner::Propose(const TunedSettings& next) {
  ++proposed_version_;  // even if unchanged: the next score is taken under `next` in force
  proposed_ = next;
  sampling_ = false;
}

void Autotuner::Log(const TunedSettings& s, double score, const char* note) {
  if (!log_) return;
  const size_t algo = static_cast<size_t>(s.allreduce);
  const std::string algo_name = algo < options_.allreduce_names.size() ? options_.allreduce_names[algo] : std::to_string(algo);
  // Horovod's columns in Horovod's units: its hierarchical and torus allreduce and hierarchical
  // allgather do not exist here (0, as Horovod writes them when off), the threshold in MiB
  // (Horovod's fusion_buffer_threshold_mb), the score in bytes per microsecond; numbers in the
  // stream's default form, as Horovod's (6 significant digits).
  log_ << std::setprecision(6) << 0 << "," << 0 << "," << 0 << "," << (options_.cache_enabled ? 1 : 0) << ","
       << s.cycle_time_ms << "," << s.fusion_threshold_bytes / kMiB << "," << score << ","
       << static_cast<int64_t>(s.fusion_threshold_bytes) << "," << static_cast<int64_t>(s.small_message_bytes) << "," << algo_name << "," << static_cast<int>(s.tcp_streams) << ","
       << note << "\n";
  log_.flush();  // readable while the job runs, as the timeline is
}

}  // namespace herring
