// Lazy connections (TransportOptions::lazy_connections, HERRING_CONNECTIONS=lazy): a pair of
// ranks connects on first use, in either direction, with the mesh's handshake; a pair used from
// both sides at once ends with one connection; a peer that cannot be reached or authenticated
// fails the transfers with it, naming it, at the connect deadline; a connected peer that dies is
// still lost at once.
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/deadline.h"
#include "common/status.h"
#include "transport/completion.h"
#include "transport/tcp_transport.h"

using namespace herring;

namespace {

constexpr uint64_t kToken = 0x1a2b3c4d;

TransportOptions LazyOptions(int rank, int size, int streams = 2) {
  TransportOptions o;
  o.rank = rank;
  o.size = size;
  o.data_streams = streams;
  o.job_token = kToken;
  o.secret = "lazy test secret";
  o.peer_timeout_seconds = 30;
  o.lazy_connections = true;
  o.connect_timeout_seconds = 10;
  return o;
}

// n lazy transports on 127.0.0.1; ConnectMesh returns at once (nothing is dialed).
std::vector<std::unique_ptr<TcpTransport>> MakeLazy(int n, int streams = 2, const std::string& odd_secret = "") {
  std::vector<std::unique_ptr<TcpTransport>> t;
  std::vector<Endpoint> endpoints;
  for (int r = 0; r < n; ++r) {
    TransportOptions o = LazyOptions(r, n, streams);
    if (!odd_secret.empty() && r == n - 1) o.secret = odd_secret;
    o.connect_timeout_seconds = odd_secret.empty() ? 10 : 1;
    t.push_back(std::make_unique<TcpTransport>(o));
    endpoints.push_back(t.back()->listen_endpoint());
  }
  for (auto& x : t) x->ConnectMesh(endpoints, Deadline::AfterSeconds(10));
  return t;
}

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

// Sends `bytes` from a to b with `tag` and checks they arrive intact.
void Transfer(TcpTransport& a, TcpTransport& b, uint64_t tag, size_t bytes) {
  auto sent = Bytes(bytes, static_cast<uint8_t>(tag));
  std::vector<uint8_t> got(bytes);
  CompletionPtr s = a.Send(b.rank(), tag, sent.data(), bytes);
  CompletionPtr r = b.Recv(a.rank(), tag, got.data(), bytes);
  Status ss = s->Wait(Deadline::AfterSeconds(10)), rs = r->Wait(Deadline::AfterSeconds(10));
  ASSERT_TRUE(ss.ok()) << ss.message();
  ASSERT_TRUE(rs.ok()) << rs.message();
  EXPECT_EQ(0, std::memcmp(sent.data(), got.data(), bytes)) << "rank " << a.rank() << " -> " << b.rank();
}

bool PopWithin(TcpTransport& t, ControlMessage* m, double seconds) {
  Deadline d = Deadline::AfterSeconds(seconds);
  while (!d.Expired()) {
    if (t.PopControl(m)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

}  // namespace

TEST(LazyConnections, PairsConnectOnFirstUseInEitherDirection) {
  const int streams = 2;
  auto t = MakeLazy(4, streams);
  for (auto& x : t) EXPECT_EQ(0u, x->stats().open_sockets) << "rank " << x->rank() << " connected before any use";
  Transfer(*t[0], *t[3], 1, 3 << 20);  // the lower rank first: it asks rank 3 to dial
  Transfer(*t[3], *t[1], 2, 1000);     // the higher rank first: it dials
  t[2]->SendControl(0, 7, "hello from 2");
  ControlMessage m;
  ASSERT_TRUE(PopWithin(*t[0], &m, 10));
  EXPECT_EQ(2, m.from);
  EXPECT_EQ("hello from 2", m.payload);
  Transfer(*t[3], *t[0], 3, 10);  // the pair connected above: reused
  const uint64_t per_peer = streams + 1;
  EXPECT_EQ(2u, t[0]->stats().connected_peers);  // 3 and 2
  EXPECT_EQ(2 * per_peer, t[0]->stats().open_sockets);
  EXPECT_EQ(1u, t[1]->stats().connected_peers);  // 3
  EXPECT_EQ(1u, t[2]->stats().connected_peers);  // 0
  EXPECT_EQ(2u, t[3]->stats().connected_peers);  // 0 and 1
  for (int a = 0; a < 4; ++a) {
    for (int b = 0; b < 4; ++b) EXPECT_TRUE(t[a]->PeerStatus(b).ok()) << a << " sees " << b;
  }
  for (auto& x : t) x->Close();
}

TEST(LazyConnections, BothSidesAtOnceMakeOneConnection) {
  for (int round = 0; round < 20; ++round) {
    auto t = MakeLazy(2, 1);
    auto a = Bytes(5000, 1), b = Bytes(5000, 2);
    std::vector<uint8_t> got_a(5000), got_b(5000);
    // Both ranks need each other at the same moment: 1 dials, 0 asks 1 to dial.
    CompletionPtr r0 = t[0]->Recv(1, 9, got_b.data(), got_b.size());
    CompletionPtr r1 = t[1]->Recv(0, 9, got_a.data(), got_a.size());
    std::thread th([&] { t[1]->SendControl(0, 3, "x"); });
    CompletionPtr s0 = t[0]->Send(1, 9, a.data(), a.size());
    th.join();
    CompletionPtr s1 = t[1]->Send(0, 9, b.data(), b.size());
    for (auto* c : {&r0, &r1, &s0, &s1}) {
      Status s = (*c)->Wait(Deadline::AfterSeconds(10));
      ASSERT_TRUE(s.ok()) << "round " << round << ": " << s.message();
    }
    EXPECT_EQ(a, got_a);
    EXPECT_EQ(b, got_b);
    EXPECT_EQ(2u, t[0]->stats().open_sockets) << "round " << round;  // one control, one data stream
    EXPECT_EQ(2u, t[1]->stats().open_sockets) << "round " << round;
    for (auto& x : t) x->Close();
  }
}

TEST(LazyConnections, UnreachablePeerFailsNamingItAtTheDeadline) {
  TransportOptions o0 = LazyOptions(0, 2);
  o0.connect_timeout_seconds = 0.5;
  TcpTransport t0(o0);
  // Rank 1 listens but never runs ConnectMesh: nobody answers its hellos.
  TcpTransport t1(LazyOptions(1, 2));
  t0.ConnectMesh({t0.listen_endpoint(), t1.listen_endpoint()}, Deadline::AfterSeconds(10));
  std::vector<uint8_t> data(100);
  auto start = std::chrono::steady_clock::now();
  Status s = t0.Send(1, 1, data.data(), data.size())->Wait(Deadline::AfterSeconds(10));
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(StatusCode::kPeerLost, s.code()) << s.message();
  EXPECT_NE(std::string::npos, s.message().find("rank 1: could not connect within 0.5 s")) << s.message();
  EXPECT_LT(took, 5.0);
  EXPECT_EQ(StatusCode::kPeerLost, t0.PeerStatus(1).code());
  t0.Close();
  t1.Close();
}

TEST(LazyConnections, PeerWithoutTheSecretNeverConnects) {
  auto t = MakeLazy(2, 1, "a guess");  // rank 1 holds another secret; deadline 1 s
  std::vector<uint8_t> data(100);
  Status s = t[1]->Send(0, 1, data.data(), data.size())->Wait(Deadline::AfterSeconds(10));
  EXPECT_EQ(StatusCode::kPeerLost, s.code()) << s.message();
  EXPECT_NE(std::string::npos, s.message().find("rank 0: could not connect")) << s.message();
  EXPECT_NE(std::string::npos, s.message().find("could not prove it holds the job's secret")) << s.message();
  EXPECT_EQ(0u, t[0]->stats().open_sockets);
  for (auto& x : t) x->Close();
}

TEST(LazyConnections, ConnectedPeerThatCrashesIsLost) {
  auto t = MakeLazy(3, 1);
  Transfer(*t[2], *t[0], 1, 100);
  std::vector<uint8_t> got(100);
  CompletionPtr r = t[0]->Recv(2, 2, got.data(), got.size());
  t[2]->ResetConnections();  // as a crashed host looks to its peers
  Status s = r->Wait(Deadline::AfterSeconds(5));
  EXPECT_EQ(StatusCode::kPeerLost, s.code()) << s.message();
  EXPECT_NE(std::string::npos, s.message().find("rank 2: connection closed")) << s.message();
  EXPECT_TRUE(t[0]->PeerStatus(1).ok());  // never connected: not lost
  for (auto& x : t) x->Close();
}
