// Tests of the TCP transport: frame codec, completions, mesh building, bulk and control traffic,
// failure handling (closed, killed, silent and misbehaving peers, strangers), abort and close.
// Several transports run in one process on 127.0.0.1; a raw-socket peer plays the misbehaving
// ones, and fork() provides peers whose process really dies.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include <gtest/gtest.h>
#include "transport/completion.h"
#include "transport/frame.h"
#include "transport/tcp_mesh.h"
#include "transport/tcp_transport.h"

using namespace herring;

namespace {

constexpr uint64_t kToken = 0x5EED5EEDull;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Polls a condition that has no notification of its own (transport statistics), briefly sleeping
// between checks, up to `seconds`.
bool PollUntil(const std::function<bool()>& condition, double seconds) {
  Deadline deadline = Deadline::AfterSeconds(seconds);
  while (!condition()) {
    if (deadline.Expired()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Counts on_event calls and lets a test wait for a condition re-checked after each one.
class EventSignal {
 public:
  void Fire() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++count_;
    }
    cv_.notify_all();
  }
  int count() {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }
  bool WaitForCount(int n, double seconds) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return count_ >= n; });
  }
  bool WaitFor(const std::function<bool()>& condition, double seconds) {
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(seconds));
    std::unique_lock<std::mutex> lock(mu_);
    while (!condition()) {
      if (Clock::now() >= deadline) return false;
      // The periodic re-check only guards against a missed event; events normally wake us.
      cv_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(50)));
    }
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;
};

TransportOptions Options(int rank, int size, int streams = 2, size_t chunk = 1 << 20) {
  TransportOptions o;
  o.rank = rank;
  o.size = size;
  o.data_streams = streams;
  o.chunk_bytes = chunk;
  o.job_token = kToken;
  o.peer_timeout_seconds = 30;
  return o;
}

struct Mesh {
  std::vector<std::unique_ptr<EventSignal>> events;
  std::vector<std::unique_ptr<TcpTransport>> t;
  TcpTransport& operator[](int r) { return *t[r]; }
  void Close() {
    for (auto& x : t) x->Close();
  }
};

// n transports on 127.0.0.1, connected from n threads. `tweak` adjusts each rank's options.
std::unique_ptr<Mesh> MakeMesh(int n, const std::function<void(TransportOptions*)>& tweak = {}) {
  auto mesh = std::make_unique<Mesh>();
  std::vector<Endpoint> endpoints;
  for (int r = 0; r < n; ++r) {
    mesh->events.push_back(std::make_unique<EventSignal>());
    TransportOptions o = Options(r, n);
    if (tweak) tweak(&o);
    EventSignal* sig = mesh->events.back().get();
    o.on_event = [sig] { sig->Fire(); };
    mesh->t.push_back(std::make_unique<TcpTransport>(o));
    endpoints.push_back(mesh->t.back()->listen_endpoint());
  }
  std::vector<std::thread> threads;
  std::vector<std::string> errors(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        mesh->t[r]->ConnectMesh(endpoints, Deadline::AfterSeconds(10));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int r = 0; r < n; ++r) {
    if (!errors[r].empty()) {
      std::fprintf(stderr, "  rank %d ConnectMesh: %s\n", r, errors[r].c_str());
      return nullptr;
    }
  }
  return mesh;
}

std::vector<uint8_t> Pattern(size_t bytes, uint32_t seed) {
  std::vector<uint8_t> v(bytes);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v[i] = static_cast<uint8_t>(x);
  }
  return v;
}

bool PopWithin(TcpTransport& t, EventSignal& sig, ControlMessage* out, double seconds) {
  return sig.WaitFor([&] { return t.PopControl(out); }, seconds);
}

Status WaitOne(const CompletionPtr& c, double seconds = 10) {
  return c->Wait(Deadline::AfterSeconds(seconds));
}

int CountOpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

// --- a hand-driven peer speaking the wire protocol over raw sockets ---

void SendAll(int fd, const void* data, size_t bytes) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL);
    if (n <= 0) return;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

// Reads exactly `bytes` (false on EOF, error or timeout).
bool RecvAll(int fd, void* data, size_t bytes, double seconds) {
  uint8_t* p = static_cast<uint8_t*>(data);
  Deadline deadline = Deadline::AfterSeconds(seconds);
  while (bytes > 0) {
    pollfd pfd{fd, POLLIN, 0};
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.Remaining()).count();
    if (poll(&pfd, 1, static_cast<int>(ms)) <= 0) return false;
    ssize_t n = recv(fd, p, bytes, 0);
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

int ConnectTo(const Endpoint& e) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(e.port);
  inet_pton(AF_INET, e.ip.c_str(), &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void SendHeader(int fd, const FrameHeader& h) {
  uint8_t bytes[kFrameHeaderBytes];
  EncodeFrameHeader(h, bytes);
  SendAll(fd, bytes, sizeof(bytes));
}

void SendFrame(int fd, FrameHeader h, const std::string& payload) {
  h.payload_bytes = static_cast<uint32_t>(payload.size());
  SendHeader(fd, h);
  SendAll(fd, payload.data(), payload.size());
}

const std::string kNonceA(kNonceBytes, 'a');  // the raw peer's nonces: fixed, it is a test double
const std::string kNonceB(kNonceBytes, 'b');

FrameHeader Hello(FrameKind kind, uint64_t token, int rank, int stream) {
  FrameHeader h;
  h.kind = kind;
  h.tag = token;
  h.offset = (static_cast<uint64_t>(rank) << 16) | static_cast<uint64_t>(stream);
  return h;
}

bool ReadFrame(int fd, FrameHeader* h, std::string* payload, double seconds) {
  uint8_t bytes[kFrameHeaderBytes];
  if (!RecvAll(fd, bytes, sizeof(bytes), seconds)) return false;
  if (!DecodeFrameHeader(bytes, h).ok()) return false;
  payload->assign(h->payload_bytes, '\0');
  return h->payload_bytes == 0 || RecvAll(fd, &(*payload)[0], h->payload_bytes, seconds);
}

class RawPeer {
 public:
  ~RawPeer() { CloseAll(); }

  // Dials every stream of `rank` to `e` and completes the handshake.
  bool Connect(const Endpoint& e, int rank, int streams, uint64_t token = kToken) {
    for (int s = 0; s < streams; ++s) {
      int fd = ConnectTo(e);
      if (fd < 0) return false;
      fds_.push_back(fd);
      FrameHeader hello = Hello(FrameKind::kHello, token, rank, s);
      SendFrame(fd, hello, kNonceA);
      FrameHeader ack;
      std::string payload;
      if (!ReadFrame(fd, &ack, &payload, 5) || ack.kind != FrameKind::kHelloAck) return false;
      std::string their_nonce = payload.substr(0, kNonceBytes);
      if (payload.substr(kNonceBytes) != HandshakeProof(secret_, "herring-ack|", kNonceA, their_nonce,
                                                        hello.offset, ack.offset, token)) {
        return false;
      }
      SendFrame(fd, Hello(FrameKind::kHelloProof, token, rank, s),
                HandshakeProof(secret_, "herring-proof|", their_nonce, kNonceA, hello.offset, ack.offset, token));
    }
    return true;
  }

  // Plays the acceptor: answers `streams` hellos arriving on a listening socket.
  bool AcceptFrom(int listen_fd, int streams, uint64_t token = kToken) {
    for (int s = 0; s < streams; ++s) {
      pollfd pfd{listen_fd, POLLIN, 0};
      if (poll(&pfd, 1, 10000) <= 0) return false;
      int fd = accept(listen_fd, nullptr, nullptr);
      if (fd < 0) return false;
      FrameHeader hello;
      std::string nonce;
      if (!ReadFrame(fd, &hello, &nonce, 5) || hello.kind != FrameKind::kHello) return false;
      FrameHeader ack = Hello(FrameKind::kHelloAck, token, 0, hello.offset & 0xffff);
      SendFrame(fd, ack, kNonceB + HandshakeProof(secret_, "herring-ack|", nonce, kNonceB, hello.offset,
                                                  ack.offset, token));
      FrameHeader proof;
      std::string mac;
      if (!ReadFrame(fd, &proof, &mac, 5) || proof.kind != FrameKind::kHelloProof ||
          mac != HandshakeProof(secret_, "herring-proof|", kNonceB, nonce, hello.offset, ack.offset, token)) {
        return false;
      }
      fds_.resize(std::max<size_t>(fds_.size(), (hello.offset & 0xffff) + 1), -1);
      fds_[hello.offset & 0xffff] = fd;
    }
    return true;
  }

  int fd(int stream) const { return fds_[stream]; }

  void SendData(int stream, uint64_t tag, uint64_t offset, uint64_t total, const uint8_t* data,
                size_t len) {
    FrameHeader h;
    h.kind = FrameKind::kData;
    h.tag = tag;
    h.offset = offset;
    h.total_bytes = total;
    h.payload_bytes = static_cast<uint32_t>(len);
    SendHeader(fds_[stream], h);
    SendAll(fds_[stream], data, len);
  }

  void CloseAll() {
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
    fds_.clear();
  }

 std::string secret_;  // what the transports under test use (Options() sets none)

 private:
  std::vector<int> fds_;
};

// A real transport as rank 0 of a 2-rank job whose rank 1 is a RawPeer.
struct RawPair {
  EventSignal events;
  std::unique_ptr<TcpTransport> t;
  RawPeer raw;
  bool ok = false;
};

// `before_dial`, if given, runs while the transport waits for its mesh, before rank 1 dials it.
std::unique_ptr<RawPair> MakeRawPair(int streams, double peer_timeout = 30, size_t chunk = 1 << 20,
                                     const std::function<void(const Endpoint&)>& before_dial = {}) {
  auto pair = std::make_unique<RawPair>();
  TransportOptions o = Options(0, 2, streams, chunk);
  o.peer_timeout_seconds = peer_timeout;
  EventSignal* sig = &pair->events;
  o.on_event = [sig] { sig->Fire(); };
  pair->t = std::make_unique<TcpTransport>(o);
  Endpoint e0 = pair->t->listen_endpoint();
  std::string error;
  std::thread connect([&] {
    try {
      pair->t->ConnectMesh({e0, Endpoint{"127.0.0.1", 1}}, Deadline::AfterSeconds(10));
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  if (before_dial) before_dial(e0);
  bool dialed = pair->raw.Connect(e0, 1, streams + 1);
  connect.join();
  pair->ok = dialed && error.empty();
  if (!error.empty()) std::fprintf(stderr, "  ConnectMesh: %s\n", error.c_str());
  return pair;
}

// Checks a Recv of `bytes` from `from` matches a Send of the same pattern.
bool TransferOk(TcpTransport& from, TcpTransport& to, uint64_t tag, size_t bytes, uint32_t seed,
                bool recv_first) {
  std::vector<uint8_t> data = Pattern(bytes, seed);
  std::vector<uint8_t> got(bytes, 0xEE);
  CompletionPtr r, s;
  if (recv_first) r = to.Recv(from.rank(), tag, got.data(), bytes);
  s = from.Send(to.rank(), tag, data.data(), bytes);
  if (!recv_first) {
    if (!WaitOne(s).ok()) return false;
    r = to.Recv(from.rank(), tag, got.data(), bytes);
  }
  Status ss = WaitOne(s), rs = WaitOne(r);
  if (!ss.ok() || !rs.ok()) {
    std::fprintf(stderr, "  transfer of %zu bytes: send %s, recv %s\n", bytes,
                 ss.ToString().c_str(), rs.ToString().c_str());
    return false;
  }
  return got == data;
}

// A transfer a rank makes to itself: its tag, size and pattern seed, and whether the receive is
// posted before the send.
struct SelfTransfer {
  uint64_t tag;
  size_t bytes;
  uint32_t seed;
  bool recv_first;
};

void ExpectSelfTransfersOk(TcpTransport& t, const std::vector<SelfTransfer>& transfers) {
  for (const SelfTransfer& x : transfers) {
    EXPECT_TRUE(TransferOk(t, t, x.tag, x.bytes, x.seed, x.recv_first)) << "tag " << x.tag << ", " << x.bytes << " bytes";
  }
}

// How a receive of `bytes` from `peer` with `tag`, posted on `receiver` before `event` runs,
// ends (waited for up to 5 s).
Status PendingRecvStatus(TcpTransport& receiver, int peer, uint64_t tag, size_t bytes,
                         const std::function<void()>& event) {
  std::vector<uint8_t> got(bytes);
  CompletionPtr r = receiver.Recv(peer, tag, got.data(), got.size());
  event();
  return WaitOne(r, 5);
}

// A socket bound to a free port of 127.0.0.1 that does not listen (yet), so that dials to it are
// refused; its fd (-1 when it could not be bound) and, in *endpoint, its address.
int BoundNotListening(Endpoint* endpoint) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *endpoint = Endpoint{"127.0.0.1", ntohs(addr.sin_port)};
  return fd;
}

// How ConnectMesh over `endpoints` failed within `seconds`: its status code (kOk when the mesh
// came up) and, in *message, what it said.
StatusCode ConnectMeshError(TcpTransport& t, const std::vector<Endpoint>& endpoints, double seconds,
                            std::string* message) {
  try {
    t.ConnectMesh(endpoints, Deadline::AfterSeconds(seconds));
  } catch (const Error& e) {
    *message = e.what();
    return e.status().code();
  }
  return StatusCode::kOk;
}

}  // namespace

// ------------------------------------------------------------------------------------------
// Frame codec

TEST(Transport, TransportFrameRoundTrip) {
  FrameHeader h;
  h.kind = FrameKind::kData;
  h.payload_bytes = 4096;
  h.tag = 0x0102030405060708ull;
  h.offset = 1 << 20;
  h.total_bytes = (1 << 20) + 4096;
  uint8_t bytes[kFrameHeaderBytes];
  EncodeFrameHeader(h, bytes);
  EXPECT_EQ(bytes[0], 0x47);  // little-endian magic "GNRH" on the wire
  EXPECT_EQ(bytes[16], 0x08);
  FrameHeader d;
  Status s = DecodeFrameHeader(bytes, &d);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(d.kind == FrameKind::kData);
  EXPECT_EQ(d.payload_bytes, 4096u);
  EXPECT_EQ(d.tag, h.tag);
  EXPECT_EQ(d.offset, h.offset);
  EXPECT_EQ(d.total_bytes, h.total_bytes);

  FrameHeader c;
  c.kind = FrameKind::kControl;
  c.tag = 7;
  c.payload_bytes = 100;
  EncodeFrameHeader(c, bytes);
  EXPECT_TRUE(DecodeFrameHeader(bytes, &d).ok());
  EXPECT_TRUE(d.kind == FrameKind::kControl);
  EXPECT_EQ(d.payload_bytes, 100u);
}

TEST(Transport, TransportFrameRejectsInvalidHeaders) {
  auto decode = [](const FrameHeader& h, std::function<void(uint8_t*)> corrupt = {}) {
    uint8_t bytes[kFrameHeaderBytes];
    EncodeFrameHeader(h, bytes);
    if (corrupt) corrupt(bytes);
    FrameHeader out;
    return DecodeFrameHeader(bytes, &out);
  };
  FrameHeader ping;
  EXPECT_TRUE(decode(ping).ok());
  EXPECT_TRUE(Contains(decode(ping, [](uint8_t* b) { b[0] ^= 1; }).message(), "bad magic"));
  EXPECT_TRUE(Contains(decode(ping, [](uint8_t* b) { b[4] = 9; }).message(), "wire version 9"));
  EXPECT_TRUE(
      Contains(decode(ping, [](uint8_t* b) { b[6] = 77; }).message(), "unknown frame kind"));
  EXPECT_TRUE(Contains(decode(ping, [](uint8_t* b) { b[7] = 1; }).message(), "reserved"));
  EXPECT_TRUE(Contains(decode(ping, [](uint8_t* b) { b[13] = 1; }).message(), "reserved"));

  FrameHeader p = ping;
  p.payload_bytes = 1;
  EXPECT_TRUE(Contains(decode(p).message(), "ping frame with a payload"));
  FrameHeader bye;
  bye.kind = FrameKind::kGoodbye;
  bye.tag = 3;
  EXPECT_TRUE(!decode(bye).ok());

  FrameHeader control;
  control.kind = FrameKind::kControl;
  control.payload_bytes = static_cast<uint32_t>(kMaxControlPayloadBytes);
  EXPECT_TRUE(Contains(decode(control).message(), "control payload"));

  FrameHeader data;
  data.kind = FrameKind::kData;
  data.total_bytes = 100;
  data.offset = 90;
  data.payload_bytes = 20;
  EXPECT_TRUE(Contains(decode(data).message(), "outside its message"));
  data.offset = ~0ull - 5;  // offset + payload would wrap around
  EXPECT_TRUE(!decode(data).ok());
  data.offset = 0;
  data.payload_bytes = 0;
  EXPECT_TRUE(Contains(decode(data).message(), "empty data chunk"));
  data.total_bytes = kMaxMessageBytes + 1;
  data.payload_bytes = 1;
  EXPECT_TRUE(Contains(decode(data).message(), "exceeds the limit"));
  data.total_bytes = kMaxMessageBytes;
  data.payload_bytes = static_cast<uint32_t>(kMaxChunkBytes + 1);
  EXPECT_TRUE(Contains(decode(data).message(), "data chunk of"));
  data.payload_bytes = static_cast<uint32_t>(kMaxChunkBytes);
  EXPECT_TRUE(decode(data).ok());
  FrameHeader empty_message = data;
  empty_message.total_bytes = 0;
  empty_message.payload_bytes = 0;
  EXPECT_TRUE(decode(empty_message).ok());
}

// ------------------------------------------------------------------------------------------
// Completions

TEST(Transport, TransportCompletionWaitFinishAndTimeout) {
  auto c = std::make_shared<Completion>();
  auto start = Clock::now();
  Status s = c->Wait(Deadline::After(std::chrono::milliseconds(30)));
  EXPECT_TRUE(s.code() == StatusCode::kTimeout);
  EXPECT_TRUE(SecondsSince(start) >= 0.029);
  EXPECT_TRUE(!c->done());

  std::thread finisher([c] { c->Finish(Status::PeerLost("rank 3: gone")); });
  s = c->Wait(Deadline::AfterSeconds(5));
  finisher.join();
  EXPECT_TRUE(s.code() == StatusCode::kPeerLost);
  c->Finish(Status::OK());  // later calls are ignored
  EXPECT_EQ(c->status().message(), std::string("rank 3: gone"));
  EXPECT_TRUE(c->done());
}

TEST(Transport, TransportWaitAllFirstErrorAndTimeout) {
  std::vector<CompletionPtr> list;
  for (int i = 0; i < 3; ++i) list.push_back(std::make_shared<Completion>());
  list[0]->Finish(Status::OK());
  // An error further down the list ends the wait although list[1] never finishes.
  std::thread failer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    list[2]->Finish(Status::PeerLost("rank 2: connection closed"));
  });
  auto start = Clock::now();
  Status s = WaitAll(list, Deadline::AfterSeconds(10));
  failer.join();
  EXPECT_TRUE(s.code() == StatusCode::kPeerLost);
  EXPECT_TRUE(SecondsSince(start) < 2);

  std::vector<CompletionPtr> pending = {std::make_shared<Completion>(),
                                        std::make_shared<Completion>()};
  pending[1]->Finish(Status::OK());
  s = WaitAll(pending, Deadline::After(std::chrono::milliseconds(30)));
  EXPECT_TRUE(s.code() == StatusCode::kTimeout);
  EXPECT_TRUE(Contains(s.message(), "1 of 2"));

  std::vector<CompletionPtr> two_errors = {std::make_shared<Completion>(),
                                           std::make_shared<Completion>()};
  two_errors[1]->Finish(Status::Aborted("second"));
  two_errors[0]->Finish(Status::Aborted("first"));
  EXPECT_EQ(WaitAll(two_errors, Deadline::AfterSeconds(1)).message(), std::string("first"));
  EXPECT_TRUE(WaitAll({}, Deadline::AfterSeconds(1)).ok());
}

// ------------------------------------------------------------------------------------------
// Mesh

TEST(Transport, TransportMeshOfOne) {
  auto mesh = MakeMesh(1);
  ASSERT_TRUE(mesh != nullptr);
  TcpTransport& t = (*mesh)[0];
  ExpectSelfTransfersOk(t, {{1, 1000, 1, true}, {2, 3 << 20, 2, false}});
  t.SendControl(0, 42, "to myself");
  ControlMessage m;
  ASSERT_TRUE(PopWithin(t, *mesh->events[0], &m, 5));
  EXPECT_EQ(m.from, 0);
  EXPECT_EQ(m.type, 42u);
  EXPECT_EQ(m.payload, std::string("to myself"));
  EXPECT_TRUE(t.FirstFailure().ok());
  mesh->Close();
}

TEST(Transport, TransportMeshOfTwoAndFourAllPairs) {
  for (int n : {2, 4}) {
    auto mesh = MakeMesh(n, [](TransportOptions* o) { o->data_streams = 3; });
    ASSERT_TRUE(mesh != nullptr);
    for (int a = 0; a < n; ++a) {
      for (int b = 0; b < n; ++b) {
        EXPECT_TRUE(TransferOk((*mesh)[a], (*mesh)[b], 100 + a * n + b, 777 + a + b, a * n + b,
                               (a + b) % 2 == 0));
      }
      for (int b = 0; b < n; ++b) {
        EXPECT_TRUE((*mesh)[a].PeerStatus(b).ok());
      }
    }
    mesh->Close();
  }
}

TEST(Transport, TransportConnectRetriesUntilPeerListens) {
  // "Rank 0" is a socket that is bound but not listening yet: rank 1's dials are refused until
  // it listens, and the mesh must still come up.
  Endpoint e0;
  int fd0 = BoundNotListening(&e0);
  ASSERT_TRUE(fd0 >= 0);

  TransportOptions o = Options(1, 2, 1);
  TcpTransport t1(o);
  std::string error;
  std::thread dial([&] {
    try {
      t1.ConnectMesh({e0, t1.listen_endpoint()}, Deadline::AfterSeconds(10));
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  // Let a few dials be refused first (this delay is the scenario, not a wait for an event).
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  ASSERT_TRUE(listen(fd0, 16) == 0);
  RawPeer raw0;
  bool accepted = raw0.AcceptFrom(fd0, 2);
  dial.join();
  EXPECT_TRUE(accepted);
  EXPECT_EQ(error, std::string(""));
  // The transport says goodbye on every stream when it closes.
  t1.Close();
  for (int s = 0; s < 2; ++s) {
    FrameHeader h;
    std::string payload;
    EXPECT_TRUE(ReadFrame(raw0.fd(s), &h, &payload, 5) && h.kind == FrameKind::kGoodbye);
  }
  close(fd0);
}

TEST(Transport, TransportGivesUpOnAnEndpointThatKeepsRefusing) {
  // Rank 0's endpoint is bound but nobody listens there (a dead process's endpoint, as a
  // launcher's store keeps it across restarts): the mesh fails after a few seconds of refusals,
  // naming the rank and the address, not at the deadline.
  Endpoint e0;
  int fd0 = BoundNotListening(&e0);
  ASSERT_TRUE(fd0 >= 0);
  TcpTransport t1(Options(1, 2, 1));
  auto start = Clock::now();
  std::string message;
  StatusCode code = ConnectMeshError(t1, {e0, t1.listen_endpoint()}, 30, &message);
  double took = SecondsSince(start);
  EXPECT_TRUE(code == StatusCode::kPeerLost) << message;
  EXPECT_TRUE(took >= 2.9 && took < 10) << took;
  EXPECT_TRUE(Contains(message, "rank 0 is gone: its endpoint 127.0.0.1:" + std::to_string(e0.port) +
                                    " has refused every connection"))
      << message;
  close(fd0);
}

TEST(Transport, TransportConnectTimeoutNamesMissingRanks) {
  // Rank 0 listens but never runs ConnectMesh (no hello-ack); rank 1's port refuses; rank 3
  // never dials rank 2.
  TcpTransport t0(Options(0, 4));
  Endpoint refused;
  int refusing = BoundNotListening(&refused);
  TcpTransport t2(Options(2, 4));
  std::vector<Endpoint> endpoints = {t0.listen_endpoint(), refused, t2.listen_endpoint(), {"127.0.0.1", 9}};
  auto start = Clock::now();
  std::string message;
  StatusCode code = ConnectMeshError(t2, endpoints, 0.3, &message);
  double took = SecondsSince(start);
  EXPECT_TRUE(code == StatusCode::kTimeout);
  EXPECT_TRUE(took >= 0.29 && took < 3);
  EXPECT_TRUE(Contains(message, "missing ranks 0, 1, 3"));
  EXPECT_TRUE(Contains(message, "Connection refused"));
  EXPECT_TRUE(Contains(message, "rank 3: it has not connected"));
  close(refusing);
}

TEST(Transport, TransportWrongJobTokenIsRejected) {
  TransportOptions o0 = Options(0, 2), o1 = Options(1, 2);
  o1.job_token = kToken + 1;
  TcpTransport t0(o0), t1(o1);
  std::vector<Endpoint> endpoints = {t0.listen_endpoint(), t1.listen_endpoint()};
  std::string m0, m1;
  std::thread a([&] {
    try {
      t0.ConnectMesh(endpoints, Deadline::AfterSeconds(0.4));
    } catch (const Error& e) {
      m0 = e.what();
    }
  });
  try {
    t1.ConnectMesh(endpoints, Deadline::AfterSeconds(0.4));
  } catch (const Error& e) {
    m1 = e.what();
  }
  a.join();
  EXPECT_TRUE(Contains(m0, "missing ranks 1"));
  EXPECT_TRUE(Contains(m1, "missing ranks 0"));
  EXPECT_TRUE(Contains(m1, "closed during the handshake"));
}

TEST(Transport, TransportStrangersDuringMeshBuild) {
  TcpTransport t0(Options(0, 2, 2)), t1(Options(1, 2, 2));
  Endpoint e0 = t0.listen_endpoint();
  std::vector<Endpoint> endpoints = {e0, t1.listen_endpoint()};
  std::string error0;
  std::thread mesh0([&] {
    try {
      t0.ConnectMesh(endpoints, Deadline::AfterSeconds(10));
    } catch (const std::exception& e) {
      error0 = e.what();
    }
  });
  std::vector<int> strangers;
  strangers.push_back(ConnectTo(e0));  // silent
  int garbage = ConnectTo(e0);
  SendAll(garbage, "GET / HTTP/1.1\r\nHost: x\r\n\r\nmore junk to fill 40 bytes", 52);
  strangers.push_back(garbage);
  int wrong_token = ConnectTo(e0);
  SendHeader(wrong_token, Hello(FrameKind::kHello, kToken + 7, 1, 0));
  strangers.push_back(wrong_token);
  int wrong_rank = ConnectTo(e0);
  SendHeader(wrong_rank, Hello(FrameKind::kHello, kToken, 5, 0));
  strangers.push_back(wrong_rank);
  int wrong_stream = ConnectTo(e0);
  SendHeader(wrong_stream, Hello(FrameKind::kHello, kToken, 1, 9));
  strangers.push_back(wrong_stream);
  int half_header = ConnectTo(e0);
  SendAll(half_header, "HRNG", 4);
  strangers.push_back(half_header);

  std::string error1;
  try {
    t1.ConnectMesh(endpoints, Deadline::AfterSeconds(10));
  } catch (const std::exception& e) {
    error1 = e.what();
  }
  mesh0.join();
  EXPECT_EQ(error0, std::string(""));
  EXPECT_EQ(error1, std::string(""));
  EXPECT_TRUE(TransferOk(t1, t0, 5, 5 << 20, 5, true));
  EXPECT_TRUE(TransferOk(t0, t1, 6, 12345, 6, false));
  // Every stranger was closed (EOF) by the time the mesh was complete, none left hanging.
  for (int fd : strangers) {
    char byte;
    EXPECT_TRUE(!RecvAll(fd, &byte, 1, 5));
  }
  for (int fd : strangers) close(fd);
  t0.Close();
  t1.Close();
}

// ------------------------------------------------------------------------------------------
// Traffic

TEST(Transport, TransportControlOrderedPerPeer) {
  auto mesh = MakeMesh(3, [](TransportOptions* o) { o->data_streams = 1; });
  ASSERT_TRUE(mesh != nullptr);
  constexpr int kMessages = 1000;
  auto payload_of = [](int from, int i) {
    return i % 10 == 0 ? std::string() : std::string(static_cast<size_t>(i % 300), 'a' + from) +
                                             std::to_string(i);
  };
  std::vector<std::thread> senders;
  for (int from : {1, 2}) {
    senders.emplace_back([&, from] {
      for (int i = 0; i < kMessages; ++i) {
        (*mesh)[from].SendControl(0, static_cast<uint32_t>(i), payload_of(from, i));
      }
    });
  }
  int next[3] = {0, 0, 0};
  bool in_order = true;
  int received = 0;
  while (received < 2 * kMessages) {
    ControlMessage m;
    if (!PopWithin((*mesh)[0], *mesh->events[0], &m, 10)) break;
    ++received;
    int i = next[m.from]++;
    if (m.type != static_cast<uint32_t>(i) || m.payload != payload_of(m.from, i)) in_order = false;
  }
  for (auto& s : senders) s.join();
  EXPECT_EQ(received, 2 * kMessages);
  EXPECT_TRUE(in_order);
  EXPECT_TRUE(mesh->events[0]->count() >= 1);
  mesh->Close();
}

TEST(Transport, TransportSendRecvSizesAndStreams) {
  struct Case {
    int streams;
    size_t chunk;
  };
  for (Case c : {Case{1, 1 << 20}, Case{3, 64 << 10}, Case{4, 1 << 20}}) {
    auto mesh = MakeMesh(2, [&](TransportOptions* o) {
      o->data_streams = c.streams;
      o->chunk_bytes = c.chunk;
    });
    ASSERT_TRUE(mesh != nullptr);
    uint64_t tag = 1;
    for (size_t bytes : {size_t(0), size_t(1), size_t(40), size_t(4096), size_t(1000003),
                         c.chunk * c.streams + 17}) {
      uint32_t seed = static_cast<uint32_t>(tag);
      EXPECT_TRUE(TransferOk((*mesh)[0], (*mesh)[1], tag++, bytes, seed, true));
      EXPECT_TRUE(TransferOk((*mesh)[1], (*mesh)[0], tag++, bytes, seed + 1, false));
    }
    mesh->Close();
  }
  // 64 MiB (plus an odd tail) over 4 streams, both directions at once, receives posted first.
  auto mesh = MakeMesh(2, [](TransportOptions* o) { o->data_streams = 4; });
  ASSERT_TRUE(mesh != nullptr);
  size_t bytes = (64 << 20) + 13;
  std::vector<uint8_t> a = Pattern(bytes, 11), b = Pattern(bytes, 12);
  std::vector<uint8_t> got_a(bytes), got_b(bytes);
  std::vector<CompletionPtr> ops = {(*mesh)[1].Recv(0, 9, got_a.data(), bytes),
                                    (*mesh)[0].Recv(1, 9, got_b.data(), bytes),
                                    (*mesh)[0].Send(1, 9, a.data(), bytes),
                                    (*mesh)[1].Send(0, 9, b.data(), bytes)};
  Status s = WaitAll(ops, Deadline::AfterSeconds(30));
  EXPECT_TRUE(s.ok());
  EXPECT_TRUE(got_a == a);
  EXPECT_TRUE(got_b == b);
  EXPECT_TRUE((*mesh)[0].stats().bytes_sent >= bytes);
  EXPECT_TRUE((*mesh)[0].stats().bytes_received >= bytes);
  mesh->Close();
}

TEST(Transport, TransportStreamsInUseChangeBetweenMessagesInFlight) {
  // Autotune changes how many of the connected data streams a message is striped over while
  // earlier messages are still on the wire: each message arrives whole whatever streams carried
  // it (out-of-range counts are clamped to 1..connected).
  auto mesh = MakeMesh(2, [](TransportOptions* o) {
    o->data_streams = 4;
    o->chunk_bytes = 64 << 10;
  });
  ASSERT_TRUE(mesh != nullptr);
  const size_t bytes = (2 << 20) + 7;  // 33 chunks
  const std::vector<int> counts = {1, 4, 2, 3, 0, 9};
  std::vector<std::vector<uint8_t>> sent, got;
  std::vector<CompletionPtr> ops;
  for (size_t i = 0; i < counts.size(); ++i) {
    sent.push_back(Pattern(bytes, static_cast<uint32_t>(40 + i)));
    got.emplace_back(bytes);
  }
  for (size_t i = 0; i < counts.size(); ++i) {
    (*mesh)[0].set_data_streams_in_use(counts[i]);
    ops.push_back((*mesh)[0].Send(1, 500 + i, sent[i].data(), bytes));
  }
  // Receives posted after every send: the early chunks wait in temporary buffers.
  for (size_t i = counts.size(); i-- > 0;) ops.push_back((*mesh)[1].Recv(0, 500 + i, got[i].data(), bytes));
  EXPECT_TRUE(WaitAll(ops, Deadline::AfterSeconds(30)).ok());
  for (size_t i = 0; i < counts.size(); ++i) EXPECT_TRUE(got[i] == sent[i]) << "message " << i;
  mesh->Close();
}

TEST(Transport, TransportRecvAfterDataArrived) {
  auto mesh = MakeMesh(2, [](TransportOptions* o) { o->chunk_bytes = 256 << 10; });
  ASSERT_TRUE(mesh != nullptr);
  size_t bytes = (3 << 20) + 5;
  std::vector<uint8_t> data = Pattern(bytes, 3), got(bytes);
  CompletionPtr s = (*mesh)[0].Send(1, 77, data.data(), bytes);
  EXPECT_TRUE(WaitOne(s).ok());
  // Wait until every byte is buffered on the receiver, then post the receive.
  EXPECT_TRUE(PollUntil([&] { return (*mesh)[1].stats().bytes_received >= bytes; }, 10));
  EXPECT_EQ((*mesh)[1].stats().unexpected_messages, 1u);
  CompletionPtr r = (*mesh)[1].Recv(0, 77, got.data(), bytes);
  // Served from the temporary buffer: nothing is left to arrive. (Not necessarily at once: the
  // byte counter moves when the I/O thread reads, a moment before it files the last frame.)
  EXPECT_TRUE(PollUntil([&] { return r->done(); }, 5));
  EXPECT_TRUE(WaitOne(r).ok());
  EXPECT_TRUE(got == data);
  mesh->Close();
}

TEST(Transport, TransportRecvPostedWhileArriving) {
  auto pair = MakeRawPair(2, 30, 1000);
  ASSERT_TRUE(pair->ok);
  TcpTransport& t = *pair->t;
  const size_t total = 3000;
  std::vector<uint8_t> data = Pattern(total, 21), got(total);
  // Chunks arrive out of order on different streams; the receive is posted after the first.
  pair->raw.SendData(2, 5, 2000, total, data.data() + 2000, 1000);
  ASSERT_TRUE(PollUntil([&] { return t.stats().bytes_received >= kFrameHeaderBytes + 1000; }, 5));
  EXPECT_EQ(t.stats().unexpected_messages, 1u);
  CompletionPtr r = t.Recv(1, 5, got.data(), total);
  EXPECT_TRUE(!r->done());
  pair->raw.SendData(1, 5, 0, total, data.data(), 1000);
  pair->raw.SendData(2, 5, 1000, total, data.data() + 1000, 1000);
  EXPECT_TRUE(WaitOne(r).ok());
  EXPECT_TRUE(got == data);

  // Same, but the late receive has the wrong size: it fails, the rest of the message is
  // dropped, and the streams stay usable.
  pair->raw.SendData(1, 6, 0, total, data.data(), 1000);
  ASSERT_TRUE(PollUntil([&] { return t.stats().unexpected_messages >= 2; }, 5));
  std::vector<uint8_t> small(100);
  CompletionPtr bad = t.Recv(1, 6, small.data(), small.size());
  Status bs = WaitOne(bad);
  EXPECT_TRUE(Contains(bs.message(), "tag 6 from rank 1: expected 100 bytes but rank 1 sent 3000"));
  pair->raw.SendData(2, 6, 1000, total, data.data() + 1000, 1000);
  pair->raw.SendData(1, 6, 2000, total, data.data() + 2000, 1000);
  std::vector<uint8_t> got7(10);
  CompletionPtr r7 = t.Recv(1, 7, got7.data(), 10);
  pair->raw.SendData(2, 7, 0, 10, data.data(), 10);
  EXPECT_TRUE(WaitOne(r7).ok());
  EXPECT_TRUE(std::equal(got7.begin(), got7.end(), data.begin()));
  EXPECT_TRUE(t.PeerStatus(1).ok());
  pair->t->Close();
}

TEST(Transport, TransportManyConcurrentTags) {
  constexpr int kRanks = 4, kPerPeer = 40;
  auto mesh = MakeMesh(kRanks, [](TransportOptions* o) {
    o->data_streams = 3;
    o->chunk_bytes = 16 << 10;
  });
  ASSERT_TRUE(mesh != nullptr);
  auto size_of = [](int from, int to, int i) {
    return static_cast<size_t>((from * 7919 + to * 104729 + i * 15485863) % 200000);
  };
  auto tag_of = [](int from, int i) { return static_cast<uint64_t>(from) << 32 | i; };
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int me = 0; me < kRanks; ++me) {
    threads.emplace_back([&, me] {
      TcpTransport& t = (*mesh)[me];
      std::vector<std::vector<uint8_t>> out, in, expect;
      std::vector<CompletionPtr> ops;
      std::vector<std::function<void()>> late_recvs;
      for (int peer = 0; peer < kRanks; ++peer) {
        for (int i = 0; i < kPerPeer; ++i) {
          size_t n_in = size_of(peer, me, i);
          expect.push_back(Pattern(n_in, static_cast<uint32_t>(peer * 1000 + me * 100 + i)));
          in.emplace_back(n_in);
          auto post = [&t, &ops, &in, peer, i, n_in, idx = in.size() - 1, tag = tag_of(peer, i)] {
            ops.push_back(t.Recv(peer, tag, in[idx].data(), n_in));
          };
          if (i % 2 == 0) {
            post();
          } else {
            late_recvs.push_back(post);
          }
        }
      }
      for (int peer = 0; peer < kRanks; ++peer) {
        for (int i = 0; i < kPerPeer; ++i) {
          out.push_back(Pattern(size_of(me, peer, i),
                                static_cast<uint32_t>(me * 1000 + peer * 100 + i)));
        }
      }
      size_t k = 0;
      for (int peer = 0; peer < kRanks; ++peer) {
        for (int i = 0; i < kPerPeer; ++i, ++k) {
          ops.push_back(t.Send(peer, tag_of(me, i), out[k].data(), out[k].size()));
        }
      }
      for (auto& post : late_recvs) post();
      Status s = WaitAll(ops, Deadline::AfterSeconds(30));
      if (!s.ok() || in != expect) {
        std::fprintf(stderr, "  rank %d: %s\n", me, s.ToString().c_str());
        ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  mesh->Close();
}

TEST(Transport, TransportSelfSendBothOrdersAndMismatch) {
  auto mesh = MakeMesh(2);
  ASSERT_TRUE(mesh != nullptr);
  TcpTransport& t = (*mesh)[1];
  ExpectSelfTransfersOk(t, {{1, 0, 1, true}, {2, 5 << 20, 2, true}, {3, 12345, 3, false}});
  std::vector<uint8_t> data(10), got(11);
  CompletionPtr r = t.Recv(1, 4, got.data(), got.size());
  CompletionPtr s = t.Send(1, 4, data.data(), data.size());
  EXPECT_TRUE(WaitOne(s).ok());
  Status rs = WaitOne(r);
  EXPECT_TRUE(Contains(rs.message(), "tag 4 from rank 1: expected 11 bytes but rank 1 sent 10"));
  mesh->Close();
}

TEST(Transport, TransportSizeMismatchNamesPeerTagAndSizes) {
  auto mesh = MakeMesh(2, [](TransportOptions* o) { o->chunk_bytes = 4096; });
  ASSERT_TRUE(mesh != nullptr);
  std::vector<uint8_t> data = Pattern(100000, 1), got(1000);
  // Receive posted first: the first chunk reveals the size.
  CompletionPtr r = (*mesh)[1].Recv(0, 31, got.data(), got.size());
  CompletionPtr s = (*mesh)[0].Send(1, 31, data.data(), data.size());
  Status rs = WaitOne(r);
  EXPECT_TRUE(rs.code() == StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(rs.message(), "size mismatch receiving tag 31 from rank 0"));
  EXPECT_TRUE(Contains(rs.message(), "expected 1000 bytes but rank 0 sent 100000 bytes"));
  EXPECT_TRUE(WaitOne(s).ok());
  // Receive posted after the data arrived.
  CompletionPtr s2 = (*mesh)[0].Send(1, 32, data.data(), 50);
  EXPECT_TRUE(WaitOne(s2).ok());
  EXPECT_TRUE(PollUntil([&] { return (*mesh)[1].stats().unexpected_messages >= 1; }, 5));
  CompletionPtr r2 = (*mesh)[1].Recv(0, 32, got.data(), 60);
  EXPECT_TRUE(Contains(WaitOne(r2).message(),
                       "tag 32 from rank 0: expected 60 bytes but rank 0 sent 50"));
  // The connection survives: the next transfer on the same streams is intact.
  EXPECT_TRUE(TransferOk((*mesh)[0], (*mesh)[1], 33, 70000, 33, true));
  EXPECT_TRUE((*mesh)[1].PeerStatus(0).ok());
  mesh->Close();
}

// ------------------------------------------------------------------------------------------
// Failures

TEST(Transport, TransportPeerClosedConnectionIsLost) {
  auto pair = MakeRawPair(1);
  ASSERT_TRUE(pair->ok);
  TcpTransport& t = *pair->t;
  std::vector<uint8_t> got(100);
  CompletionPtr r = t.Recv(1, 1, got.data(), got.size());
  auto start = Clock::now();
  pair->raw.CloseAll();  // no goodbye: looks like a crash
  Status rs = WaitOne(r, 5);
  double took = SecondsSince(start);
  EXPECT_TRUE(rs.code() == StatusCode::kPeerLost);
  EXPECT_EQ(rs.message(), std::string("rank 1: connection closed (process exited or killed?)"));
  EXPECT_TRUE(took < 1.0);
  EXPECT_TRUE(pair->events.WaitFor([&] { return !t.PeerStatus(1).ok(); }, 5));
  EXPECT_TRUE(t.FirstFailure().code() == StatusCode::kPeerLost);
  EXPECT_TRUE(Contains(t.FirstFailure().message(), "rank 1"));
  // Later operations with the lost peer fail at once; control to it is dropped silently.
  std::vector<uint8_t> data(10);
  EXPECT_TRUE(t.Send(1, 2, data.data(), 10)->status().code() == StatusCode::kPeerLost);
  EXPECT_TRUE(t.Recv(1, 3, got.data(), 10)->status().code() == StatusCode::kPeerLost);
  t.SendControl(1, 1, "anyone?");
  t.Close();
}

namespace {

// Forks a child that joins a 2-rank mesh as rank 1, tells rank 0 it is ready, then dies by
// `how` ("exit": _exit without closing; "kill": waits for SIGKILL). Checks rank 0's view.
void RunChildDeath(const std::string& how) {
  EventSignal sig;
  TransportOptions o0 = Options(0, 2);
  o0.on_event = [&sig] { sig.Fire(); };
  TcpTransport t0(o0);  // no thread yet: fork() below is safe
  Endpoint e0 = t0.listen_endpoint();
  pid_t child = fork();
  ASSERT_TRUE(child >= 0);
  if (child == 0) {
    try {
      TcpTransport t1(Options(1, 2));
      t1.ConnectMesh({e0, t1.listen_endpoint()}, Deadline::AfterSeconds(10));
      t1.SendControl(0, 1, "ready");
      if (how == "kill") {
        for (;;) pause();
      }
      _exit(0);  // inside t1's scope: no destructor, no goodbye; the kernel closes the sockets
    } catch (...) {
      _exit(1);
    }
  }
  bool connected = true;
  try {
    t0.ConnectMesh({e0, Endpoint{"127.0.0.1", 1}}, Deadline::AfterSeconds(10));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "  %s\n", e.what());
    connected = false;
  }
  ControlMessage ready;
  bool got_ready = connected && PopWithin(t0, sig, &ready, 10);
  std::vector<uint8_t> got(1000);
  CompletionPtr r = t0.Recv(1, 9, got.data(), got.size());
  if (how == "kill") kill(child, SIGKILL);
  // Detection time counts from the moment the child is gone (its sockets closed), which waitpid
  // tells; a process's teardown itself can take a while (sanitizers unmap a lot).
  int wstatus = 0;
  waitpid(child, &wstatus, 0);
  auto dead = Clock::now();
  Status rs = WaitOne(r, 5);
  double took = SecondsSince(dead);
  EXPECT_TRUE(got_ready);
  EXPECT_EQ(ready.payload, std::string("ready"));
  EXPECT_TRUE(rs.code() == StatusCode::kPeerLost);
  EXPECT_TRUE(Contains(rs.message(), "rank 1: connection closed"));
  EXPECT_TRUE(took < 1.0);
  EXPECT_TRUE(t0.PeerStatus(1).code() == StatusCode::kPeerLost);
  EXPECT_TRUE(sig.WaitFor([&] { return !t0.FirstFailure().ok(); }, 1));
  t0.Close();
}

}  // namespace

TEST(Transport, TransportPeerProcessExitIsLost) { RunChildDeath("exit"); }

TEST(Transport, TransportPeerProcessKilledIsLost) { RunChildDeath("kill"); }

TEST(Transport, TransportGoodbyeReportsShutdown) {
  auto mesh = MakeMesh(2);
  ASSERT_TRUE(mesh != nullptr);
  // Data and control sent just before Close still arrive; then the peer reads as shut down.
  std::vector<uint8_t> data = Pattern(3 << 20, 4), got(3 << 20);
  CompletionPtr r = (*mesh)[0].Recv(1, 1, got.data(), got.size());
  std::vector<uint8_t> never(10);
  CompletionPtr pending = (*mesh)[0].Recv(1, 2, never.data(), never.size());
  EXPECT_TRUE(WaitOne((*mesh)[1].Send(0, 1, data.data(), data.size())).ok());
  (*mesh)[1].SendControl(0, 5, "bye now");
  (*mesh)[1].Close();
  EXPECT_TRUE(WaitOne(r).ok());
  EXPECT_TRUE(got == data);
  ControlMessage m;
  EXPECT_TRUE(PopWithin((*mesh)[0], *mesh->events[0], &m, 5));
  EXPECT_EQ(m.payload, std::string("bye now"));
  Status ps = WaitOne(pending, 5);
  EXPECT_TRUE(ps.code() == StatusCode::kShutdown);
  EXPECT_EQ(ps.message(), std::string("rank 1 has shut down"));
  EXPECT_TRUE((*mesh)[0].PeerStatus(1).code() == StatusCode::kShutdown);
  EXPECT_TRUE((*mesh)[0].FirstFailure().code() == StatusCode::kShutdown);
  mesh->Close();
}

// A send is complete once the kernel has all its bytes. A peer that reads it and shuts down at
// once must not turn it into a failure because the sending thread had not yet marked it done:
// on an oversubscribed host that thread is preempted right there (its write wakes the receiver),
// and the peer's goodbye is handled first (a retiring server's, say, right after the push it
// needed). Here every thread shares one CPU and the sender runs at SCHED_IDLE, so the receiver,
// its goodbye and this rank's handling of it all run before the sender returns from Send.
TEST(Transport, TransportSendWrittenBeforeThePeersGoodbyeSucceeds) {
  cpu_set_t previous;
  ASSERT_EQ(sched_getaffinity(0, sizeof previous, &previous), 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &previous)) {
      CPU_SET(c, &one);
      break;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);  // the threads started from here inherit it
  struct RestoreAffinity {  // the tests after this one run on every CPU again, even if it fails
    cpu_set_t cpus;
    ~RestoreAffinity() { sched_setaffinity(0, sizeof cpus, &cpus); }
  } restore{previous};
  for (int round = 0; round < 10; ++round) {
    auto mesh = MakeMesh(2);
    ASSERT_TRUE(mesh != nullptr);
    std::vector<uint8_t> data = Pattern(4096, round), got(4096);
    CompletionPtr r = (*mesh)[1].Recv(0, 7, got.data(), got.size());
    std::thread receiver([&] {
      if (WaitOne(r).ok()) (*mesh)[1].Close();
    });
    Status sent;
    std::thread sender([&] {
      sched_param none{};
      sched_setscheduler(0, SCHED_IDLE, &none);  // this thread only (Linux)
      sent = WaitOne((*mesh)[0].Send(1, 7, data.data(), data.size()));
    });
    sender.join();
    receiver.join();
    EXPECT_TRUE(sent.ok()) << "round " << round << ": " << sent.message();
    EXPECT_TRUE(got == data);
    mesh->Close();
  }
}

TEST(Transport, TransportSilentPeerTimesOut) {
  auto pair = MakeRawPair(1, 0.5);
  ASSERT_TRUE(pair->ok);
  TcpTransport& t = *pair->t;
  auto start = Clock::now();
  std::vector<uint8_t> got(8);
  CompletionPtr r = t.Recv(1, 1, got.data(), got.size());
  // The transport pings an idle peer (after peer_timeout / 4) on the control stream.
  FrameHeader h;
  std::string payload;
  EXPECT_TRUE(ReadFrame(pair->raw.fd(0), &h, &payload, 2) && h.kind == FrameKind::kPing);
  Status rs = WaitOne(r, 5);
  double took = SecondsSince(start);
  EXPECT_TRUE(rs.code() == StatusCode::kPeerLost);
  EXPECT_EQ(rs.message(), std::string("rank 1: no traffic for 0.5 s"));
  EXPECT_TRUE(took >= 0.45 && took < 2.0);
  EXPECT_TRUE(pair->events.WaitForCount(1, 5));
  t.Close();
}

TEST(Transport, TransportPingsKeepIdlePeersAlive) {
  auto mesh = MakeMesh(2, [](TransportOptions* o) { o->peer_timeout_seconds = 0.4; });
  ASSERT_TRUE(mesh != nullptr);
  // Idle for three timeouts: only pings flow, and nobody is declared lost.
  bool lost = mesh->events[0]->WaitFor([&] { return !(*mesh)[0].PeerStatus(1).ok(); }, 1.2);
  EXPECT_TRUE(!lost);
  EXPECT_TRUE((*mesh)[1].PeerStatus(0).ok());
  EXPECT_TRUE((*mesh)[0].stats().bytes_received >= kFrameHeaderBytes);
  mesh->Close();
}

TEST(Transport, TransportInvalidFrameFromPeerDropsIt) {
  auto pair = MakeRawPair(1);
  ASSERT_TRUE(pair->ok);
  TcpTransport& t = *pair->t;
  FrameHeader absurd;
  absurd.kind = FrameKind::kData;
  absurd.tag = 1;
  absurd.total_bytes = kMaxMessageBytes * 4;
  absurd.payload_bytes = 1;
  SendHeader(pair->raw.fd(1), absurd);
  EXPECT_TRUE(pair->events.WaitFor([&] { return !t.PeerStatus(1).ok(); }, 5));
  Status s = t.PeerStatus(1);
  EXPECT_TRUE(s.code() == StatusCode::kPeerLost);
  EXPECT_TRUE(Contains(s.message(), "rank 1: protocol error on stream 1"));
  EXPECT_TRUE(Contains(s.message(), "exceeds the limit"));
  EXPECT_EQ(t.stats().unexpected_messages, 0u);  // nothing was allocated for it
  t.Close();
}

TEST(Transport, TransportStrangersDuringTransferAreHarmless) {
  auto mesh = MakeMesh(2, [](TransportOptions* o) { o->data_streams = 2; });
  ASSERT_TRUE(mesh != nullptr);
  size_t bytes = 64 << 20;
  std::vector<uint8_t> data = Pattern(bytes, 8), got(bytes);
  CompletionPtr r = (*mesh)[0].Recv(1, 8, got.data(), bytes);
  CompletionPtr s = (*mesh)[1].Send(0, 8, data.data(), bytes);
  Endpoint e0 = (*mesh)[0].listen_endpoint();
  std::vector<int> strangers;
  for (int i = 0; i < 5; ++i) {  // i == 4 connects and stays silent
    int fd = ConnectTo(e0);
    if (fd < 0) continue;
    if (i == 0) SendAll(fd, "\xde\xad\xbe\xef garbage garbage garbage garbage garbage", 44);
    if (i == 1) SendHeader(fd, Hello(FrameKind::kHello, kToken + 1, 1, 0));
    if (i == 2) {
      FrameHeader absurd;
      absurd.kind = FrameKind::kControl;
      absurd.payload_bytes = 0xFFFFFFFFu;
      uint8_t bytes40[kFrameHeaderBytes];
      EncodeFrameHeader(absurd, bytes40);
      SendAll(fd, bytes40, sizeof(bytes40));
    }
    if (i == 3) SendHeader(fd, Hello(FrameKind::kHello, kToken, 1, 0));  // a "duplicate" rank 1
    strangers.push_back(fd);
  }
  EXPECT_TRUE(WaitAll({r, s}, Deadline::AfterSeconds(30)).ok());
  EXPECT_TRUE(got == data);
  EXPECT_TRUE((*mesh)[0].PeerStatus(1).ok());
  EXPECT_TRUE((*mesh)[0].FirstFailure().ok());
  for (int fd : strangers) {
    char byte;
    EXPECT_TRUE(!RecvAll(fd, &byte, 1, 5));  // dropped
    close(fd);
  }
  EXPECT_TRUE(TransferOk((*mesh)[1], (*mesh)[0], 9, 1000, 9, true));
  mesh->Close();
}

TEST(Transport, TransportAbortFailsPendingAndFutureButControlFlows) {
  auto mesh = MakeMesh(2);
  ASSERT_TRUE(mesh != nullptr);
  Status rs = PendingRecvStatus((*mesh)[0], 1, 1, 100,
                                 [&] { (*mesh)[0].Abort(Status::Aborted("rank 3 failed: out of memory")); });
  EXPECT_TRUE(rs.code() == StatusCode::kAborted);
  EXPECT_EQ(rs.message(), std::string("rank 3 failed: out of memory"));
  std::vector<uint8_t> got(100);
  std::vector<uint8_t> data(100);
  EXPECT_EQ((*mesh)[0].Send(1, 2, data.data(), 100)->status().message(),
            std::string("rank 3 failed: out of memory"));
  EXPECT_EQ((*mesh)[0].Recv(1, 3, got.data(), 100)->status().message(),
            std::string("rank 3 failed: out of memory"));
  (*mesh)[0].SendControl(1, 9, "stopping");
  ControlMessage m;
  EXPECT_TRUE(PopWithin((*mesh)[1], *mesh->events[1], &m, 5));
  EXPECT_EQ(m.payload, std::string("stopping"));
  (*mesh)[1].SendControl(0, 10, "ack");
  EXPECT_TRUE(PopWithin((*mesh)[0], *mesh->events[0], &m, 5));
  EXPECT_EQ(m.payload, std::string("ack"));
  EXPECT_TRUE((*mesh)[0].PeerStatus(1).ok());
  mesh->Close();
}

TEST(Transport, TransportAbortWhileSendBlockedKeepsFraming) {
  // The raw peer does not read, so a large send stalls in the write queue. Abort must finish it
  // at once, stop touching the caller's buffer, and still leave whole frames on the wire.
  auto pair = MakeRawPair(1, 30, 1 << 20);
  ASSERT_TRUE(pair->ok);
  TcpTransport& t = *pair->t;
  auto data = std::make_unique<std::vector<uint8_t>>(Pattern(48 << 20, 5));
  CompletionPtr s = t.Send(1, 1, data->data(), data->size());
  EXPECT_TRUE(!s->done());
  t.Abort(Status::Aborted("stop"));
  EXPECT_EQ(WaitOne(s, 5).message(), std::string("stop"));
  std::fill(data->begin(), data->end(), 0xAA);  // the caller owns its buffer again
  data.reset();
  t.SendControl(1, 3, "after abort");
  // Read the data stream: every frame must be whole and carry the original bytes.
  std::vector<uint8_t> expect = Pattern(48 << 20, 5);
  bool frames_ok = true;
  uint64_t seen = 0;
  for (;;) {
    FrameHeader h;
    std::string payload;
    pollfd pfd{pair->raw.fd(1), POLLIN, 0};
    if (poll(&pfd, 1, 200) <= 0) break;  // the queue is flushed
    if (!ReadFrame(pair->raw.fd(1), &h, &payload, 5) || h.kind != FrameKind::kData) {
      frames_ok = false;
      break;
    }
    frames_ok = frames_ok && std::memcmp(payload.data(), expect.data() + h.offset,
                                         payload.size()) == 0;
    seen += payload.size();
  }
  EXPECT_TRUE(frames_ok);
  EXPECT_TRUE(seen < (48u << 20));
  FrameHeader h;
  std::string payload;
  EXPECT_TRUE(ReadFrame(pair->raw.fd(0), &h, &payload, 5));
  EXPECT_EQ(payload, std::string("after abort"));
  t.Close();
}

TEST(Transport, TransportCloseIsIdempotentAndFailsPending) {
  TcpTransport never_connected(Options(0, 2));
  never_connected.Close();
  never_connected.Close();
  auto mesh = MakeMesh(2);
  ASSERT_TRUE(mesh != nullptr);
  std::vector<uint8_t> got(10);
  CompletionPtr r = (*mesh)[0].Recv(1, 1, got.data(), got.size());
  (*mesh)[0].Close();
  EXPECT_TRUE(r->done());
  EXPECT_TRUE(r->status().code() == StatusCode::kShutdown);
  (*mesh)[0].Close();
  EXPECT_TRUE((*mesh)[0].Send(1, 2, got.data(), 1)->status().code() == StatusCode::kShutdown);
  EXPECT_TRUE(mesh->events[1]->WaitFor(
      [&] { return (*mesh)[1].PeerStatus(0).code() == StatusCode::kShutdown; }, 5));
}

TEST(Transport, TransportFdCountReturnsToBaseline) {
  int before = CountOpenFds();
  {
    auto mesh = MakeMesh(4);
    ASSERT_TRUE(mesh != nullptr);
    EXPECT_TRUE(CountOpenFds() >= before + 4 * (3 + 3 * 3));
    EXPECT_TRUE(TransferOk((*mesh)[3], (*mesh)[0], 1, 100000, 1, true));
    mesh->Close();
    EXPECT_EQ(CountOpenFds(), before);
  }
  {
    auto mesh = MakeMesh(4);  // destructors alone also clean up
    ASSERT_TRUE(mesh != nullptr);
  }
  EXPECT_EQ(CountOpenFds(), before);
}

// ------------------------------------------------------------------------------------------
// Measurements (printed; correctness is asserted, speed is reported)

namespace {

// The machine's own floor for the latency figure: a blocking 48-byte ping-pong between two
// threads over loopback TCP, no transport involved.
double RawSocketRoundTripP50Micros(int rounds) {
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  listen(listener, 1);
  socklen_t len = sizeof(addr);
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  int a = ConnectTo(Endpoint{"127.0.0.1", ntohs(addr.sin_port)});
  int b = accept(listener, nullptr, nullptr);
  int one = 1;
  setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::thread echo([b] {
    char buf[48];
    while (RecvAll(b, buf, sizeof(buf), 5)) SendAll(b, buf, sizeof(buf));
  });
  std::vector<double> micros;
  char buf[48] = {0};
  for (int i = 0; i < rounds; ++i) {
    auto start = Clock::now();
    SendAll(a, buf, sizeof(buf));
    if (!RecvAll(a, buf, sizeof(buf), 5)) break;
    micros.push_back(SecondsSince(start) * 1e6);
  }
  shutdown(a, SHUT_RDWR);
  echo.join();
  close(a);
  close(b);
  close(listener);
  std::sort(micros.begin(), micros.end());
  return micros.empty() ? 0 : micros[micros.size() / 2];
}

}  // namespace

TEST(Transport, TransportBenchLoopback) {
  const size_t bytes = 256 << 20;
  std::vector<uint8_t> data(bytes), got(bytes);
  for (size_t i = 0; i < bytes; i += 4096) data[i] = static_cast<uint8_t>(i >> 12);
  for (int streams : {1, 2, 4}) {
    auto mesh = MakeMesh(2, [&](TransportOptions* o) { o->data_streams = streams; });
    ASSERT_TRUE(mesh != nullptr);
    double best = 1e9;
    for (int rep = 0; rep < 2; ++rep) {
      CompletionPtr r = (*mesh)[1].Recv(0, rep, got.data(), bytes);
      auto start = Clock::now();
      CompletionPtr s = (*mesh)[0].Send(1, rep, data.data(), bytes);
      EXPECT_TRUE(WaitAll({s, r}, Deadline::AfterSeconds(60)).ok());
      best = std::min(best, SecondsSince(start));
    }
    EXPECT_TRUE(got == data);
    std::fprintf(stderr, "  [bench] 256 MiB loopback, %d data stream(s): %.2f GB/s\n", streams,
                 bytes / best / 1e9);
    mesh->Close();
  }

  auto mesh = MakeMesh(2);
  ASSERT_TRUE(mesh != nullptr);
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    ControlMessage m;
    while (PopWithin((*mesh)[1], *mesh->events[1], &m, 5) && !stop.load()) {
      (*mesh)[1].SendControl(0, m.type, m.payload);
      if (m.type == 0) break;
    }
  });
  constexpr int kRounds = 2000;
  std::vector<double> micros;
  for (int i = 1; i <= kRounds; ++i) {
    auto start = Clock::now();
    (*mesh)[0].SendControl(1, static_cast<uint32_t>(i), "12345678");
    ControlMessage m;
    if (!PopWithin((*mesh)[0], *mesh->events[0], &m, 5) || m.type != static_cast<uint32_t>(i)) {
      EXPECT_TRUE(false);
      break;
    }
    micros.push_back(SecondsSince(start) * 1e6);
  }
  (*mesh)[0].SendControl(1, 0, "");
  stop = true;
  echo.join();
  std::sort(micros.begin(), micros.end());
  if (!micros.empty()) {
    std::fprintf(stderr,
                 "  [bench] control round trip over %zu: p50 %.1f us, p99 %.1f us "
                 "(raw blocking socket ping-pong p50 %.1f us)\n",
                 micros.size(), micros[micros.size() / 2], micros[micros.size() * 99 / 100],
                 RawSocketRoundTripP50Micros(kRounds));
  }
  EXPECT_EQ(micros.size(), static_cast<size_t>(kRounds));
  mesh->Close();
}

TEST(Transport, TransportAbortMessageFromPeerFailsPendingTransfersAtOnce) {
  // A rank that fails tells the others with a control message of the abort type: their pending
  // receives must fail with its reason right away, not at their deadline.
  auto mesh = MakeMesh(2, [](TransportOptions* o) { o->abort_control_type = 77; });
  ASSERT_TRUE(mesh != nullptr);
  Status rs = PendingRecvStatus((*mesh)[1], 0, 5, 100, [&] { (*mesh)[0].SendControl(1, 77, "reduction kernel failed"); });
  EXPECT_TRUE(rs.code() == StatusCode::kAborted);
  EXPECT_EQ(rs.message(), std::string("rank 0 aborted the job: reduction kernel failed"));
  ControlMessage m;
  EXPECT_TRUE(PopWithin((*mesh)[1], *mesh->events[1], &m, 5));  // still delivered to the inbox
  EXPECT_EQ(m.type, uint32_t(77));
  mesh->Close();
}

TEST(Transport, TransportResetConnectionsLooksLikeACrashToPeers) {
  auto mesh = MakeMesh(2);
  ASSERT_TRUE(mesh != nullptr);
  Status rs = PendingRecvStatus((*mesh)[1], 0, 1, 10, [&] { (*mesh)[0].ResetConnections(); });
  EXPECT_TRUE(rs.code() == StatusCode::kPeerLost);  // not an orderly shutdown
  EXPECT_TRUE(rs.message().find("rank 0") != std::string::npos);
  mesh->Close();
}

TEST(Transport, TransportWrongSecretNeverJoinsTheMesh) {
  auto t0 = std::make_unique<TcpTransport>([] {
    TransportOptions o = Options(0, 2);
    o.secret = "the job's secret";
    return o;
  }());
  auto t1 = std::make_unique<TcpTransport>([] {
    TransportOptions o = Options(1, 2);
    o.secret = "a guess";
    return o;
  }());
  std::vector<Endpoint> endpoints = {t0->listen_endpoint(), t1->listen_endpoint()};
  std::string e0, e1;
  std::thread a([&] {
    try {
      t0->ConnectMesh(endpoints, Deadline::AfterSeconds(1.5));
    } catch (const std::exception& e) {
      e0 = e.what();
    }
  });
  try {
    t1->ConnectMesh(endpoints, Deadline::AfterSeconds(1.5));
  } catch (const std::exception& e) {
    e1 = e.what();
  }
  a.join();
  EXPECT_TRUE(e0.find("timed out") != std::string::npos);
  // The dialer learns why: the acceptor could not prove it holds the secret the dialer has.
  EXPECT_TRUE(e1.find("could not prove it holds the job's secret") != std::string::npos);
}

TEST(Transport, TransportReplayedHandshakeIsRejected) {
  // A stranger that recorded a legitimate proof replays it: the acceptor's fresh nonce makes the
  // old proof worthless, the connection is dropped, and the real rank 1 still joins.
  auto pair = MakeRawPair(1, 30, 1 << 20, [](const Endpoint& e0) {
    int stranger = ConnectTo(e0);
    ASSERT_TRUE(stranger >= 0);
    FrameHeader hello = Hello(FrameKind::kHello, kToken, 1, 0);
    SendFrame(stranger, hello, kNonceA);
    FrameHeader ack;
    std::string payload;
    EXPECT_TRUE(ReadFrame(stranger, &ack, &payload, 5));
    // The proof a legitimate peer sent for another acceptor nonce, replayed.
    std::string stale = HandshakeProof("", "herring-proof|", kNonceB, kNonceA, hello.offset, ack.offset, kToken);
    SendFrame(stranger, Hello(FrameKind::kHelloProof, kToken, 1, 0), stale);
    uint8_t byte;
    EXPECT_TRUE(!RecvAll(stranger, &byte, 1, 5));  // closed by the acceptor
    close(stranger);
  });
  EXPECT_TRUE(pair->ok);  // the real rank 1 still gets in
  pair->t->Close();
}

TEST(Transport, TransportJoinerTakesAVacantSlotAfterTheMesh) {
  // Ranks 0 and 1 build the mesh with one vacant slot; rank 2 dials in afterwards and then talks
  // to both like any peer. A stranger claiming the slot without the secret is turned away.
  auto mesh = MakeMesh(2, [](TransportOptions* o) {
    o->vacant_slots = 1;
    o->secret = "s3cret";
  });
  ASSERT_TRUE(mesh != nullptr);
  EXPECT_TRUE(!(*mesh)[0].Joined(2));
  EXPECT_TRUE((*mesh)[0].PeerStatus(2).code() == StatusCode::kInvalidArgument);
  {
    TransportOptions bad = Options(2, 3);
    bad.secret = "guess";
    TcpTransport stranger(bad);
    bool threw = false;
    try {
      stranger.ConnectMesh({(*mesh)[0].listen_endpoint(), (*mesh)[1].listen_endpoint(), stranger.listen_endpoint()},
                           Deadline::AfterSeconds(1.0));
    } catch (const Error&) {
      threw = true;
    }
    EXPECT_TRUE(threw);
  }
  TransportOptions o = Options(2, 3);
  o.secret = "s3cret";
  TcpTransport joiner(o);
  joiner.ConnectMesh({(*mesh)[0].listen_endpoint(), (*mesh)[1].listen_endpoint(), joiner.listen_endpoint()},
                     Deadline::AfterSeconds(10));
  auto deadline = Deadline::AfterSeconds(5);
  while (!((*mesh)[0].Joined(2) && (*mesh)[1].Joined(2)) && !deadline.Expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE((*mesh)[0].Joined(2) && (*mesh)[1].Joined(2));
  std::vector<uint8_t> data = Pattern(3 << 20, 9), got0(data.size()), got1(data.size());
  auto r0 = (*mesh)[0].Recv(2, 5, got0.data(), got0.size());
  auto r1 = (*mesh)[1].Recv(2, 5, got1.data(), got1.size());
  auto s0 = joiner.Send(0, 5, data.data(), data.size());
  auto s1 = joiner.Send(1, 5, data.data(), data.size());
  EXPECT_TRUE(WaitAll({r0, r1, s0, s1}, Deadline::AfterSeconds(10)).ok());
  EXPECT_TRUE(got0 == data && got1 == data);
  (*mesh)[0].SendControl(2, 4, "welcome");
  ControlMessage m;
  auto until = Deadline::AfterSeconds(5);
  bool got = false;
  while (!until.Expired() && !(got = joiner.PopControl(&m))) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_TRUE(got && m.payload == "welcome" && m.from == 0);
  joiner.Close();
  mesh->Close();
}

// Receives from any source (transport/any_source_receive.h): the earliest buffered message wins,
// else the first to arrive; the peer is named; a goodbye drops a candidate, no candidate left fails.
TEST(Transport, TransportRecvAnyTakesTheFirstArrival) {
  auto mesh = MakeMesh(3, [](TransportOptions* o) { o->data_streams = 2; });
  ASSERT_TRUE(mesh != nullptr);
  const size_t bytes = 4096;
  std::vector<uint8_t> from1 = Pattern(bytes, 1), from2 = Pattern(bytes, 2), got(bytes);
  auto receive = [&](std::vector<AnySourceCandidate> candidates, std::vector<int>* settled) {
    auto rx = std::make_shared<AnySourceReceive>();
    rx->on_settled = [settled](int peer) { settled->push_back(peer); };
    (*mesh)[0].RecvAny(candidates, got.data(), bytes, rx);
    return rx;
  };
  // Both messages buffered before the receives, rank 2's first: it is taken first.
  EXPECT_TRUE(WaitOne((*mesh)[2].Send(0, 6, from2.data(), bytes)).ok());
  EXPECT_TRUE(PollUntil([&] { return (*mesh)[0].stats().unexpected_messages == 1; }, 10));
  EXPECT_TRUE(WaitOne((*mesh)[1].Send(0, 5, from1.data(), bytes)).ok());
  EXPECT_TRUE(PollUntil([&] { return (*mesh)[0].stats().unexpected_messages == 2; }, 10));
  std::vector<int> settled;
  auto rx = receive({{1, 5}, {2, 6}}, &settled);
  EXPECT_TRUE(WaitOne(rx->done).ok());
  EXPECT_EQ(rx->source.load(), 2);
  EXPECT_TRUE(got == from2);
  rx = receive({{1, 5}, {2, 7}}, &settled);
  EXPECT_TRUE(WaitOne(rx->done).ok());
  EXPECT_EQ(rx->source.load(), 1);
  EXPECT_TRUE(got == from1);
  EXPECT_EQ(settled, (std::vector<int>{2, 1}));
  // Posted first: the first message of a candidate key to arrive takes it; other tags do not.
  settled.clear();
  rx = receive({{1, 8}, {2, 9}}, &settled);
  EXPECT_TRUE(WaitOne((*mesh)[2].Send(0, 10, from2.data(), bytes)).ok());  // not a candidate key
  EXPECT_TRUE(WaitOne((*mesh)[2].Send(0, 9, from2.data(), bytes)).ok());
  EXPECT_TRUE(WaitOne(rx->done).ok());
  EXPECT_EQ(rx->source.load(), 2);
  EXPECT_TRUE(got == from2);
  std::vector<uint8_t> other(bytes);
  EXPECT_TRUE(WaitOne((*mesh)[0].Recv(2, 10, other.data(), bytes)).ok());
  // A candidate that says goodbye is dropped; the other still completes the receive.
  rx = receive({{1, 11}, {2, 12}}, &settled);
  (*mesh)[2].Close();
  EXPECT_TRUE(PollUntil([&] { return !(*mesh)[0].PeerStatus(2).ok(); }, 10));
  EXPECT_FALSE(rx->done->done());
  EXPECT_TRUE(WaitOne((*mesh)[1].Send(0, 11, from1.data(), bytes)).ok());
  EXPECT_TRUE(WaitOne(rx->done).ok());
  EXPECT_EQ(rx->source.load(), 1);
  // No candidate left: fails at once, or when the last one says goodbye.
  rx = receive({{2, 13}}, &settled);
  Status s = WaitOne(rx->done);
  EXPECT_EQ(s.code(), StatusCode::kShutdown);
  EXPECT_NE(s.message().find("no candidate rank left"), std::string::npos) << s.message();
  settled.clear();
  rx = receive({{1, 14}}, &settled);
  (*mesh)[1].Close();
  s = WaitOne(rx->done);
  EXPECT_EQ(s.code(), StatusCode::kShutdown);
  EXPECT_EQ(rx->source.load(), -1);
  EXPECT_EQ(settled, (std::vector<int>{-1}));
  mesh->Close();
}
