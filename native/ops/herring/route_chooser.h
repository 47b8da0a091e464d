// Which route a one-host pipelined allreduce takes under HERRING_READ_PEER_TENSORS=auto (the
// routes are the caller's small integers: ops/herring/one_host_routes.h). None is faster everywhere.
// Measured at np=2 on 2-vCPU virtual machines, harness allreduce, same minutes:
//   an AMD EPYC, vCPUs close (a cache line's round trip 120-140 ns): staging with the shared
//     result area 1 MiB 43.1 us, 4 MiB 144 us, 16 MiB 0.68 ms; reading the sum out of the other
//     ranks' tensors 47.5 us, 189 us, 1.15 ms;
//   the same vCPUs far apart (530-590 ns): the result area 116-125 us, 408-447 us, 1.57-1.75 ms;
//     reading the tensors 64-71 us, 237-282 us, 1.0-1.15 ms;
//   an Intel Xeon (about 300 ns): the result area 108 us, 550 us, 2.29 ms; reading the sum
//     120 us, 560 us, 2.44 ms; the cross-memory allreduce 93 us, 358 us, 1.38 ms.
// The hypervisor moves the vCPUs every few minutes (and when load starts), so `auto` measures
// the routes as the job runs and keeps the fastest, per size class (a power of two of bytes).
//
// Batches of a class go in runs of kRun on one route: a route's cost shows only once the cache
// lines are where it leaves them, so a run's first batch is not measured. The first runs of a
// class try each route in the caller's order; afterwards one run in kTrialEvery tries a route not
// preferred (each in turn), so that a move of the vCPUs is noticed, and the rest take the fastest.
// Every local rank runs the same batches and so tries the same runs; the route taken is local
// rank 0's vote (ops/tensor_notice.h), so ranks whose measurements disagree still agree on it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace herring {

class RouteChooser {
 public:
  static constexpr int64_t kRun = 4;
  static constexpr int64_t kTrialEvery = 64;
  // Samples kept per route and class (measured batches); the decision compares their medians, so
  // one noisy batch (a late rank, a preempted core) does not flip it.
  static constexpr int kSamples = 3;

  // `routes`: the candidates, the first one taken by a class not measured yet. At least one.
  explicit RouteChooser(std::vector<int> routes);

  // The route of the next batch of `bytes`.
  int Next(size_t bytes);
  // The batch's route as agreed and its time, from the moment every rank had told the others
  // where its tensors are to its end. A route that is not a candidate is not recorded.
  void Record(size_t bytes, int route, double seconds);
  // The route a batch of `bytes` takes outside trials (for tests).
  int Preferred(size_t bytes) const;
  const std::vector<int>& routes() const { return routes_; }

 private:
  struct Samples {
    std::array<double, kSamples> seconds_per_byte{};
    int count = 0;  // samples ever recorded
    double Median() const;
  };
  struct SizeClass {
    std::vector<Samples> samples;  // by index into routes_
    int64_t batches = 0;
    int run = 0;                   // index of the current run's route
    int last_used = -1;            // index of the route the class's previous batch took
    int preferred = 0;             // index
  };
  static int ClassOf(size_t bytes);
  int IndexOf(int route) const;

  std::vector<int> routes_;
  std::map<int, SizeClass> classes_;
};

}  // namespace herring
