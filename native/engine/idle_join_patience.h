// IdleJoinPatience: how long a background loop that a peer's cycle invited, with no request of
// its own, waits for its application threads before it joins the cycle empty-handed.
//
// Joining empty-handed is needed when this rank's threads will submit nothing for a while (a
// collective of a process set it is not in, a stalled tensor the coordinator must hear about)
// and wasted when they are about to submit the same collective: the cycle then decides nothing,
// and every rank runs a second one once the request comes. Which of the two a job does is only
// known afterwards, so the wait adapts: it grows after each wasted empty join and falls back to
// the base after one that helped. Every rank sees whether some rank joined empty-handed (a status
// bit of the AND, kNoEmptyJoin), so a wasted join grows every rank's wait at once: a rank that is
// on time in this cycle may be the late one in the next. With more ranks than cores (4 on 2
// cores, or hundreds of engine ranks in the scale suite) a peer's thread that is on its way can be
// a few milliseconds late; measured, 64 ranks on one host ran 2.6 cycles per lockstep allreduce
// with a fixed 50 us wait (10 ms per call), and one cycle each once the wait had grown (6 ms per
// call).
#pragma once

#include <algorithm>
#include <chrono>

namespace herring {

class IdleJoinPatience {
 public:
  using Duration = std::chrono::nanoseconds;
  // `base`: the wait of a job whose empty joins help (the engine's burst pause).
  explicit IdleJoinPatience(Duration base) : base_(base), current_(base) {}
  // The ceiling: a job whose empty joins are needed again, after a long lockstep phase grew the
  // wait, pays it once; a stall report or a deadline (seconds) is never held back by it.
  static constexpr Duration kMax = std::chrono::milliseconds(100);
  // Each wasted join multiplies the wait by this: until every rank has learned, cycles are
  // wasted on every rank (measured, 256 ranks on 16 simulated hosts ran 1.9 cycles per call over
  // their first 220 calls when it doubled, 1.6 at fourfold; about 1.1 once every rank had
  // learned). The ranks learned each from its own joins then; now from anyone's.
  static constexpr int kGrowth = 4;

  Duration current() const { return current_; }

  // After a cycle this rank joined with nothing of its own: `helped` when the cycle executed or
  // negotiated something (this rank's part was what the others waited for). Also, with false,
  // after a cycle another rank's empty join wasted.
  void Joined(bool helped) { current_ = helped ? base_ : std::min<Duration>(kGrowth * current_, kMax); }

 private:
  Duration base_;
  Duration current_;
};

}  // namespace herring
