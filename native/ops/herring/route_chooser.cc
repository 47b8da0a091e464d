#include "ops/herring/route_chooser.h"

#include <algorithm>
#include <utility>

namespace herring {

RouteChooser::RouteChooser(std::vector<int> routes) : routes_(std::move(routes)) {
  if (routes_.empty()) routes_.push_back(0);
}

int RouteChooser::ClassOf(size_t bytes) {
  int c = 0;
  while (bytes > 1) {
    bytes >>= 1;
    ++c;
  }
  return c;
}

int RouteChooser::IndexOf(int route) const {
  const auto it = std::find(routes_.begin(), routes_.end(), route);
  return it == routes_.end() ? -1 : static_cast<int>(it - routes_.begin());
}

int RouteChooser::Next(size_t bytes) {
  SizeClass& k = classes_[ClassOf(bytes)];
  const int count = static_cast<int>(routes_.size());
  if (k.samples.empty()) k.samples.resize(count);
  const int64_t n = k.batches++;
  if (n % kRun == 0) {  // a new run: each route in turn, then mostly the fastest
    const int64_t run = n / kRun;
    if (run < count) {
      k.run = static_cast<int>(run);
    } else if (count > 1 && run % kTrialEvery == 0) {
      // The routes not preferred, each in turn.
      const int64_t trial = run / kTrialEvery;
      k.run = static_cast<int>((k.preferred + 1 + trial % (count - 1)) % count);
    } else {
      k.run = k.preferred;
    }
  }
  return routes_[k.run];
}

void RouteChooser::Record(size_t bytes, int route, double seconds) {
  const int index = IndexOf(route);
  if (bytes == 0 || index < 0) return;
  SizeClass& k = classes_[ClassOf(bytes)];
  if (k.samples.empty()) k.samples.resize(routes_.size());
  // The first batch on a route after another pays for where the other left the lines.
  const bool measure = k.last_used == index;
  k.last_used = index;
  if (!measure) return;
  Samples& s = k.samples[index];
  s.seconds_per_byte[s.count % kSamples] = seconds / static_cast<double>(bytes);
  s.count++;
  // The fastest of the routes measured so far.
  int best = -1;
  for (int i = 0; i < static_cast<int>(k.samples.size()); ++i) {
    if (k.samples[i].count == 0) continue;
    if (best < 0 || k.samples[i].Median() < k.samples[best].Median()) best = i;
  }
  if (best >= 0) k.preferred = best;
}

int RouteChooser::Preferred(size_t bytes) const {
  const auto it = classes_.find(ClassOf(bytes));
  return routes_[it == classes_.end() ? 0 : it->second.preferred];
}

double RouteChooser::Samples::Median() const {
  const int n = std::min(count, kSamples);
  std::array<double, kSamples> sorted = seconds_per_byte;
  std::sort(sorted.begin(), sorted.begin() + n);
  return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

}  // namespace herring
