// Tests of ShmBitsExchange: the AND of the posted vectors, the inputs posted beside them,
// which count only when every rank posted one for the same position and size, and the CPUs the
// vectors record, which move a rank off a CPU another rank runs on. The ranks are
// threads of this process (the exchange is shared memory either way; shm_arena_test covers the
// separate processes).
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/cpus.h"
#include "common/deadline.h"
#include "common/status.h"
#include "engine/shm_bits_exchange.h"
#include <gtest/gtest.h>

using namespace herring;

namespace {

constexpr size_t kWords = 2;

// Attaches `n` ranks (each attach waits for the others, so they attach on threads).
std::vector<std::unique_ptr<ShmBitsExchange>> AttachRanks(int n, const std::string& tag) {
  const std::string name = "/herring.test." + std::to_string(getpid()) + ".bits." + tag;
  std::vector<std::unique_ptr<ShmBitsExchange>> ranks(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      ranks[r] = ShmBitsExchange::Attach(name, r, n, Deadline::AfterSeconds(10), [] { return Status::OK(); });
    });
  }
  for (auto& t : threads) t.join();
  return ranks;
}

// Rank r posts {bits[r], ~0}; with an input of `bytes[r]` bytes (0: none) for `positions[r]`,
// whose bytes are all r + 1.
void PostAll(std::vector<std::unique_ptr<ShmBitsExchange>>& ranks, uint64_t cycle, const std::vector<uint64_t>& bits,
             const std::vector<uint32_t>& positions, const std::vector<uint32_t>& bytes) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::vector<uint64_t> mine{bits[r], ~uint64_t{0}};
    if (bytes[r] == 0) {
      ranks[r]->Post(cycle, mine);
    } else {
      std::memset(ranks[r]->InputArea(cycle, kWords), static_cast<int>(r + 1), bytes[r]);
      ranks[r]->PostWithInput(cycle, mine, positions[r], bytes[r]);
    }
  }
}

// Confines the calling thread to `cpus` (pid 0: this thread); the kernel moves it at once.
void Confine(const cpu_set_t& cpus) { ASSERT_EQ(sched_setaffinity(0, sizeof(cpus), &cpus), 0); }

cpu_set_t Only(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return set;
}

cpu_set_t MaskNow() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  return set;
}

std::vector<uint64_t> And(ShmBitsExchange& rank, uint64_t cycle) {
  std::vector<uint64_t> agreed;
  Status s = rank.AwaitAnd(cycle, kWords, Deadline::AfterSeconds(5), &agreed);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return agreed;
}

}  // namespace

TEST(ShmBitsExchange, EveryRankAndsTheSameVectors) {
  auto ranks = AttachRanks(3, "and");
  PostAll(ranks, 1, {0b1110, 0b0111, 0b1111}, {0, 0, 0}, {0, 0, 0});
  for (auto& rank : ranks) EXPECT_EQ(And(*rank, 1), (std::vector<uint64_t>{0b0110, ~uint64_t{0}}));
}

// Inputs of 4 KiB and of 64 KiB (the default HERRING_SMALL_MESSAGE_BYTES), in both halves.
TEST(ShmBitsExchange, InputsCountWhenEveryRankPostedOneForTheSamePosition) {
  auto ranks = AttachRanks(3, "inputs");
  uint64_t cycle = 0;
  for (uint32_t size : {4096u, 65536u, 65536u, 4096u}) {
    ++cycle;
    PostAll(ranks, cycle, {1, 1, 1}, {5, 5, 5}, {size, size, size});
    for (auto& rank : ranks) {
      And(*rank, cycle);
      uint32_t position = 0;
      std::vector<const void*> inputs;
      ASSERT_TRUE(rank->EveryonePostedInput(cycle, kWords, &position, &inputs));
      EXPECT_EQ(position, 5u);
      ASSERT_EQ(inputs.size(), 3u);
      for (int r = 0; r < 3; ++r) {  // by rank: rank r's bytes
        const auto* bytes = static_cast<const uint8_t*>(inputs[r]);
        EXPECT_EQ(bytes[0], r + 1);
        EXPECT_EQ(bytes[size - 1], r + 1);
      }
    }
  }
}

TEST(ShmBitsExchange, InputsAreIgnoredUnlessAllAgree) {
  auto ranks = AttachRanks(3, "disagree");
  uint32_t position = 0;
  std::vector<const void*> inputs;
  // One rank posted no input.
  PostAll(ranks, 1, {1, 1, 1}, {5, 5, 0}, {64, 64, 0});
  And(*ranks[0], 1);
  EXPECT_FALSE(ranks[0]->EveryonePostedInput(1, kWords, &position, &inputs));
  // Another position.
  PostAll(ranks, 2, {1, 1, 1}, {5, 6, 5}, {64, 64, 64});
  And(*ranks[1], 2);
  EXPECT_FALSE(ranks[1]->EveryonePostedInput(2, kWords, &position, &inputs));
  // Another size.
  PostAll(ranks, 3, {1, 1, 1}, {5, 5, 5}, {64, 64, 128});
  And(*ranks[2], 3);
  EXPECT_FALSE(ranks[2]->EveryonePostedInput(3, kWords, &position, &inputs));
  // Cycle 5 reuses cycle 3's half: a plain post there says "no input", whatever cycle 3 left.
  PostAll(ranks, 4, {1, 1, 1}, {5, 5, 5}, {64, 64, 64});
  And(*ranks[0], 4);
  EXPECT_TRUE(ranks[0]->EveryonePostedInput(4, kWords, &position, &inputs));
  const std::vector<const void*> cycle4 = inputs;
  PostAll(ranks, 5, {1, 1, 1}, {0, 0, 0}, {0, 0, 0});
  And(*ranks[0], 5);
  PostAll(ranks, 6, {1, 1, 1}, {0, 0, 0}, {0, 0, 0});  // cycle 6 reuses cycle 4's half
  And(*ranks[0], 6);
  EXPECT_FALSE(ranks[0]->EveryonePostedInput(5, kWords, &position, &inputs));
  EXPECT_FALSE(ranks[0]->EveryonePostedInput(6, kWords, &position, &inputs));
  // A refusal leaves the outputs as they were (never a half-filled list of inputs).
  PostAll(ranks, 7, {1, 1, 1}, {5, 5, 0}, {64, 64, 0});
  And(*ranks[0], 7);
  EXPECT_FALSE(ranks[0]->EveryonePostedInput(7, kWords, &position, &inputs));
  EXPECT_EQ(inputs, cycle4);
  EXPECT_EQ(position, 5u);
}

TEST(ShmBitsExchange, InputCapacityLeavesRoomForTheVectorAndItsHeader) {
  EXPECT_TRUE(ShmBitsExchange::Fits(kWords));
  const size_t capacity = ShmBitsExchange::InputCapacity(kWords);
  // An input of the default HERRING_SMALL_MESSAGE_BYTES (64 KiB) fits beside a few words.
  EXPECT_GE(capacity, size_t{64 << 10});
  EXPECT_LT(capacity, size_t{96 << 10});
  EXPECT_GT(ShmBitsExchange::InputCapacity(kWords), ShmBitsExchange::InputCapacity(1000));
}

// The hierarchical plane: a host's ranks (global ranks 4, 5, 7) AND in shared memory, the leader
// posts the job's result, the others read it for that cycle, both halves in turn. Cycles 1 and 2
// carry a total beside the result (the largest that fits, then a small one); 3 and 4 reuse those
// halves without one, and the others must not read the old totals.
TEST(ShmBitsExchange, HostLeaderPostsTheResultTheOthersRead) {
  const std::string name = "/herring.test." + std::to_string(getpid()) + ".bits.host";
  const std::vector<int> members{4, 5, 7};
  std::vector<std::unique_ptr<ShmBitsExchange>> ranks(3);
  std::vector<std::thread> threads;
  for (int l = 0; l < 3; ++l) {
    threads.emplace_back([&, l] {
      ranks[l] = ShmBitsExchange::AttachHost(name, l, members, kWords, Deadline::AfterSeconds(10),
                                             [] { return Status::OK(); });
    });
  }
  for (auto& t : threads) t.join();
  for (uint64_t cycle = 1; cycle <= 4; ++cycle) {
    PostAll(ranks, cycle, {0b1110, 0b0111, 0b1111}, {0, 0, 0}, {0, 0, 0});
    EXPECT_EQ(And(*ranks[0], cycle), (std::vector<uint64_t>{0b0110, ~uint64_t{0}}));
    const std::vector<uint64_t> job{cycle, 0b0010};  // what the other hosts made of it
    std::vector<uint64_t> seen;
    // Not posted yet: the others time out, naming nothing wrong.
    EXPECT_EQ(ranks[1]->AwaitResult(cycle, kWords, Deadline::After(std::chrono::milliseconds(5)), &seen).code(),
              StatusCode::kTimeout);
    const uint32_t position = static_cast<uint32_t>(40 + cycle);
    const std::string total(cycle == 1 ? ShmBitsExchange::kMaxInputBytes : cycle == 2 ? 12 : 0,
                            static_cast<char>('a' + cycle));
    ranks[0]->PostResult(cycle, job, position, total.data(), static_cast<uint32_t>(total.size()));
    for (int l = 1; l < 3; ++l) {
      Status s = ranks[l]->AwaitResult(cycle, kWords, Deadline::AfterSeconds(5), &seen);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(seen, job);
      uint32_t p = 0, bytes = 0;
      const uint8_t* theirs = ranks[l]->ResultTotal(cycle, kWords, &p, &bytes);
      if (total.empty()) {
        EXPECT_EQ(theirs, nullptr) << "cycle " << cycle;
      } else {
        ASSERT_NE(theirs, nullptr) << "cycle " << cycle;
        EXPECT_EQ(p, position);
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(theirs), bytes), total);
      }
    }
  }
  // A total larger than the result area holds is refused, not written past it.
  const std::string too_big(ShmBitsExchange::kMaxInputBytes + 1, 'x');
  EXPECT_THROW(ranks[0]->PostResult(5, {5, 0}, 1, too_big.data(), static_cast<uint32_t>(too_big.size())), Error);
  // A leader that failed poisons the host: the others' wait ends with its reason.
  ranks[0]->Poison("rank 9 was lost");
  std::vector<uint64_t> seen;
  Status s = ranks[2]->AwaitResult(5, kWords, Deadline::AfterSeconds(5), &seen);
  EXPECT_NE(s.message().find("rank 9 was lost"), std::string::npos) << s.ToString();
}

// Both ranks' vectors of cycle 1 say CPU a (the ranks are this thread, confined there while it
// posts them). Before rank 0 posts cycle 2 its thread sits on a with its whole mask: it moves to
// another CPU of the mask and keeps the mask. Where the mask has no other CPU, within
// kMoveInterval of the last move, or where the peer's newest vector says another CPU, it stays.
//
// Once the thread has its whole mask back the scheduler may move it at any moment, and a loaded
// machine does now and then (as it may let more than kMoveInterval pass between two calls): an
// attempt whose readings show that is tried again, and a check passes only on an attempt that
// was not disturbed. A wrong decision is never mistaken for a disturbed attempt: each is either
// asserted at once or leaves no attempt passing.
TEST(ShmBitsExchange, ARankOnThePeersCpuMovesToAFreeOneOfItsMaskAndKeepsTheMask) {
  using Clock = std::chrono::steady_clock;
  constexpr int kAttempts = 50;
  const cpu_set_t mask = MaskNow();
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &mask)) cpus.push_back(c);
  }
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs in this thread's mask";
  const int a = cpus[0], b = cpus[1];
  const auto past_interval = [] { std::this_thread::sleep_for(ShmBitsExchange::kMoveInterval * 2); };
  // On a with the whole mask, as far as this thread can tell.
  const auto on_a_with_the_mask = [&] {
    Confine(Only(a));
    Confine(mask);
    return CurrentCpu() == a;
  };
  auto ranks = AttachRanks(2, "spread");
  Confine(Only(a));
  PostAll(ranks, 1, {1, 1}, {0, 0}, {0, 0});
  for (auto& rank : ranks) And(*rank, 1);

  // Confined to a, shared with rank 1: nowhere to go, and the mask is left alone.
  EXPECT_FALSE(ranks[0]->MoveOffSharedCpu(2, kWords));
  EXPECT_EQ(CurrentCpu(), a);
  cpu_set_t now = MaskNow();
  const cpu_set_t only_a = Only(a);
  EXPECT_TRUE(CPU_EQUAL(&now, &only_a));

  // On a with the whole mask: it moves, and gets the whole mask back. Back on a within the
  // interval: not moved again.
  bool moved_and_stayed = false;
  for (int attempt = 0; attempt < kAttempts && !moved_and_stayed; ++attempt) {
    past_interval();
    if (!on_a_with_the_mask()) continue;
    const auto before_move = Clock::now();
    const bool moved = ranks[0]->MoveOffSharedCpu(2, kWords);
    const int after = CurrentCpu();
    now = MaskNow();
    EXPECT_TRUE(CPU_EQUAL(&now, &mask)) << "the thread's whole mask was not given back";
    if (!moved && after != a) continue;  // the scheduler moved it off a before the call looked
    ASSERT_TRUE(moved) << "on the peer's CPU " << a << " with another free in its mask, it stayed";
    if (after == a) continue;  // moved, then the scheduler put it back on a
    if (!on_a_with_the_mask()) continue;
    const bool moved_again = ranks[0]->MoveOffSharedCpu(2, kWords);
    if (Clock::now() - before_move >= ShmBitsExchange::kMoveInterval) continue;
    EXPECT_FALSE(moved_again) << "moved twice within kMoveInterval";
    moved_and_stayed = true;
  }
  EXPECT_TRUE(moved_and_stayed) << "no undisturbed attempt in " << kAttempts;

  // Rank 1 posted cycle 2 from b: its newest vector counts, and a is nobody else's.
  Confine(Only(b));
  ranks[1]->Post(2, {1, ~uint64_t{0}});
  bool stayed = false;
  for (int attempt = 0; attempt < kAttempts && !stayed; ++attempt) {
    past_interval();
    if (!on_a_with_the_mask()) continue;
    // Moved: a bug, or the scheduler put it on b (rank 1's) before the call looked; only an
    // attempt that stays on a passes.
    stayed = !ranks[0]->MoveOffSharedCpu(2, kWords) && CurrentCpu() == a;
  }
  EXPECT_TRUE(stayed) << "it left a, which no peer's newest vector names, in each of " << kAttempts << " attempts";
  Confine(mask);
}
