// Tests of HandleTable: completion reaches a waiter whether it is still looking or already asleep
// (Complete and CompleteAll only signal the condition when someone sleeps on it), callbacks run
// exactly once, and a batch completion leaves every result to take.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "runtime/handle_table.h"
#include <gtest/gtest.h>

using namespace herring;

namespace {

// Long enough that a waiter is past its spin and asleep on the condition.
constexpr auto kPastTheSpin = HandleTable::kSpin * 20;
// A sleeping waiter that is not signalled looks again only at its deadline (or after a second):
// a waiter whose deadline passed was not woken by the completion.
constexpr double kWakeDeadlineSeconds = 0.5;

TEST(HandleTable, CompleteWakesASleepingWaiter) {
  HandleTable table;
  const int64_t h = table.Create();
  std::thread completer([&] {
    std::this_thread::sleep_for(kPastTheSpin);
    OpResult r;
    r.value = 7;
    table.Complete(h, std::move(r));
  });
  const Deadline deadline = Deadline::AfterSeconds(kWakeDeadlineSeconds);
  Status s = table.Wait(h, deadline);
  completer.join();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(deadline.Expired()) << "the waiter was not woken by Complete";
  EXPECT_EQ(table.Take(h).value, 7);
}

TEST(HandleTable, CompleteAllWakesSleepingWaitersAndRunsCallbacksOnce) {
  HandleTable table;
  std::atomic<int> calls{0};
  std::vector<int64_t> handles = {table.Create(), table.Create(),
                                  table.Create([&](OpResult r) { calls += r.status.ok() ? 1 : 100; })};
  std::vector<Status> waited(2);
  std::vector<std::thread> waiters;
  const Deadline deadline = Deadline::AfterSeconds(kWakeDeadlineSeconds);
  for (int i = 0; i < 2; ++i) {
    waiters.emplace_back([&, i] { waited[i] = table.Wait(handles[i], deadline); });
  }
  std::this_thread::sleep_for(kPastTheSpin);
  table.CompleteAll(handles);
  table.CompleteAll(handles);  // again: nothing is completed twice
  for (auto& t : waiters) t.join();
  EXPECT_FALSE(deadline.Expired()) << "the waiters were not woken by CompleteAll";
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(waited[i].ok()) << waited[i].message();
    EXPECT_TRUE(table.Take(handles[i]).status.ok());
  }
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(table.pending(), 0u);
}

TEST(HandleTable, CompletedBeforeTheWaitReturnsAtOnce) {
  HandleTable table;
  const int64_t h = table.Create();
  table.CompleteAll({h});
  EXPECT_TRUE(table.Poll(h));
  EXPECT_TRUE(table.Wait(h, Deadline::AfterSeconds(0)).ok());
  EXPECT_TRUE(table.Take(h).status.ok());
  EXPECT_THROW(table.Take(h), Error);  // taken: the handle is gone
}

TEST(HandleTable, WaitTimesOutWhilePending) {
  HandleTable table;
  const int64_t h = table.Create();
  Status s = table.Wait(h, Deadline::AfterSeconds(0.01));
  EXPECT_EQ(s.code(), StatusCode::kTimeout);
  EXPECT_FALSE(table.Poll(h));  // still pending, still valid
}

}  // namespace
