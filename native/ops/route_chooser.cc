#include "ops/route_chooser.h"

#include <algorithm>
#include <utility>

namespace herring {

int RouteChooser::ClassOf(size_t bytes) {
  int c = 0;
  while (bytes > 1) {
    bytes >>= 1;
    ++c;
  }
  return c;
}

bool RouteChooser::Next(size_t bytes) {
  SizeClass& k = classes_[ClassOf(bytes)];
  const int64_t n = k.batches++;
  if (n % kRun == 0) {  // a new run: the result area, then the tensors, then mostly the faster
    const int64_t run = n / kRun;
    if (run == 0) {
      k.run_reads = false;
    } else if (run == 1) {
      k.run_reads = true;
    } else {
      k.run_reads = run % kTrialEvery == 0 ? !k.prefers_reads : k.prefers_reads;
    }
  }
  return k.run_reads;
}

void RouteChooser::Record(size_t bytes, bool read_peers, double seconds) {
  if (bytes == 0) return;
  SizeClass& k = classes_[ClassOf(bytes)];
  // The first batch on a route after the other pays for where the other left the lines.
  const bool measure = k.last_used == static_cast<int>(read_peers);
  k.last_used = static_cast<int>(read_peers);
  if (!measure) return;
  Samples& s = k.samples[read_peers ? 1 : 0];
  s.seconds_per_byte[s.count % kSamples] = seconds / static_cast<double>(bytes);
  s.count++;
  if (k.samples[0].count > 0 && k.samples[1].count > 0) {
    k.prefers_reads = k.samples[1].Median() < k.samples[0].Median();
  }
}

bool RouteChooser::PrefersReads(size_t bytes) const {
  const auto it = classes_.find(ClassOf(bytes));
  return it != classes_.end() && it->second.prefers_reads;
}

double RouteChooser::Samples::Median() const {
  const int n = std::min(count, kSamples);
  std::array<double, kSamples> sorted = seconds_per_byte;
  std::sort(sorted.begin(), sorted.begin() + n);
  return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

}  // namespace herring
