// The route chooser of one-host allreduces (ops/herring/route_chooser.h): the warm-up runs that measure
// every route, each run's first batch left unmeasured, the decision by medians, the trial runs
// that notice a move of the vCPUs (each route not preferred in turn), and size classes decided
// apart.
#include "ops/herring/route_chooser.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace herring {
namespace {

constexpr size_t kBytes = 4 << 20;
constexpr int kArea = 0, kReads = 2, kCross = 3;  // the caller's route numbers

RouteChooser TwoRoutes() { return RouteChooser({kArea, kReads}); }
RouteChooser ThreeRoutes() { return RouteChooser({kArea, kReads, kCross}); }

// Runs `batches` batches of `bytes`, each taking seconds_per_byte(its route) per byte; returns the
// route each took.
template <typename Timing>
std::vector<int> RunBatches(RouteChooser& chooser, int64_t batches, Timing seconds_per_byte, size_t bytes = kBytes) {
  std::vector<int> routes;
  for (int64_t i = 0; i < batches; ++i) {
    const int r = chooser.Next(bytes);
    routes.push_back(r);
    chooser.Record(bytes, r, seconds_per_byte(r) * bytes);
  }
  return routes;
}

std::map<int, int64_t> Count(const std::vector<int>& routes) {
  std::map<int, int64_t> n;
  for (int r : routes) n[r]++;
  return n;
}

auto ReadsFaster = [](int route) { return route == kReads ? 1e-9 : 1.7e-9; };
auto AreaFaster = [](int route) { return route == kArea ? 1e-9 : 1.3e-9; };
auto CrossFastest = [](int route) { return route == kCross ? 0.6e-9 : route == kReads ? 1e-9 : 1.2e-9; };

TEST(RouteChooser, WarmUpRunsTryEveryRouteInOrder) {
  RouteChooser chooser = ThreeRoutes();
  const std::vector<int> warm = RunBatches(chooser, 3 * RouteChooser::kRun, CrossFastest);
  for (int64_t i = 0; i < 3 * RouteChooser::kRun; ++i) {
    EXPECT_EQ(warm[i], chooser.routes()[i / RouteChooser::kRun]) << i;
  }
  EXPECT_EQ(chooser.Preferred(kBytes), kCross);
}

TEST(RouteChooser, AnUnmeasuredClassTakesTheFirstRoute) {
  RouteChooser chooser = ThreeRoutes();
  EXPECT_EQ(chooser.Preferred(kBytes), kArea);
  EXPECT_EQ(chooser.Next(kBytes), kArea);
}

TEST(RouteChooser, TheFastestIsKeptButForOneTrialRunInKTrialEvery) {
  RouteChooser chooser = TwoRoutes();
  RunBatches(chooser, 2 * RouteChooser::kRun, ReadsFaster);
  const int64_t later = 3 * RouteChooser::kTrialEvery * RouteChooser::kRun;
  EXPECT_EQ(Count(RunBatches(chooser, later, ReadsFaster))[kReads], later - 3 * RouteChooser::kRun);  // 3 trial runs
  EXPECT_EQ(chooser.Preferred(kBytes), kReads);
}

TEST(RouteChooser, TrialRunsVisitEveryRouteNotPreferred) {
  RouteChooser chooser = ThreeRoutes();
  RunBatches(chooser, 3 * RouteChooser::kRun, CrossFastest);
  const int64_t later = 4 * RouteChooser::kTrialEvery * RouteChooser::kRun;
  std::map<int, int64_t> n = Count(RunBatches(chooser, later, CrossFastest));
  EXPECT_EQ(n[kArea], 2 * RouteChooser::kRun);
  EXPECT_EQ(n[kReads], 2 * RouteChooser::kRun);
  EXPECT_EQ(n[kCross], later - 4 * RouteChooser::kRun);
}

TEST(RouteChooser, ARunsFirstBatchIsNotMeasured) {
  RouteChooser chooser = TwoRoutes();
  // Each run's first batch pays for the other route's leftovers: make it look 100x slower. If it
  // were measured, the tensors would never win.
  for (int64_t i = 0; i < 2 * RouteChooser::kRun; ++i) {
    const int r = chooser.Next(kBytes);
    const bool first_of_run = i % RouteChooser::kRun == 0;
    chooser.Record(kBytes, r, (first_of_run ? 100e-9 : ReadsFaster(r)) * kBytes);
  }
  EXPECT_EQ(chooser.Preferred(kBytes), kReads);
}

TEST(RouteChooser, OneSlowBatchDoesNotFlipTheChoice) {
  RouteChooser chooser = TwoRoutes();
  RunBatches(chooser, 2 * RouteChooser::kRun, AreaFaster);
  ASSERT_EQ(chooser.Preferred(kBytes), kArea);
  chooser.Record(kBytes, kArea, 100e-9 * kBytes);  // a late rank, once
  EXPECT_EQ(chooser.Preferred(kBytes), kArea);
}

TEST(RouteChooser, AMoveOfTheVcpusIsFollowedBothWays) {
  RouteChooser chooser = TwoRoutes();
  RunBatches(chooser, 2 * RouteChooser::kRun, AreaFaster);
  ASSERT_EQ(chooser.Preferred(kBytes), kArea);
  // The result area gets slower (the vCPUs moved apart): its own samples show it within a run.
  RunBatches(chooser, 2 * RouteChooser::kRun, ReadsFaster);
  EXPECT_EQ(chooser.Preferred(kBytes), kReads);
  // And back: the next trial run on the result area finds it faster again.
  RunBatches(chooser, RouteChooser::kTrialEvery * RouteChooser::kRun, AreaFaster);
  EXPECT_EQ(chooser.Preferred(kBytes), kArea);
}

TEST(RouteChooser, SizeClassesAreDecidedApart) {
  RouteChooser chooser = TwoRoutes();
  RunBatches(chooser, 2 * RouteChooser::kRun, ReadsFaster, 16 << 20);
  RunBatches(chooser, 2 * RouteChooser::kRun, AreaFaster, 1 << 20);
  EXPECT_EQ(chooser.Preferred(16 << 20), kReads);
  EXPECT_EQ(chooser.Preferred((16 << 20) + 12345), kReads);  // same power of two
  EXPECT_EQ(chooser.Preferred(1 << 20), kArea);
  EXPECT_EQ(chooser.Preferred(8 << 20), kArea);  // never seen: the first route
}

TEST(RouteChooser, ARouteNotACandidateIsNotRecorded) {
  RouteChooser chooser = TwoRoutes();
  RunBatches(chooser, 2 * RouteChooser::kRun, AreaFaster);
  for (int i = 0; i < 10; ++i) chooser.Record(kBytes, kCross, 1e-12 * kBytes);
  EXPECT_EQ(chooser.Preferred(kBytes), kArea);
}

}  // namespace
}  // namespace herring
