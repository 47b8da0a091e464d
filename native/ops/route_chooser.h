// Which route the one-host pipeline's all-gather takes under HERRING_READ_PEER_TENSORS=auto: the
// other ranks' tensors (ops/peer_output_reads.h) or the shared result area. Neither is faster
// everywhere. Measured at np=2 on this 2-vCPU virtual machine, harness allreduce, same minutes:
//   vCPUs close (a cache line's round trip 120-140 ns): 1 MiB 47.5 against 43.1 us,
//     4 MiB 189 against 144 us, 16 MiB 1.15 against 0.68 ms: the result area is faster;
//   vCPUs far apart (530-590 ns): 1 MiB 64-71 against 116-125 us, 4 MiB 237-282 against
//     408-447 us, 16 MiB 1.0-1.15 against 1.57-1.75 ms: reading the tensors is faster.
// The hypervisor moves the vCPUs every few minutes (and when load starts), so `auto` measures
// both routes as the job runs and keeps the faster, per size class (a power of two of bytes).
//
// Batches of a class go in runs of kRun on one route: a route's cost shows only once the cache
// lines are where it leaves them, so a run's first batch is not measured. The first run of a
// class takes the result area, the second the tensors; afterwards one run in kTrialEvery tries
// the route not preferred, so that a move of the vCPUs is noticed, and the rest take the faster.
// Every local rank runs the same batches and so tries the same runs; outside trials a rank that
// prefers the result area offers no addresses, and then every rank uses the result area.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>

namespace herring {

class RouteChooser {
 public:
  static constexpr int64_t kRun = 4;
  static constexpr int64_t kTrialEvery = 64;
  // Samples kept per route and class (measured batches); the decision compares their medians, so
  // one noisy batch (a late rank, a preempted core) does not flip it.
  static constexpr int kSamples = 3;

  // Whether this rank offers its tensors for the next batch of `bytes`.
  bool Next(size_t bytes);
  // The batch's route as agreed and its time, from the moment every rank had staged its first
  // chunk to its end.
  void Record(size_t bytes, bool read_peers, double seconds);
  // The route a batch of `bytes` takes outside trials (for tests).
  bool PrefersReads(size_t bytes) const;

 private:
  struct Samples {
    std::array<double, kSamples> seconds_per_byte{};
    int count = 0;  // samples ever recorded
    double Median() const;
  };
  struct SizeClass {
    Samples samples[2];            // [read_peers]
    int64_t batches = 0;
    bool run_reads = false;        // the route of the current run
    int last_used = -1;            // the route the class's previous batch took (-1: none yet)
    bool prefers_reads = false;
  };
  static int ClassOf(size_t bytes);

  std::map<int, SizeClass> classes_;
};

}  // namespace herring
