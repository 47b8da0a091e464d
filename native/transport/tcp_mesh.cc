#include "transport/tcp_mesh.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <set>
#include <string>

#include "common/crypto.h"
#include "common/logging.h"
#include "transport/frame.h"
#include "transport/socket_util.h"

namespace herring {
namespace {

using std::chrono::milliseconds;

// A legitimate peer sends its hello right after connect(); a connection that stays silent this
// long is a stranger (or a peer that will redial), so it is dropped rather than held.
constexpr auto kHandshakeTimeout = std::chrono::seconds(5);
// Lazy connections keep the listener open for the whole job, so strangers are met there: a hello
// sits in the socket before the dialer's connect() returns, so a second is plenty, and a dialer
// dropped by mistake (a stalled machine) redials until its own deadline.
constexpr auto kLazyHandshakeTimeout = std::chrono::seconds(1);
// Bounds the connections in their handshake, so a flood of strangers cannot exhaust fds; never
// below what the job's own dialers can have in flight at once (every other rank's streams), or
// the builder would evict legitimate handshakes at scale (3 (N - 1) > 256 from N = 87 on).
constexpr size_t kMinMaxArrivals = 256;
constexpr auto kFirstRetryDelay = milliseconds(2);
constexpr auto kMaxRetryDelay = milliseconds(100);
// A peer's endpoint that refuses connections this long, without a break, belongs to a process
// that has ended. A TcpTransport listens from its construction, on an ephemeral port nobody can
// know before it is bound, and its endpoint is exchanged only after that, so "connection refused"
// from an exchanged endpoint never means "not listening yet" (a full accept queue drops SYNs, it
// does not refuse them); it means nothing listens there any more: an endpoint left in the
// launcher's store by an earlier attempt of the job (torchrun's agent keeps its store across
// restarts), or a rank that exited while the mesh was being built. Waiting the whole start
// timeout for it only delays the error. The few seconds absorb any transient refusal (about 30
// dials at the retry delays above); every other connect error is retried until the deadline.
constexpr auto kStaleEndpointAfter = std::chrono::seconds(3);

std::string FormatSeconds(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", s);
  return text;
}

constexpr size_t kMaxHandshakeBytes = kFrameHeaderBytes + kNonceBytes + kProofBytes;

// Sends a whole handshake frame on a fresh socket; its send buffer is empty, so a short write
// means the connection is already broken.
bool SendHandshake(int fd, FrameKind kind, uint64_t token, uint64_t identity, const std::string& payload) {
  FrameHeader h;
  h.kind = kind;
  h.tag = token;
  h.offset = identity;
  h.payload_bytes = static_cast<uint32_t>(payload.size());
  uint8_t bytes[kMaxHandshakeBytes];
  EncodeFrameHeader(h, bytes);
  std::memcpy(bytes + kFrameHeaderBytes, payload.data(), payload.size());
  const size_t total = kFrameHeaderBytes + payload.size();
  return send(fd, bytes, total, MSG_NOSIGNAL) == static_cast<ssize_t>(total);
}

// Reads a whole handshake frame (header, then the payload its header announces). Returns >0 when
// complete, 0 when more is needed, <0 when the connection closed, failed or sent something that
// is not a handshake frame (*why says how).
int ReadHandshake(int fd, uint8_t* buf, size_t* got, std::string* why) {
  size_t want = kFrameHeaderBytes;
  while (*got < want || want == kFrameHeaderBytes) {
    if (*got >= kFrameHeaderBytes) {
      FrameHeader h;
      Status s = DecodeFrameHeader(buf, &h);
      if (!s.ok()) {
        *why = s.message();
        return -1;
      }
      if (h.kind != FrameKind::kHello && h.kind != FrameKind::kHelloAck && h.kind != FrameKind::kHelloProof) {
        *why = "a frame that is not part of a handshake";
        return -1;
      }
      want = kFrameHeaderBytes + h.payload_bytes;  // validated against kMaxHandshakeBytes
      if (*got >= want) break;
    }
    ssize_t n = recv(fd, buf + *got, want - *got, 0);
    if (n > 0) {
      *got += static_cast<size_t>(n);
    } else if (n == 0) {
      *why = "connection closed during the handshake";
      return -1;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return 0;
    } else if (errno != EINTR) {
      *why = ErrnoText(errno);
      return -1;
    }
  }
  return 1;
}

class MeshBuilder {
 public:
  // Mesh mode (lazy = false): every peer is wanted from the start, by `deadline`; Run() returns
  // when all are connected. Lazy mode: peers are wanted one by one (Want), each within
  // spec.connect_timeout_seconds; complete peers are handed out (TakeConnected) as they come.
  MeshBuilder(const MeshSpec& spec, int listen_fd, const std::vector<Endpoint>& endpoints,
              Deadline deadline, bool lazy)
      : spec_(spec), listen_fd_(listen_fd), endpoints_(endpoints), deadline_(deadline), lazy_(lazy),
        fds_(spec.size), last_error_(spec.size), state_(spec.size, PeerState::kIdle),
        want_until_(spec.size), refused_since_(spec.size) {
    if (static_cast<int>(endpoints_.size()) != spec_.size) {
      throw Error(Status::InvalidArgument("ConnectMesh needs " + std::to_string(spec_.size) +
                                          " endpoints, got " +
                                          std::to_string(endpoints_.size())));
    }
    addrs_.resize(spec_.size);
    addr_lens_.resize(spec_.size);
    if (lazy_) return;
    for (int peer = 0; peer < spec_.size; ++peer) {
      // A peer with no endpoint (port 0) is absent: a joiner does not dial retired ranks.
      bool absent = peer < spec_.rank && endpoints[peer].port == 0;
      if (peer == spec_.rank || absent) continue;
      fds_[peer].assign(spec_.data_streams + 1, -1);
      state_[peer] = PeerState::kWanted;
      want_until_[peer] = deadline_.when();
      if (peer < spec_.rank) PrepareDials(peer, spec_.data_streams + 1);
    }
  }

  ~MeshBuilder() {
    for (auto& d : dials_) CloseFd(&d.fd);
    for (auto& a : arrivals_) CloseFd(&a.fd);
    for (auto& streams : fds_) {
      for (int& fd : streams) CloseFd(&fd);
    }
  }

  std::vector<std::vector<int>> Run() {
    auto started = Clock::now();
    while (!Complete()) {
      if (deadline_.Expired()) ThrowTimeout(started);
      PollOnce(Clock::now(), -1, 1000);
    }
    auto result = std::move(fds_);
    fds_.clear();
    return result;
  }

  void Want(int peer) {
    if (peer < 0 || peer >= spec_.size || peer == spec_.rank || state_[peer] != PeerState::kIdle) return;
    state_[peer] = PeerState::kWanted;
    want_until_[peer] = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(spec_.connect_timeout_seconds));
    if (fds_[peer].empty()) fds_[peer].assign(spec_.data_streams + 1, -1);
    if (peer < spec_.rank) {
      PrepareDials(peer, spec_.data_streams + 1);
    } else {
      PrepareDials(peer, 1, kCallMeStream);
    }
  }

  // One round: handles expiries, starts due dials, waits for events (or wake_fd) and handles them.
  void PollOnce(Clock::time_point now, int wake_fd, int max_wait_ms) {
    if (lazy_) ExpireWanted(now);
    DropFinishedDials();
    StartDueDials(now);
    ExpireArrivals(now);
    Poll(now, wake_fd, max_wait_ms);
  }

  std::vector<LazyConnector::Connected> TakeConnected() { return std::move(connected_); }
  std::vector<LazyConnector::Failed> TakeFailed() { return std::move(failed_); }

 private:
  enum class DialState { kIdle, kConnecting, kAwaitAck, kDone };
  // kIdle: nobody asked (a higher rank may still dial in); kWanted: connecting by want_until_;
  // kHanded: every stream connected (and, lazily, handed out); kFailed: gave up, stays so.
  enum class PeerState { kIdle, kWanted, kHanded, kFailed };

  struct Dial {
    int peer = 0;
    int stream = 0;  // kCallMeStream: ask a higher rank to dial us
    int fd = -1;
    DialState state = DialState::kIdle;
    Clock::time_point retry_at;
    Clock::duration retry_delay = kFirstRetryDelay;
    uint8_t buf[kMaxHandshakeBytes];
    size_t got = 0;
    std::string nonce;  // this dialer's, fresh per attempt
  };

  struct Arrival {
    int fd = -1;
    Clock::time_point expires;
    std::string from;
    uint8_t buf[kMaxHandshakeBytes];
    size_t got = 0;
    bool awaiting_proof = false;  // the hello passed; the dialer must now prove the secret
    int peer = -1;
    int stream = -1;
    std::string dialer_nonce, my_nonce;
  };

  void PrepareDials(int peer, int count, int only_stream = -1) {
    const Endpoint& e = endpoints_[peer];
    if (!MakeSockaddr(e.ip, e.port, &addrs_[peer], &addr_lens_[peer]) || e.port == 0) {
      Status bad = Status::InvalidArgument("rank " + std::to_string(peer) + " has an invalid endpoint '" + e.ip +
                                           ":" + std::to_string(e.port) + "'");
      if (!lazy_) throw Error(bad);
      Fail(peer, bad.message());
      return;
    }
    for (int k = 0; k < count; ++k) {
      Dial d;
      d.peer = peer;
      d.stream = only_stream >= 0 ? only_stream : k;
      d.retry_at = Clock::now();
      dials_.push_back(d);
    }
  }

  bool Complete() const {
    for (PeerState s : state_) {
      if (s == PeerState::kWanted) return false;
    }
    return true;
  }

  // A peer whose every stream is connected: mesh mode keeps its fds for Run(), lazy mode hands
  // them out.
  void MaybeComplete(int peer) {
    if (fds_[peer].empty()) return;
    for (int fd : fds_[peer]) {
      if (fd < 0) return;
    }
    state_[peer] = PeerState::kHanded;
    if (lazy_) {
      connected_.push_back({peer, std::move(fds_[peer])});
      fds_[peer].clear();
    }
  }

  void Fail(int peer, const std::string& why) {
    state_[peer] = PeerState::kFailed;
    for (int& fd : fds_[peer]) CloseFd(&fd);
    fds_[peer].clear();
    failed_.push_back({peer, why});
  }

  std::string PeerReason(int peer) const {
    if (!last_error_[peer].empty()) return last_error_[peer];
    if (peer > spec_.rank) return "it has not connected to this rank";
    return "no answer to the hello from " + EndpointText(peer);
  }

  void ExpireWanted(Clock::time_point now) {
    for (int peer = 0; peer < spec_.size; ++peer) {
      if (state_[peer] != PeerState::kWanted || now < want_until_[peer]) continue;
      Fail(peer, "rank " + std::to_string(peer) + ": could not connect within " +
                     FormatSeconds(spec_.connect_timeout_seconds) + " s (HERRING_START_TIMEOUT_SECONDS): " +
                     PeerReason(peer));
    }
  }

  // Dials that finished, or whose peer no longer needs them (connected from the other side,
  // failed), go; their pointers are not held across rounds.
  void DropFinishedDials() {
    for (auto& d : dials_) {
      if (d.state != DialState::kDone && state_[d.peer] != PeerState::kWanted) CloseFd(&d.fd);
    }
    dials_.erase(std::remove_if(dials_.begin(), dials_.end(),
                                [this](const Dial& d) {
                                  return d.state == DialState::kDone || state_[d.peer] != PeerState::kWanted;
                                }),
                 dials_.end());
  }

  std::string EndpointText(int peer) const {
    return endpoints_[peer].ip + ":" + std::to_string(endpoints_[peer].port);
  }

  // A failed dial is retried after a backoff, unless it says the peer is gone (kStaleEndpointAfter
  // of refusals in a row): then the mesh fails at once (lazily: that peer fails), naming the rank
  // and the address.
  void RetryLater(Dial* d, const std::string& why, int err = 0) {
    CloseFd(&d->fd);
    last_error_[d->peer] = why;
    Clock::time_point& since = refused_since_[d->peer];
    if (err != ECONNREFUSED) {
      since = Clock::time_point{};
    } else if (since == Clock::time_point{}) {
      since = Clock::now();
    } else if (Clock::now() - since >= kStaleEndpointAfter) {
      GiveUpOnGonePeer(d->peer, Clock::now() - since);
      return;
    }
    d->state = DialState::kIdle;
    d->retry_at = Clock::now() + d->retry_delay;
    d->retry_delay = std::min<Clock::duration>(d->retry_delay * 2, kMaxRetryDelay);
  }

  void StartDueDials(Clock::time_point now) {
    for (auto& d : dials_) {
      // (A peer given up on by an earlier dial of this round: its dials go next round.)
      if (d.state != DialState::kIdle || now < d.retry_at || state_[d.peer] != PeerState::kWanted) continue;
      int err = 0;
      d.fd = StartConnect(addrs_[d.peer], addr_lens_[d.peer], spec_.socket_buffer_bytes, &err);
      if (d.fd < 0) {
        RetryLater(&d, "connect to " + EndpointText(d.peer) + ": " + ErrnoText(err), err);
      } else {
        d.state = DialState::kConnecting;
      }
    }
  }

  void GiveUpOnGonePeer(int peer, Clock::duration refused_for) {
    const std::string why =
        "rank " + std::to_string(peer) + " is gone: its endpoint " + EndpointText(peer) +
        " has refused every connection for " + FormatSeconds(std::chrono::duration<double>(refused_for).count()) +
        " s, and a rank listens there from before its endpoint is exchanged, so its process has ended (an "
        "endpoint an earlier attempt of the job left in the launcher's store, or rank " + std::to_string(peer) +
        " exited while the mesh was being built)";
    if (!lazy_) {
      throw Error(Status::PeerLost("rank " + std::to_string(spec_.rank) + ": could not connect the TCP mesh: " + why));
    }
    Fail(peer, why);
  }

  void ExpireArrivals(Clock::time_point now) {
    for (auto& a : arrivals_) {
      if (a.fd >= 0 && now >= a.expires) Drop(&a, a.awaiting_proof ? "it sent no proof" : "it sent no hello");
    }
    arrivals_.erase(std::remove_if(arrivals_.begin(), arrivals_.end(),
                                   [](const Arrival& a) { return a.fd < 0; }),
                    arrivals_.end());
  }

  // Waits for the next socket event (or retry/expiry/deadline) and handles whatever is ready.
  void Poll(Clock::time_point now, int wake_fd, int max_wait_ms) {
    std::vector<pollfd> fds;
    std::vector<Dial*> dial_of;        // parallel to fds (null for non-dials)
    std::vector<Arrival*> arrival_of;  // parallel to fds (null for non-arrivals)
    fds.push_back({listen_fd_, POLLIN, 0});
    dial_of.push_back(nullptr);
    arrival_of.push_back(nullptr);
    if (wake_fd >= 0) {
      fds.push_back({wake_fd, POLLIN, 0});
      dial_of.push_back(nullptr);
      arrival_of.push_back(nullptr);
    }
    Clock::time_point wake = lazy_ ? now + milliseconds(max_wait_ms) : deadline_.when();
    for (int peer = 0; lazy_ && peer < spec_.size; ++peer) {
      if (state_[peer] == PeerState::kWanted) wake = std::min(wake, want_until_[peer]);
    }
    for (auto& d : dials_) {
      if (d.state == DialState::kIdle) wake = std::min(wake, d.retry_at);
      if (d.state != DialState::kConnecting && d.state != DialState::kAwaitAck) continue;
      fds.push_back({d.fd, static_cast<short>(d.state == DialState::kConnecting ? POLLOUT : POLLIN),
                     0});
      dial_of.push_back(&d);
      arrival_of.push_back(nullptr);
    }
    for (auto& a : arrivals_) {
      wake = std::min(wake, a.expires);
      fds.push_back({a.fd, POLLIN, 0});
      dial_of.push_back(nullptr);
      arrival_of.push_back(&a);
    }
    auto wait = std::chrono::duration_cast<milliseconds>(wake - now) + milliseconds(1);
    int timeout_ms = static_cast<int>(std::clamp<int64_t>(wait.count(), 0, max_wait_ms));
    int n = poll(fds.data(), fds.size(), timeout_ms);
    if (n <= 0) return;  // timeout or EINTR: the loop re-checks everything
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      if (dial_of[i] != nullptr) HandleDial(dial_of[i]);
      if (arrival_of[i] != nullptr) HandleArrival(arrival_of[i]);
    }
    // Accept last: it appends to arrivals_, which invalidates the pointers above.
    if (fds[0].revents != 0) AcceptAll(Clock::now());
  }

  void HandleDial(Dial* d) {
    if (state_[d->peer] != PeerState::kWanted) return;  // dropped next round
    if (d->state == DialState::kConnecting) {
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(d->fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        RetryLater(d, "connect to " + EndpointText(d->peer) + ": " + ErrnoText(err), err);
        return;
      }
      refused_since_[d->peer] = Clock::time_point{};  // something listens there
      d->nonce = RandomBytes(kNonceBytes);
      if (!SendHandshake(d->fd, FrameKind::kHello, spec_.job_token, HelloIdentity(spec_.rank, d->stream),
                         d->nonce)) {
        RetryLater(d, "sending hello to " + EndpointText(d->peer) + ": " + ErrnoText(errno));
        return;
      }
      d->state = DialState::kAwaitAck;
      d->got = 0;
      return;
    }
    std::string why;
    int rc = ReadHandshake(d->fd, d->buf, &d->got, &why);
    if (rc == 0) return;
    if (rc < 0) {
      RetryLater(d, EndpointText(d->peer) + ": " + why +
                        " (is it rank " + std::to_string(d->peer) + " of this job?)");
      return;
    }
    FrameHeader h;
    Status s = DecodeFrameHeader(d->buf, &h);
    if (s.ok() && (h.kind != FrameKind::kHelloAck || h.tag != spec_.job_token ||
                   h.offset != HelloIdentity(d->peer, d->stream))) {
      s = Status::InvalidArgument("unexpected handshake answer");
    }
    std::string acceptor_nonce;
    if (s.ok()) {
      const char* payload = reinterpret_cast<const char*>(d->buf + kFrameHeaderBytes);
      acceptor_nonce.assign(payload, kNonceBytes);
      std::string expected = HandshakeProof(spec_.secret, "herring-ack|", d->nonce, acceptor_nonce,
                                   HelloIdentity(spec_.rank, d->stream), h.offset, spec_.job_token);
      if (!DigestsEqual(reinterpret_cast<const uint8_t*>(expected.data()),
                        reinterpret_cast<const uint8_t*>(payload + kNonceBytes), kProofBytes)) {
        s = Status::InvalidArgument("rank " + std::to_string(d->peer) +
                                    " could not prove it holds the job's secret (another job, or a stranger)");
      }
    }
    if (!s.ok()) {
      RetryLater(d, EndpointText(d->peer) + ": " + s.message());
      return;
    }
    std::string proof = HandshakeProof(spec_.secret, "herring-proof|", acceptor_nonce, d->nonce,
                              HelloIdentity(spec_.rank, d->stream), h.offset, spec_.job_token);
    if (!SendHandshake(d->fd, FrameKind::kHelloProof, spec_.job_token, HelloIdentity(spec_.rank, d->stream),
                       proof)) {
      RetryLater(d, "sending the proof to " + EndpointText(d->peer) + ": " + ErrnoText(errno));
      return;
    }
    d->state = DialState::kDone;
    if (d->stream == kCallMeStream) {
      // Asked: the peer dials the pair's streams now; we wait for them until our deadline.
      CloseFd(&d->fd);
      last_error_[d->peer] = "asked it to connect, and it has not connected to this rank";
      return;
    }
    fds_[d->peer][d->stream] = d->fd;
    d->fd = -1;
    MaybeComplete(d->peer);
  }

  void AcceptAll(Clock::time_point now) {
    for (;;) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
            errno != ECONNABORTED) {
          HLOG(Warning) << "rank " << spec_.rank << ": accept(): " << ErrnoText(errno);
        }
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;
      }
      const size_t max_arrivals =
          std::max(kMinMaxArrivals, static_cast<size_t>(spec_.size) * static_cast<size_t>(spec_.data_streams + 1));
      if (arrivals_.size() >= max_arrivals) {
        // The oldest that has not passed its hello: a peer that passed it may already count
        // the connection as made, so evicting it would fail that peer.
        auto victim = std::find_if(arrivals_.begin(), arrivals_.end(), [](const Arrival& x) { return !x.awaiting_proof; });
        if (victim == arrivals_.end()) victim = arrivals_.begin();
        CloseFd(&victim->fd);
        arrivals_.erase(victim);
      }
      Arrival a;
      a.fd = fd;
      a.expires = lazy_ ? now + kLazyHandshakeTimeout : std::min(now + kHandshakeTimeout, deadline_.when());
      std::string ip;
      uint16_t port = 0;
      a.from = SocketEndpoint(fd, true, &ip, &port) ? ip + ":" + std::to_string(port) : "?";
      arrivals_.push_back(std::move(a));
    }
  }

  void HandleArrival(Arrival* a) {
    std::string why;
    int rc = ReadHandshake(a->fd, a->buf, &a->got, &why);
    if (rc == 0) return;
    if (rc < 0) {
      Drop(a, why);
      return;
    }
    if (a->awaiting_proof) {
      FinishArrival(a);
      return;
    }
    int peer = -1, stream = -1;
    Status s = CheckHello(a->buf, &peer, &stream);
    if (!s.ok()) {
      Reject(a, s);
      return;
    }
    ConfigureStreamSocket(a->fd, 0);  // buffer sizes were inherited from the listener
    a->peer = peer;
    a->stream = stream;
    a->dialer_nonce.assign(reinterpret_cast<const char*>(a->buf + kFrameHeaderBytes), kNonceBytes);
    a->my_nonce = RandomBytes(kNonceBytes);
    std::string proof = HandshakeProof(spec_.secret, "herring-ack|", a->dialer_nonce, a->my_nonce,
                              HelloIdentity(peer, stream), HelloIdentity(spec_.rank, stream), spec_.job_token);
    if (!SendHandshake(a->fd, FrameKind::kHelloAck, spec_.job_token, HelloIdentity(spec_.rank, stream),
                       a->my_nonce + proof)) {
      CloseFd(&a->fd);  // the dialer sees the close and dials again
      return;
    }
    a->awaiting_proof = true;
    a->got = 0;
    // The hello carried the job's token and a valid identity: a peer, whose proof may come late
    // on a loaded machine (hundreds of ranks on a few cores wait seconds for a time slice). The
    // mesh gives it until the mesh's deadline; lazy connections, whose listener never closes, a
    // handshake timeout.
    a->expires = lazy_ ? Clock::now() + kHandshakeTimeout : deadline_.when();
  }

  // The dialer's proof: only a process holding the job's secret gets a place in the mesh.
  void FinishArrival(Arrival* a) {
    FrameHeader h;
    Status s = DecodeFrameHeader(a->buf, &h);
    if (s.ok() && (h.kind != FrameKind::kHelloProof || h.tag != spec_.job_token ||
                   h.offset != HelloIdentity(a->peer, a->stream))) {
      s = Status::InvalidArgument("expected the proof of the hello");
    }
    if (s.ok()) {
      std::string expected = HandshakeProof(spec_.secret, "herring-proof|", a->my_nonce, a->dialer_nonce,
                                   HelloIdentity(a->peer, a->stream), HelloIdentity(spec_.rank, a->stream),
                                   spec_.job_token);
      if (!DigestsEqual(reinterpret_cast<const uint8_t*>(expected.data()), a->buf + kFrameHeaderBytes, kProofBytes)) {
        s = Status::InvalidArgument("authentication failed: the peer does not hold the job's secret "
                                    "(a stranger, a replayed handshake, or HERRING_SECRET differs)");
      }
    }
    if (s.ok() && a->stream == kCallMeStream) {
      // A lower rank needs this one: dial it (unless connected, failed or dialing already).
      CloseFd(&a->fd);
      Want(a->peer);
      return;
    }
    if (s.ok() && (state_[a->peer] == PeerState::kHanded || state_[a->peer] == PeerState::kFailed)) {
      s = Status::InvalidArgument("a connection from rank " + std::to_string(a->peer) +
                                  ", which is connected already or was given up");
    }
    if (s.ok() && fds_[a->peer].empty()) fds_[a->peer].assign(spec_.data_streams + 1, -1);
    if (!s.ok() || fds_[a->peer][a->stream] >= 0) {
      Reject(a, s.ok() ? Status::InvalidArgument("duplicate connection") : s);
      return;
    }
    fds_[a->peer][a->stream] = a->fd;
    a->fd = -1;
    MaybeComplete(a->peer);
  }

  // Closes a connection that is no peer's (yet). While the mesh is built each is logged; a lazy
  // job's listener meets strangers for the whole job, so there the log is rate-limited (one line
  // a second at most, with a running count), as the I/O thread's after a complete mesh.
  void Drop(Arrival* a, const std::string& why) {
    CloseFd(&a->fd);
    if (!lazy_) {
      HLOG(Info) << "rank " << spec_.rank << ": dropped a connection from " << a->from << ": " << why;
      return;
    }
    ++dropped_;
    auto now = Clock::now();
    if (now - last_drop_log_ >= std::chrono::seconds(1)) {
      HLOG(Info) << "rank " << spec_.rank << ": dropped a connection from " << a->from << " that is no peer's ("
                 << why << "; " << dropped_ << " dropped so far)";
      last_drop_log_ = now;
    }
  }

  void Reject(Arrival* a, const Status& s) {
    if (lazy_) {
      Drop(a, s.message());
      return;
    }
    // A misconfigured peer redials until its deadline: say why once, not at every attempt.
    if (logged_rejections_.insert(s.message()).second) {
      HLOG(Warning) << "rank " << spec_.rank << ": rejected a connection from " << a->from << ": "
                    << s.message();
    }
    CloseFd(&a->fd);
  }

  Status CheckHello(const uint8_t* bytes, int* peer, int* stream) const {
    FrameHeader h;
    Status s = DecodeFrameHeader(bytes, &h);
    if (!s.ok()) return s;
    if (h.kind != FrameKind::kHello) return Status::InvalidArgument("first frame is not a hello");
    if (h.tag != spec_.job_token) {
      return Status::InvalidArgument("wrong job token (a process of another job?)");
    }
    uint64_t claimed_rank = h.offset >> 16;
    uint64_t claimed_stream = h.offset & 0xffff;
    const bool call_me = lazy_ && claimed_stream == static_cast<uint64_t>(kCallMeStream) &&
                         claimed_rank < static_cast<uint64_t>(spec_.rank);
    if (!call_me && (claimed_rank <= static_cast<uint64_t>(spec_.rank) ||
                     claimed_rank >= static_cast<uint64_t>(spec_.size))) {
      return Status::InvalidArgument("hello from rank " + std::to_string(claimed_rank) +
                                     ", which should not dial rank " +
                                     std::to_string(spec_.rank));
    }
    if (!call_me && claimed_stream > static_cast<uint64_t>(spec_.data_streams)) {
      return Status::InvalidArgument("hello for stream " + std::to_string(claimed_stream) +
                                     " but this rank uses " +
                                     std::to_string(spec_.data_streams) +
                                     " data streams (HOROVOD knobs differ between ranks?)");
    }
    *peer = static_cast<int>(claimed_rank);
    *stream = static_cast<int>(claimed_stream);
    if (!call_me && !fds_[*peer].empty() && fds_[*peer][*stream] >= 0) {
      return Status::InvalidArgument("duplicate connection for rank " + std::to_string(*peer) +
                                     " stream " + std::to_string(*stream));
    }
    return Status::OK();
  }

  [[noreturn]] void ThrowTimeout(Clock::time_point started) const {
    std::string missing, reasons;
    for (int peer = 0; peer < spec_.size; ++peer) {
      if (state_[peer] != PeerState::kWanted) continue;
      if (!missing.empty()) missing += ", ";
      missing += std::to_string(peer);
      if (!reasons.empty()) reasons += "; ";
      reasons += "rank " + std::to_string(peer) + ": " + PeerReason(peer);
    }
    double waited = std::chrono::duration<double>(Clock::now() - started).count();
    throw Error(Status::Timeout("rank " + std::to_string(spec_.rank) +
                                ": timed out after " + FormatSeconds(waited) +
                                " s connecting the TCP mesh; missing ranks " + missing + " (" +
                                reasons + ")"));
  }

  const MeshSpec spec_;
  const int listen_fd_;
  const std::vector<Endpoint> endpoints_;
  const Deadline deadline_;
  const bool lazy_;
  std::vector<std::vector<int>> fds_;
  std::vector<std::string> last_error_;
  std::vector<PeerState> state_;
  std::vector<Clock::time_point> want_until_;
  std::vector<Clock::time_point> refused_since_;  // per peer: the first of the refusals in a row, or {}
  std::vector<sockaddr_storage> addrs_;
  std::vector<socklen_t> addr_lens_;
  std::vector<Dial> dials_;
  std::vector<Arrival> arrivals_;
  std::set<std::string> logged_rejections_;
  uint64_t dropped_ = 0;  // lazy: connections dropped, for the rate-limited log
  Clock::time_point last_drop_log_{};
  std::vector<LazyConnector::Connected> connected_;
  std::vector<LazyConnector::Failed> failed_;
};

}  // namespace

std::string HandshakeProof(const std::string& secret, const char* label, const std::string& first_nonce,
                           const std::string& second_nonce, uint64_t dialer, uint64_t acceptor, uint64_t token) {
  std::string m = std::string(label) + first_nonce + second_nonce;
  for (uint64_t v : {dialer, acceptor, token}) m.append(reinterpret_cast<const char*>(&v), sizeof v);
  Digest d = HmacSha256(secret, m);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

Status AcceptJoiner(int fd, const MeshSpec& spec, int first_joiner_rank, Deadline deadline, int* peer,
                    int* stream) {
  uint8_t buf[kMaxHandshakeBytes];
  auto read_frame = [&](FrameHeader* h) -> Status {
    size_t got = 0;
    std::string why;
    while (true) {
      int rc = ReadHandshake(fd, buf, &got, &why);
      if (rc > 0) return DecodeFrameHeader(buf, h);
      if (rc < 0) return Status::InvalidArgument(why);
      if (deadline.Expired()) return Status::Timeout("no handshake before the deadline");
      pollfd pfd{fd, POLLIN, 0};
      poll(&pfd, 1, 100);
    }
  };
  FrameHeader hello;
  Status s = read_frame(&hello);
  if (!s.ok()) return s;
  if (hello.kind != FrameKind::kHello) return Status::InvalidArgument("first frame is not a hello");
  if (hello.tag != spec.job_token) return Status::InvalidArgument("wrong job token (a process of another job?)");
  const int claimed_rank = static_cast<int>(hello.offset >> 16), claimed_stream = static_cast<int>(hello.offset & 0xffff);
  if (claimed_rank < first_joiner_rank || claimed_rank >= spec.size || claimed_stream > spec.data_streams) {
    return Status::InvalidArgument("a joiner must claim a free slot (ranks " + std::to_string(first_joiner_rank) +
                                   ".." + std::to_string(spec.size - 1) + "), not rank " +
                                   std::to_string(claimed_rank) + " stream " + std::to_string(claimed_stream));
  }
  std::string dialer_nonce(reinterpret_cast<const char*>(buf + kFrameHeaderBytes), kNonceBytes);
  std::string my_nonce = RandomBytes(kNonceBytes);
  const uint64_t me = HelloIdentity(spec.rank, claimed_stream);
  std::string proof = HandshakeProof(spec.secret, "herring-ack|", dialer_nonce, my_nonce, hello.offset, me,
                                     spec.job_token);
  if (!SendHandshake(fd, FrameKind::kHelloAck, spec.job_token, me, my_nonce + proof)) {
    return Status::InvalidArgument("the joiner went away during the handshake");
  }
  FrameHeader answer;
  s = read_frame(&answer);
  if (!s.ok()) return s;
  std::string expected = HandshakeProof(spec.secret, "herring-proof|", my_nonce, dialer_nonce, hello.offset, me,
                                        spec.job_token);
  if (answer.kind != FrameKind::kHelloProof || answer.offset != hello.offset ||
      !DigestsEqual(reinterpret_cast<const uint8_t*>(expected.data()), buf + kFrameHeaderBytes, kProofBytes)) {
    return Status::InvalidArgument("authentication failed: the joiner does not hold the job's secret");
  }
  *peer = claimed_rank;
  *stream = claimed_stream;
  return Status::OK();
}

std::vector<std::vector<int>> BuildMesh(const MeshSpec& spec, int listen_fd,
                                        const std::vector<Endpoint>& endpoints,
                                        Deadline deadline) {
  MeshBuilder builder(spec, listen_fd, endpoints, deadline, /*lazy=*/false);
  return builder.Run();
}

class LazyConnector::Impl : public MeshBuilder {
 public:
  using MeshBuilder::MeshBuilder;
};

LazyConnector::LazyConnector(const MeshSpec& spec, int listen_fd, const std::vector<Endpoint>& endpoints)
    : impl_(std::make_unique<Impl>(spec, listen_fd, endpoints, Deadline::Never(), /*lazy=*/true)) {}
LazyConnector::~LazyConnector() = default;
void LazyConnector::Want(int peer) { impl_->Want(peer); }
void LazyConnector::PollOnce(int wake_fd, int max_wait_ms) { impl_->PollOnce(Clock::now(), wake_fd, max_wait_ms); }
std::vector<LazyConnector::Connected> LazyConnector::TakeConnected() { return impl_->TakeConnected(); }
std::vector<LazyConnector::Failed> LazyConnector::TakeFailed() { return impl_->TakeFailed(); }

}  // namespace herring
