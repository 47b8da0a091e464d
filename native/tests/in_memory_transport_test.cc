// Tests of InMemoryFabric against the Transport contract (transport/transport.h): matching in
// either order, exact sizes, one message per key, ordered control messages, a killed rank,
// abort (local and by control message), blocking waits, and many threads at once.
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include <gtest/gtest.h>
#include "runtime/fault_injector.h"
#include "transport/completion.h"
#include "transport/in_memory_transport.h"

using namespace herring;

namespace {

constexpr uint32_t kAbortType = 6;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

Status WaitBriefly(const CompletionPtr& c) { return c->Wait(Deadline::AfterSeconds(5)); }

std::vector<uint8_t> Pattern(size_t bytes, uint8_t seed) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

}  // namespace

TEST(InMemoryTransport, DeliversWhicheverSideIsPostedFirst) {
  InMemoryFabric fabric(3);
  Transport& a = fabric.endpoint(0);
  Transport& b = fabric.endpoint(2);
  EXPECT_EQ(b.rank(), 2);
  EXPECT_EQ(b.size(), 3);
  const auto before = Clock::now();
  // Receive posted first: the send copies straight into it.
  std::vector<uint8_t> sent = Pattern(1000, 1), got(1000, 0);
  CompletionPtr recv = b.Recv(0, 11, got.data(), got.size());
  EXPECT_FALSE(recv->done());
  CompletionPtr send = a.Send(2, 11, sent.data(), sent.size());
  ASSERT_TRUE(WaitBriefly(recv).ok());
  ASSERT_TRUE(WaitBriefly(send).ok());
  EXPECT_EQ(got, sent);
  EXPECT_TRUE(recv->finished_at() >= before);
  // Data first: buffered, and the sender's buffer is free at once.
  std::vector<uint8_t> early = Pattern(333, 9), landed(333, 0);
  send = a.Send(2, 12, early.data(), early.size());
  EXPECT_TRUE(send->done());
  std::fill(early.begin(), early.end(), 0);  // must not reach the receiver
  ASSERT_TRUE(WaitBriefly(b.Recv(0, 12, landed.data(), landed.size())).ok());
  EXPECT_EQ(landed, Pattern(333, 9));
  // Zero bytes, and a rank sending to itself.
  EXPECT_TRUE(WaitBriefly(a.Send(2, 13, nullptr, 0)).ok());
  EXPECT_TRUE(WaitBriefly(b.Recv(0, 13, nullptr, 0)).ok());
  int mine = 42, back = 0;
  CompletionPtr self_recv = a.Recv(0, 14, &back, sizeof back);
  EXPECT_TRUE(WaitBriefly(a.Send(0, 14, &mine, sizeof mine)).ok());
  EXPECT_TRUE(WaitBriefly(self_recv).ok());
  EXPECT_EQ(back, 42);
}

TEST(InMemoryTransport, SizeMismatchFailsTheReceiveNamingPeerTagAndBothSizes) {
  InMemoryFabric fabric(2);
  Transport& a = fabric.endpoint(0);
  Transport& b = fabric.endpoint(1);
  uint8_t buf[16] = {};
  // Receive first, then a shorter message.
  CompletionPtr recv = b.Recv(0, 7, buf, 8);
  EXPECT_TRUE(WaitBriefly(a.Send(1, 7, buf, 4)).ok());  // the sender is not told
  Status s = WaitBriefly(recv);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "rank 1: size mismatch receiving tag 7 from rank 0: expected 8 bytes but rank 0 sent 4 bytes");
  // Data first, then a receive of the wrong size: the same text, and the message is dropped.
  a.Send(1, 8, buf, 16);
  s = WaitBriefly(b.Recv(0, 8, buf, 2));
  EXPECT_EQ(s.message(), "rank 1: size mismatch receiving tag 8 from rank 0: expected 2 bytes but rank 0 sent 16 bytes");
  CompletionPtr again = b.Recv(0, 8, buf, 16);
  EXPECT_FALSE(again->done());
}

TEST(InMemoryTransport, OneMessagePerKeyAndDirection) {
  InMemoryFabric fabric(2);
  Transport& a = fabric.endpoint(0);
  Transport& b = fabric.endpoint(1);
  int x = 1;
  ASSERT_TRUE(WaitBriefly(a.Send(1, 5, &x, sizeof x)).ok());
  Status twice = WaitBriefly(a.Send(1, 5, &x, sizeof x));
  EXPECT_EQ(twice.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(twice.message(), "a send to rank 1 with tag 5 is already in flight"));
  // The other direction with the same tag is another key.
  EXPECT_TRUE(WaitBriefly(b.Send(0, 5, &x, sizeof x)).ok());
  int y = 0;
  CompletionPtr first = b.Recv(0, 6, &y, sizeof y);
  Status second = WaitBriefly(b.Recv(0, 6, &y, sizeof y));
  EXPECT_EQ(second.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(second.message(), "a receive of tag 6 from rank 0 is already posted"));
  EXPECT_FALSE(first->done());
  Status outside = WaitBriefly(a.Send(2, 1, &x, sizeof x));
  EXPECT_EQ(outside.message(), "Send to/from rank 2 outside a job of size 2");
}

TEST(InMemoryTransport, ControlMessagesArriveInOrderPerSender) {
  constexpr int kRanks = 4, kMessages = 200;
  InMemoryFabric fabric(kRanks);
  std::vector<std::thread> senders;
  for (int r = 1; r < kRanks; ++r) {
    senders.emplace_back([&, r] {
      for (int i = 0; i < kMessages; ++i) fabric.endpoint(r).SendControl(0, 100 + r, std::to_string(i));
    });
  }
  for (auto& t : senders) t.join();
  std::vector<int> next(kRanks, 0);
  ControlMessage m;
  int popped = 0;
  while (fabric.endpoint(0).PopControl(&m)) {
    ASSERT_EQ(m.type, static_cast<uint32_t>(100 + m.from));
    ASSERT_EQ(m.payload, std::to_string(next[m.from]));
    ++next[m.from];
    ++popped;
  }
  EXPECT_EQ(popped, (kRanks - 1) * kMessages);
  EXPECT_FALSE(fabric.endpoint(1).PopControl(&m));
}

TEST(InMemoryTransport, KilledRankFailsPendingAndLaterTransfersNamingIt) {
  InMemoryFabric fabric(3);
  Transport& survivor = fabric.endpoint(0);
  Transport& victim = fabric.endpoint(2);
  int delivered = 7, buf = 0, other = 0;
  victim.Send(0, 1, &delivered, sizeof delivered);  // fully received before the crash
  CompletionPtr pending = survivor.Recv(2, 2, &buf, sizeof buf);
  CompletionPtr unrelated = survivor.Recv(1, 2, &other, sizeof other);
  CompletionPtr victims_own = victim.Recv(1, 3, &buf, sizeof buf);
  fabric.Kill(2);
  Status s = WaitBriefly(pending);
  EXPECT_EQ(s.code(), StatusCode::kPeerLost);
  EXPECT_EQ(s.message().rfind("rank 2: ", 0), 0u) << s.message();
  EXPECT_EQ(WaitBriefly(victims_own).code(), StatusCode::kShutdown);
  EXPECT_FALSE(unrelated->done());  // transfers with live ranks go on
  EXPECT_EQ(WaitBriefly(survivor.Send(2, 4, &buf, sizeof buf)).code(), StatusCode::kPeerLost);
  EXPECT_EQ(WaitBriefly(survivor.Recv(2, 5, &buf, sizeof buf)).code(), StatusCode::kPeerLost);
  int kept = 0;
  EXPECT_TRUE(WaitBriefly(survivor.Recv(2, 1, &kept, sizeof kept)).ok());
  EXPECT_EQ(kept, 7);
  EXPECT_EQ(survivor.PeerStatus(2).code(), StatusCode::kPeerLost);
  EXPECT_TRUE(survivor.PeerStatus(1).ok());
  EXPECT_EQ(survivor.FirstFailure().code(), StatusCode::kPeerLost);
  EXPECT_EQ(fabric.endpoint(1).FirstFailure().code(), StatusCode::kPeerLost);
  // A dead rank says nothing and hears nothing.
  victim.SendControl(0, 9, "ghost");
  survivor.SendControl(2, 9, "hello?");
  ControlMessage m;
  EXPECT_FALSE(survivor.PopControl(&m));
  EXPECT_FALSE(victim.PopControl(&m));
  EXPECT_EQ(WaitBriefly(victim.Send(1, 6, &buf, sizeof buf)).code(), StatusCode::kShutdown);
}

TEST(InMemoryTransport, ResetConnectionsThroughTheFaultInjectorIsACrash) {
  InMemoryFabric fabric(2);
  int buf = 0;
  CompletionPtr pending = fabric.endpoint(0).Recv(1, 1, &buf, sizeof buf);
  FaultInjector faults("reset:push:1", 1);
  faults.At("pull", &fabric.endpoint(1));  // not its phase
  EXPECT_FALSE(pending->done());
  faults.At("push", &fabric.endpoint(1));
  Status s = WaitBriefly(pending);
  EXPECT_EQ(s.code(), StatusCode::kPeerLost);
  EXPECT_TRUE(Contains(s.message(), "rank 1: killed"));
}

TEST(InMemoryTransport, AbortFailsTransfersButControlStillFlows) {
  InMemoryFabric fabric(2);
  Transport& a = fabric.endpoint(0);
  Transport& b = fabric.endpoint(1);
  int buf = 0;
  CompletionPtr pending = a.Recv(1, 1, &buf, sizeof buf);
  a.Abort(Status::Aborted("rank 0: the job failed: bad shapes"));
  EXPECT_EQ(WaitBriefly(pending).message(), "rank 0: the job failed: bad shapes");
  EXPECT_EQ(WaitBriefly(a.Send(1, 2, &buf, sizeof buf)).message(), "rank 0: the job failed: bad shapes");
  a.Abort(Status::Aborted("a later reason"));  // the first reason stays
  EXPECT_EQ(WaitBriefly(a.Recv(1, 3, &buf, sizeof buf)).message(), "rank 0: the job failed: bad shapes");
  a.SendControl(1, 9, "why");
  ControlMessage m;
  ASSERT_TRUE(b.PopControl(&m));
  EXPECT_EQ(m.payload, "why");
  EXPECT_TRUE(b.FirstFailure().ok());  // type 9 is no abort message on this fabric
}

TEST(InMemoryTransport, AbortControlMessageStopsTheReceiversTransfers) {
  InMemoryFabric fabric(InMemoryFabricOptions{3, kAbortType});
  int buf = 0;
  CompletionPtr waiting = fabric.endpoint(1).Recv(2, 1, &buf, sizeof buf);
  fabric.endpoint(0).SendControl(1, kAbortType, "rank 2: killed");
  Status s = WaitBriefly(waiting);
  EXPECT_EQ(s.code(), StatusCode::kAborted);
  EXPECT_EQ(s.message(), "rank 0 aborted the job: rank 2: killed");
  EXPECT_EQ(fabric.endpoint(1).FirstFailure().message(), s.message());
  ControlMessage m;
  ASSERT_TRUE(fabric.endpoint(1).PopControl(&m));  // still delivered, for the engine to read
  EXPECT_EQ(m.from, 0);
  EXPECT_TRUE(fabric.endpoint(2).FirstFailure().ok());
}

TEST(InMemoryTransport, WaitBlocksUntilTheSenderComesOrTheDeadline) {
  InMemoryFabric fabric(2);
  int got = 0;
  CompletionPtr recv = fabric.endpoint(1).Recv(0, 1, &got, sizeof got);
  EXPECT_EQ(recv->Wait(Deadline::After(std::chrono::milliseconds(30))).code(), StatusCode::kTimeout);
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the stimulus, not a sync
    int v = 99;
    fabric.endpoint(0).Send(1, 1, &v, sizeof v);
  });
  EXPECT_TRUE(recv->Wait(Deadline::AfterSeconds(5)).ok());
  sender.join();
  EXPECT_EQ(got, 99);
}

TEST(InMemoryTransport, DestroyingTheFabricFailsWhatIsPending) {
  CompletionPtr orphan;
  int buf = 0;
  {
    InMemoryFabric fabric(2);
    orphan = fabric.endpoint(0).Recv(1, 1, &buf, sizeof buf);
  }
  EXPECT_EQ(WaitBriefly(orphan).code(), StatusCode::kShutdown);
}

TEST(InMemoryTransport, ManyThreadsExchangeWithEveryone) {
  // Every rank sends every other rank (itself included) kRounds messages of varying sizes,
  // receives posted in the opposite order so both sides of the matching get exercised.
  constexpr int kRanks = 4, kRounds = 50;
  InMemoryFabric fabric(kRanks);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int me = 0; me < kRanks; ++me) {
    threads.emplace_back([&, me] {
      Transport& t = fabric.endpoint(me);
      std::vector<std::vector<uint8_t>> out, in;
      std::vector<CompletionPtr> transfers;
      for (int round = kRounds - 1; round >= 0; --round) {
        for (int peer = 0; peer < kRanks; ++peer) {
          in.push_back(std::vector<uint8_t>(1 + (peer * 31 + me * 17 + round) % 4096));
          transfers.push_back(t.Recv(peer, round, in.back().data(), in.back().size()));
        }
      }
      for (int round = 0; round < kRounds; ++round) {
        for (int peer = 0; peer < kRanks; ++peer) {
          out.push_back(Pattern(1 + (me * 31 + peer * 17 + round) % 4096, static_cast<uint8_t>(me + round)));
          transfers.push_back(t.Send(peer, round, out.back().data(), out.back().size()));
        }
      }
      if (!WaitAll(transfers, Deadline::AfterSeconds(20)).ok()) ++wrong;
      size_t k = 0;
      for (int round = kRounds - 1; round >= 0; --round) {
        for (int peer = 0; peer < kRanks; ++peer, ++k) {
          if (in[k] != Pattern(in[k].size(), static_cast<uint8_t>(peer + round))) ++wrong;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}
