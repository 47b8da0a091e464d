// The autotuner's parts: the Gaussian process, the Bayesian optimiser and the search itself,
// driven by a synthetic job whose step time depends on the settings in force.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/knobs.h"
#include "common/status.h"
#include "tuning/autotuner.h"
#include "tuning/bayesian_optimizer.h"
#include "tuning/gaussian_process.h"
#include <gtest/gtest.h>

using namespace herring;

TEST(Tuning, GaussianProcessInterpolatesAndIsUnsureFarFromSamples) {
  GaussianProcess gp(1e-4);
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (double v = 0; v <= 0.5; v += 0.05) {
    x.push_back({v});
    y.push_back(std::sin(6 * v));
  }
  gp.Fit(x, y);
  double mean, sd;
  gp.Predict({0.225}, &mean, &sd);
  EXPECT_NEAR(mean, std::sin(6 * 0.225), 0.02);
  double far_mean, far_sd;
  gp.Predict({1.0}, &far_mean, &far_sd);
  EXPECT_GT(far_sd, 5 * sd);
}

TEST(Tuning, ExpectedImprovementFavoursHighMeansAndUncertainty) {
  EXPECT_GT(BayesianOptimizer::ExpectedImprovement(2, 0.1, 1, 0), BayesianOptimizer::ExpectedImprovement(1, 0.1, 1, 0));
  EXPECT_GT(BayesianOptimizer::ExpectedImprovement(1, 1.0, 1, 0), BayesianOptimizer::ExpectedImprovement(1, 0.1, 1, 0));
  EXPECT_EQ(BayesianOptimizer::ExpectedImprovement(5, 0, 1, 0), 0.0);
}

TEST(Tuning, BayesianOptimizerFindsTheMaximumOfASmoothFunction) {
  // Peak at (70, 2) in a box of [0, 100] x [0, 10].
  auto f = [](const std::vector<double>& p) {
    return -std::pow((p[0] - 70) / 100, 2) - std::pow((p[1] - 2) / 10, 2);
  };
  BayesianOptimizer bo({{0, 100}, {0, 10}}, 1e-3);
  for (auto p : std::vector<std::vector<double>>{{10, 9}, {50, 5}, {90, 1}}) bo.AddSample(p, f(p));
  std::vector<double> best = {10, 9};
  for (int i = 0; i < 20; ++i) {
    auto p = bo.NextPoint();
    ASSERT_GE(p[0], 0);
    ASSERT_LE(p[0], 100);
    ASSERT_GE(p[1], 0);
    ASSERT_LE(p[1], 10);
    bo.AddSample(p, f(p));
    if (f(p) > f(best)) best = p;
  }
  EXPECT_NEAR(best[0], 70, 10);
  EXPECT_NEAR(best[1], 2, 1.5);
}

namespace {

// A job of identical steps: 100 tensors of 4 KiB per step, one cycle per step, whose step time
// is best with fusion on (threshold >= the step's 400 KiB) and a short cycle time, and 4x worse
// with no fusion. Drives the autotuner as the engine does: settings go into force one cycle
// after they are proposed.
struct SyntheticJob {
  Autotuner& tuner;
  Autotuner::Clock::time_point now = Autotuner::Clock::now();
  TunedSettings in_force;
  uint64_t version = 0;
  std::vector<std::string> names;

  explicit SyntheticJob(Autotuner& t, TunedSettings start) : tuner(t), in_force(start) {
    for (int i = 0; i < 100; ++i) names.push_back("grad." + std::to_string(i));
  }
  double StepMicros() const {
    const double fused = std::min(1.0, in_force.fusion_threshold_bytes / (100.0 * 4096));
    double us = 400.0 * (4 - 3 * fused) + 20 * in_force.cycle_time_ms;
    if (in_force.small_message_bytes == 262144) us *= 0.9;  // this job likes the larger size
    if (in_force.tcp_streams == 4) us *= 0.9;                // and more streams
    return us;
  }
  void RunSteps(int steps) {
    for (int s = 0; s < steps && tuner.active(); ++s) {
      now += std::chrono::microseconds(static_cast<int64_t>(StepMicros()));
      tuner.Observe(names, 100 * 4096, now);
      if (tuner.proposed_version() != version) {
        version = tuner.proposed_version();
        in_force = tuner.proposed();
        tuner.Applied(version, now);
      }
    }
  }
};

}  // namespace

TEST(Tuning, AutotunerLeavesABadStartAndSettlesOnTheBestItMeasured) {
  const std::string log = ::testing::TempDir() + "/autotune_log.csv";
  AutotuneOptions o;
  o.initial = TunedSettings{0, 5, 65536, 0, 2};  // no fusion: the worst start
  o.small_message_choices = {16384, 65536, 262144};
  o.tcp_stream_choices = {1, 2, 4};
  o.warmup_samples = 1;
  o.steps_per_sample = 3;
  o.bayes_max_samples = 10;
  o.gaussian_process_noise = 0.01;
  o.log_path = log;
  o.allreduce_names = {"herring", "ring", "hd", "hd-topo"};
  Autotuner tuner(o);
  SyntheticJob job(tuner, o.initial);
  job.RunSteps(100000);
  ASSERT_FALSE(tuner.active());
  // Joint samples, the small-message values and the stream counts (each stage's incumbent again
  // first), the confirmation.
  EXPECT_EQ(tuner.scored(), 10 + 3 + 3 + 4);
  const TunedSettings& settled = tuner.proposed();
  EXPECT_GE(settled.fusion_threshold_bytes, 100.0 * 4096);  // fuses the whole step
  EXPECT_LT(settled.cycle_time_ms, 5.0);
  EXPECT_EQ(settled.small_message_bytes, 262144);
  EXPECT_EQ(settled.tcp_streams, 4);
  // The log: a header, one row per score, and the settled settings last, as the best row.
  std::ifstream in(log);
  std::string line, last;
  int rows = 0;
  std::getline(in, line);
  // Horovod's columns first, in its order (parameter_manager.cc), then ours.
  EXPECT_EQ(line,
            "hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,cycle_time_ms,"
            "tensor_fusion_threshold,score,tensor_fusion_threshold_bytes,small_message_bytes,allreduce,tcp_streams,note");
  while (std::getline(in, line)) {
    ++rows;
    last = line;
  }
  EXPECT_EQ(rows, tuner.scored() + 1);
  EXPECT_NE(last.find(",262144,herring,4,"), std::string::npos) << last;
  EXPECT_EQ(last.rfind("0,0,0,1,", 0), 0u) << last;  // no hierarchical/torus allreduce here; the cache on
  EXPECT_NE(last.find(",best"), std::string::npos) << last;
  std::remove(log.c_str());
}

TEST(Tuning, KnobsSetInTheEnvironmentAreRecordedAndTheStartParses) {
  Config c = Config::FromEnvironment({{"HOROVOD_AUTOTUNE", "1"}, {"HOROVOD_FUSION_THRESHOLD", "1024"},
                                      {"HERRING_AUTOTUNE_START", "0,2.5"}});
  EXPECT_TRUE(c.autotune);
  EXPECT_TRUE(c.set_in_environment.count("HOROVOD_FUSION_THRESHOLD"));
  EXPECT_FALSE(c.set_in_environment.count("HOROVOD_CYCLE_TIME"));
  EXPECT_EQ(c.autotune_start_fusion_bytes, 0);
  EXPECT_EQ(c.autotune_start_cycle_ms, 2.5);
  EXPECT_THROW(Config::FromEnvironment({{"HERRING_AUTOTUNE_START", "lots"}}), Error);
}

TEST(Tuning, AutotunerDoesNotSettleOnALuckySample) {
  // Every setting is as fast as every other, but one setting's first score comes out far ahead
  // (three of its five samples were lucky, so their median is): the confirmation scores it again
  // beside the start, finds no gain, and the search settles where it started.
  AutotuneOptions o;
  o.initial = TunedSettings{134217728, 1, 65536, 0};
  o.warmup_samples = 0;
  o.steps_per_sample = 1;
  o.bayes_max_samples = 4;
  o.gaussian_process_noise = 0.5;
  Autotuner tuner(o);
  struct FlatJob {
    Autotuner& tuner;
    Autotuner::Clock::time_point now = Autotuner::Clock::now();
    TunedSettings in_force;
    uint64_t version = 0;
    int lucky_left = 4;  // steps: the first sample spans two, the next ones one each
  } job{tuner, Autotuner::Clock::now(), o.initial};
  const double lucky_fusion = std::round(o.fusion_bounds_bytes.second / 8);  // the first spread point
  for (int s = 0; s < 100000 && tuner.active(); ++s) {
    int64_t us = 1000;
    if (job.in_force.fusion_threshold_bytes == lucky_fusion && job.lucky_left > 0) {
      --job.lucky_left;
      us = 100;
    }
    job.now += std::chrono::microseconds(us);
    tuner.Observe({"grad"}, 4096, job.now);
    if (tuner.proposed_version() != job.version) {
      job.version = tuner.proposed_version();
      job.in_force = tuner.proposed();
      tuner.Applied(job.version, job.now);
    }
  }
  ASSERT_FALSE(tuner.active());
  EXPECT_TRUE(tuner.proposed() == o.initial) << tuner.proposed().fusion_threshold_bytes;
}

TEST(Tuning, WithFusionAndCycleTimeFixedEverySmallMessageValueIsScored) {
  // The environment fixed both joint knobs: the search starts at the categorical stage, scores
  // the incumbent (64 KiB) first and then each other value, 16 KiB included.
  const std::string log = ::testing::TempDir() + "/autotune_fixed_log.csv";
  AutotuneOptions o;
  o.initial = TunedSettings{134217728, 1, 65536, 0};
  o.tune_fusion = false;
  o.tune_cycle_time = false;
  o.small_message_choices = {16384, 65536, 262144};
  o.warmup_samples = 0;
  o.steps_per_sample = 1;
  o.log_path = log;
  Autotuner tuner(o);
  auto now = Autotuner::Clock::now();
  uint64_t version = 0;
  for (int s = 0; s < 100000 && tuner.active(); ++s) {
    now += std::chrono::microseconds(1000);
    tuner.Observe({"grad"}, 4096, now);
    if (tuner.proposed_version() != version) {
      version = tuner.proposed_version();
      tuner.Applied(version, now);
    }
  }
  ASSERT_FALSE(tuner.active());
  std::ifstream in(log);
  std::string line, sizes;
  std::getline(in, line);
  while (std::getline(in, line)) {
    if (line.find(",best") != std::string::npos) continue;
    // small_message_bytes: the 9th column (after Horovod's 7 and the threshold in bytes).
    size_t at = 0;
    for (int comma = 0; comma < 8; ++comma) at = line.find(',', at) + 1;
    sizes += line.substr(at, 5) + " ";
  }
  EXPECT_NE(sizes.find("65536"), std::string::npos) << sizes;
  EXPECT_NE(sizes.find("16384"), std::string::npos) << sizes;
  EXPECT_NE(sizes.find("26214"), std::string::npos) << sizes;
  std::remove(log.c_str());
}
