// The route chooser of the one-host all-gather (ops/route_chooser.h): the warm-up runs that measure
// both routes, each run's first batch left unmeasured, the decision by medians, the trial runs that
// notice a move of the vCPUs, and size classes decided apart.
#include "ops/route_chooser.h"

#include <gtest/gtest.h>

#include <vector>

namespace herring {
namespace {

constexpr size_t kBytes = 4 << 20;
using Chooser = RouteChooser;

// Runs `batches` batches of `bytes`, each taking seconds_per_byte(its route) per byte; returns the
// route each took.
template <typename Timing>
std::vector<bool> RunBatches(Chooser& chooser, int64_t batches, Timing seconds_per_byte, size_t bytes = kBytes) {
  std::vector<bool> reads;
  for (int64_t i = 0; i < batches; ++i) {
    const bool r = chooser.Next(bytes);
    reads.push_back(r);
    chooser.Record(bytes, r, seconds_per_byte(r) * bytes);
  }
  return reads;
}

int64_t Count(const std::vector<bool>& reads) {
  int64_t n = 0;
  for (bool r : reads) n += r;
  return n;
}

auto ReadsFaster = [](bool reads) { return reads ? 1e-9 : 1.7e-9; };
auto AreaFaster = [](bool reads) { return reads ? 1.3e-9 : 1e-9; };

TEST(RouteChooser, WarmUpRunsTryTheResultAreaThenTheTensors) {
  Chooser chooser;
  const std::vector<bool> warm = RunBatches(chooser, 2 * Chooser::kRun, ReadsFaster);
  for (int64_t i = 0; i < 2 * Chooser::kRun; ++i) EXPECT_EQ(warm[i], i >= Chooser::kRun) << i;
  EXPECT_TRUE(chooser.PrefersReads(kBytes));
}

TEST(RouteChooser, TheFasterIsKeptButForOneTrialRunInKTrialEvery) {
  Chooser chooser;
  RunBatches(chooser, 2 * Chooser::kRun, ReadsFaster);
  const int64_t later = 3 * Chooser::kTrialEvery * Chooser::kRun;
  EXPECT_EQ(Count(RunBatches(chooser, later, ReadsFaster)), later - 3 * Chooser::kRun);  // 3 trial runs
  EXPECT_TRUE(chooser.PrefersReads(kBytes));
}

TEST(RouteChooser, ARunsFirstBatchIsNotMeasured) {
  Chooser chooser;
  // Each run's first batch pays for the other route's leftovers: make it look 100x slower. If it
  // were measured, the tensors would never win.
  int64_t i = 0;
  for (; i < 2 * Chooser::kRun; ++i) {
    const bool r = chooser.Next(kBytes);
    const bool first_of_run = i % Chooser::kRun == 0;
    chooser.Record(kBytes, r, (first_of_run ? 100e-9 : ReadsFaster(r)) * kBytes);
  }
  EXPECT_TRUE(chooser.PrefersReads(kBytes));
}

TEST(RouteChooser, OneSlowBatchDoesNotFlipTheChoice) {
  Chooser chooser;
  RunBatches(chooser, 2 * Chooser::kRun, AreaFaster);
  ASSERT_FALSE(chooser.PrefersReads(kBytes));
  chooser.Record(kBytes, false, 100e-9 * kBytes);  // a late rank, once
  EXPECT_FALSE(chooser.PrefersReads(kBytes));
}

TEST(RouteChooser, AMoveOfTheVcpusIsFollowedBothWays) {
  Chooser chooser;
  RunBatches(chooser, 2 * Chooser::kRun, AreaFaster);
  ASSERT_FALSE(chooser.PrefersReads(kBytes));
  // The result area gets slower (the vCPUs moved apart): its own samples show it within a run.
  RunBatches(chooser, 2 * Chooser::kRun, ReadsFaster);
  EXPECT_TRUE(chooser.PrefersReads(kBytes));
  // And back: the next trial run on the result area finds it faster again.
  RunBatches(chooser, Chooser::kTrialEvery * Chooser::kRun, AreaFaster);
  EXPECT_FALSE(chooser.PrefersReads(kBytes));
}

TEST(RouteChooser, SizeClassesAreDecidedApart) {
  Chooser chooser;
  RunBatches(chooser, 2 * Chooser::kRun, ReadsFaster, 16 << 20);
  RunBatches(chooser, 2 * Chooser::kRun, AreaFaster, 1 << 20);
  EXPECT_TRUE(chooser.PrefersReads(16 << 20));
  EXPECT_TRUE(chooser.PrefersReads((16 << 20) + 12345));  // same power of two
  EXPECT_FALSE(chooser.PrefersReads(1 << 20));
  EXPECT_FALSE(chooser.PrefersReads(8 << 20));  // never seen: the result area
}

}  // namespace
}  // namespace herring
