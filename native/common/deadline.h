// Deadline: every blocking call in the core takes one. Waits convert it to a bounded sleep so a
// lost peer or a stuck step becomes an error instead of a hang.
#pragma once

#include <algorithm>
#include <chrono>

namespace herring {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  static Deadline After(std::chrono::nanoseconds d) { return Deadline(Clock::now() + d); }
  static Deadline AfterSeconds(double s) {
    return After(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s)));
  }
  static Deadline Never() { return Deadline(Clock::time_point::max()); }

  bool never() const { return when_ == Clock::time_point::max(); }
  bool Expired() const { return !never() && Clock::now() >= when_; }
  Clock::time_point when() const { return when_; }
  std::chrono::nanoseconds Remaining() const {
    if (never()) return std::chrono::nanoseconds::max();
    return std::max(std::chrono::nanoseconds(0), when_ - Clock::now());
  }
  // The earlier of this deadline and now + cap: used to wake up periodically inside a long wait.
  Clock::time_point Capped(std::chrono::nanoseconds cap) const {
    auto c = Clock::now() + cap;
    return never() ? c : std::min(c, when_);
  }
  static Deadline Earlier(const Deadline& a, const Deadline& b) { return a.when_ <= b.when_ ? a : b; }

 private:
  explicit Deadline(Clock::time_point when) : when_(when) {}
  Clock::time_point when_;
};

}  // namespace herring
