// The I/O thread of TcpTransport: one epoll loop per transport. It reads every stream (frame
// header, then the payload straight to its destination), writes what the callers' direct writes
// left queued, watches liveness, accepts-and-drops strangers, and says goodbye on Close.
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/logging.h"
#include "transport/socket_util.h"
#include "transport/tcp_mesh.h"
#include "transport/tcp_transport_impl.h"

namespace herring {


// ------------------------------------------------------------------------------------------
// The I/O thread

void TcpTransport::Impl::IoLoop() {
  try {
    RunIoLoop();
  } catch (const std::exception& e) {
    FailTransport(e.what());  // e.g. bad_alloc: nothing can move any more, say so to everyone
  }
  DrainSockets();
  CloseAllSockets();
}

void TcpTransport::Impl::FailTransport(const std::string& what) {
  Status status = Status::Internal(RankText(opts_.rank) + ": the transport's I/O thread failed: " +
                                   what);
  HLOG(Error) << status.message();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (abort_.ok()) abort_ = status;
    RecordFailureLocked(status);
    for (auto& p : peers_) {
      if (p->status.ok() && p->rank != opts_.rank) p->status = status;
    }
  }
  FailPending(status, -1);
  NotifyEvent();
}

void TcpTransport::Impl::RunIoLoop() {
  epoll_event events[kMaxEvents];
  for (;;) {
    if (stop_requested_.load() && !closing_) BeginClosing();
    if (closing_ && ClosingDone()) break;
    int n = epoll_wait(epoll_fd_, events, kMaxEvents, NextTimeoutMs());
    for (int i = 0; i < n; ++i) {
      void* tag = events[i].data.ptr;
      if (tag == &wake_marker_) {
        uint64_t count;
        ssize_t r = read(event_fd_, &count, sizeof(count));
        (void)r;
        if (notify_requested_.exchange(false)) NotifyEvent();
        if (check_write_errors_.exchange(false)) CheckWriteErrors();
        if (opts_.vacant_slots > 0) AdmitJoiners();
        if (lazy_) AttachLinks();
      } else if (tag == &listener_marker_) {
        AcceptAndDropStrangers();
      } else {
        HandleStreamEvent(static_cast<Stream*>(tag), events[i].events);
      }
    }
    std::vector<Stream*> reads, writes;
    reads.swap(read_carry_);
    writes.swap(write_carry_);
    for (Stream* s : reads) {
      s->read_carried = false;
      if (!s->read_closed && ReadStream(s) == ReadResult::kBudget) CarryRead(s);
    }
    for (Stream* s : writes) {
      s->write_carried = false;
      FlushFromIoThread(s);
    }
    if (Clock::now() >= next_liveness_check_) CheckLiveness();
  }
}

// Reads what the peers already sent before closing: closing a socket with unread bytes makes the
// kernel answer with a reset, which can destroy our goodbye before the peer reads it.
void TcpTransport::Impl::DrainSockets() {
  for (auto& p : peers_) {
    for (auto& s : p->streams) {
      if (s->fd < 0) continue;
      shutdown(s->fd, SHUT_WR);
      for (int i = 0; i < 64; ++i) {
        ssize_t n = recv(s->fd, scratch_.get(), kScratchBytes, 0);
        if (n <= 0 && !(n < 0 && errno == EINTR)) break;
      }
    }
  }
}

int TcpTransport::Impl::NextTimeoutMs() const {
  if (!read_carry_.empty() || !write_carry_.empty()) return 0;
  Clock::time_point wake = next_liveness_check_;
  if (closing_) wake = std::min(wake, closing_deadline_);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(wake - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms + 1, 0, 1000));
}

void TcpTransport::Impl::HandleStreamEvent(Stream* s, uint32_t events) {
  if (!s->read_closed && (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
    if (ReadStream(s) == ReadResult::kBudget) CarryRead(s);
  }
  if (events & EPOLLOUT) FlushFromIoThread(s);
}

// Edge-triggered epoll will not report a stream again until new bytes arrive (or buffer space
// frees), so one that stopped at its budget is revisited on the next turn, once.
void TcpTransport::Impl::CarryRead(Stream* s) {
  if (s->read_carried) return;
  s->read_carried = true;
  read_carry_.push_back(s);
}

void TcpTransport::Impl::CarryWrite(Stream* s) {
  if (s->write_carried) return;
  s->write_carried = true;
  write_carry_.push_back(s);
}

void TcpTransport::Impl::FlushFromIoThread(Stream* s) {
  FinishedSends finished;
  WriteResult r;
  int err = 0;
  {
    std::lock_guard<std::mutex> lock(s->write_mu);
    if (s->write_closed || s->queue.empty()) return;
    r = FlushLocked(s, kIoBudgetBytes, &finished);
    err = s->write_error;
  }
  FinishSends(&finished);
  if (r == WriteResult::kBudget) CarryWrite(s);
  if (r == WriteResult::kError) OnStreamClosed(s, err);
}

void TcpTransport::Impl::CheckWriteErrors() {
  for (auto& p : peers_) {
    for (auto& s : p->streams) {
      int err;
      {
        std::lock_guard<std::mutex> lock(s->write_mu);
        if (s->write_closed || s->write_error == 0) continue;
        err = s->write_error;
      }
      OnStreamClosed(s.get(), err);
    }
  }
}

TcpTransport::Impl::ReadResult TcpTransport::Impl::ReadStream(Stream* s) {
  size_t budget = kIoBudgetBytes;
  while (budget > 0) {
    if (s->read_closed) return ReadResult::kClosed;
    ssize_t n;
    if (!s->in_payload) {
      n = recv(s->fd, s->header + s->header_got, kFrameHeaderBytes - s->header_got, 0);
    } else {
      n = ReceivePayload(s, std::min<uint64_t>(s->frame.payload_bytes - s->payload_got, budget));
    }
    if (n == 0) {
      OnStreamClosed(s, 0);
      return ReadResult::kClosed;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return ReadResult::kBlocked;
      OnStreamClosed(s, errno);
      return ReadResult::kClosed;
    }
    bytes_received_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
    s->peer->last_recv_ns.store(NowNs(), std::memory_order_relaxed);
    budget -= std::min<size_t>(budget, static_cast<size_t>(n));
    if (!s->in_payload) {
      s->header_got += static_cast<size_t>(n);
      if (s->header_got < kFrameHeaderBytes) continue;
      s->header_got = 0;
      Status st = DecodeFrameHeader(s->header, &s->frame);
      if (st.ok()) st = BeginFrame(s);
      if (!st.ok()) {
        LosePeer(s->peer, Status::PeerLost(RankText(s->peer->rank) + ": protocol error on stream " +
                                           std::to_string(s->index) + ": " + st.message() +
                                           "; connection dropped"));
        return ReadResult::kClosed;
      }
      continue;
    }
    s->payload_got += static_cast<uint64_t>(n);
    if (s->payload_got < s->frame.payload_bytes) continue;
    s->in_payload = false;
    if (s->frame.kind == FrameKind::kControl) {
      DeliverControl(s);
    } else {
      FinishChunk(s);
    }
  }
  return ReadResult::kBudget;
}

ssize_t TcpTransport::Impl::ReceivePayload(Stream* s, size_t want) {
  if (s->frame.kind == FrameKind::kControl) {
    return recv(s->fd, &s->control[s->payload_got], want, 0);
  }
  InMessage* m = s->msg.get();
  std::lock_guard<std::mutex> lock(m->io_mu);
  if (s->dest == nullptr || (s->dest_is_user && m->detached)) {
    return recv(s->fd, scratch_.get(), std::min(want, kScratchBytes), 0);
  }
  return recv(s->fd, s->dest + s->payload_got, want, 0);
}

Status TcpTransport::Impl::BeginFrame(Stream* s) {
  const FrameHeader& h = s->frame;
  if (s->goodbye) return Status::InvalidArgument("frame after goodbye");
  s->payload_got = 0;
  switch (h.kind) {
    case FrameKind::kHello:
    case FrameKind::kHelloAck:
      return Status::InvalidArgument("handshake frame on an established connection");
    case FrameKind::kPing:
      return Status::OK();  // receiving it was the point
    case FrameKind::kGoodbye: {
      s->goodbye = true;
      Peer* p = s->peer;
      if (++p->goodbyes == static_cast<int>(p->streams.size())) {
        // Every stream has delivered everything the peer sent before it shut down.
        LosePeer(p, Status::Shutdown(RankText(p->rank) + " has shut down"));
      }
      return Status::OK();
    }
    case FrameKind::kControl:
      if (s->index != 0) return Status::InvalidArgument("control frame on a data stream");
      s->control.assign(h.payload_bytes, '\0');
      if (h.payload_bytes == 0) {
        DeliverControl(s);
      } else {
        s->in_payload = true;
      }
      return Status::OK();
    case FrameKind::kData: {
      if (s->index == 0) return Status::InvalidArgument("data frame on the control stream");
      Status st = BeginChunk(s);
      if (!st.ok()) return st;
      if (h.payload_bytes == 0) {
        FinishChunk(s);
      } else {
        s->in_payload = true;
      }
      return Status::OK();
    }
  }
  return Status::InvalidArgument("unknown frame kind");
}

Status TcpTransport::Impl::BeginChunk(Stream* s) {
  std::vector<RecvAction> actions;
  Status st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    st = LocateChunkLocked(s, &actions);
  }
  RunSettledAnySource();
  RunRecvActions(&actions);
  return st;
}

// Requires mu_. Finds where a data chunk goes: the posted receive's buffer, a temporary buffer
// for a message nobody asked for yet, or nowhere (a receive that failed). A receive that fails
// here is handed back in *actions, to be finished once mu_ is released.
Status TcpTransport::Impl::LocateChunkLocked(Stream* s, std::vector<RecvAction>* actions) {
  const FrameHeader& h = s->frame;
  MessageKey key{s->peer->rank, h.tag};
  std::shared_ptr<InMessage> m;
  auto it = in_.find(key);
  if (it == in_.end() && !any_waits_.empty()) {
    if (auto bound = BindAnySourceLocked(key)) it = in_.emplace(key, std::move(bound)).first;
  }
  if (it == in_.end()) {
    m = std::make_shared<InMessage>();
    m->key = key;
    m->mode = InMessage::Mode::kTemp;
    m->arrival = ++arrivals_;
    m->total_known = true;
    m->total = h.total_bytes;
    if (h.total_bytes > 0) {
      m->temp.reset(new (std::nothrow) uint8_t[h.total_bytes]);
      if (!m->temp) {
        return Status::InvalidArgument("cannot buffer an unexpected message of " +
                                       std::to_string(h.total_bytes) + " bytes");
      }
    }
    in_[key] = m;
    unexpected_messages_.fetch_add(1, std::memory_order_relaxed);
  } else {
    m = it->second;
    if (!m->total_known) {  // the first chunk of a posted receive
      m->total_known = true;
      m->total = h.total_bytes;
      if (m->total != m->user_bytes) {
        actions->push_back({m, m->recv,
                            Status::InvalidArgument(MismatchText(key, m->user_bytes, m->total)),
                            false});
        m->mode = InMessage::Mode::kDiscard;
        m->recv = nullptr;
      }
    } else if (m->total != h.total_bytes) {
      return Status::InvalidArgument("chunk of tag " + std::to_string(h.tag) + " says " +
                                     std::to_string(h.total_bytes) +
                                     " bytes but earlier chunks said " + std::to_string(m->total));
    } else if (m->complete) {
      // Tags are unique per message until it is received; a reused one cannot be told apart
      // from the first message's chunks.
      return Status::InvalidArgument("a second message with tag " + std::to_string(h.tag) +
                                     " before the first was received");
    }
    if (m->received + h.payload_bytes > m->total) {
      return Status::InvalidArgument("more data than the " + std::to_string(m->total) +
                                     "-byte message of tag " + std::to_string(h.tag));
    }
  }
  s->msg = m;
  s->dest_is_user = m->mode == InMessage::Mode::kUser;
  s->dest = nullptr;
  if (m->total > 0 && m->mode == InMessage::Mode::kUser) s->dest = m->user + h.offset;
  if (m->total > 0 && m->mode == InMessage::Mode::kTemp) s->dest = m->temp.get() + h.offset;
  return Status::OK();
}

void TcpTransport::Impl::FinishChunk(Stream* s) {
  std::shared_ptr<InMessage> m = std::move(s->msg);
  s->dest = nullptr;
  std::vector<RecvAction> actions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    m->received += s->frame.payload_bytes;
    if (m->received < m->total) return;
    auto it = in_.find(m->key);
    bool in_table = it != in_.end() && it->second == m;
    switch (m->mode) {
      case InMessage::Mode::kUser:
        if (in_table) in_.erase(it);
        actions.push_back({m, m->recv, Status::OK(), false});
        break;
      case InMessage::Mode::kTemp:
        if (m->recv) {
          if (in_table) in_.erase(it);
          actions.push_back({m, m->recv, Status::OK(), true});
        } else {
          m->complete = true;  // waits in the table for its receive
        }
        break;
      case InMessage::Mode::kDiscard:
        if (in_table) in_.erase(it);
        break;
    }
  }
  RunRecvActions(&actions);
}

void TcpTransport::Impl::DeliverControl(Stream* s) {
  const uint32_t type = static_cast<uint32_t>(s->frame.tag);
  if (opts_.abort_control_type != 0 && type == opts_.abort_control_type) {
    Status reason = Status::Aborted("rank " + std::to_string(s->peer->rank) + " aborted the job: " + s->control);
    {
      std::lock_guard<std::mutex> lock(mu_);
      RecordFailureLocked(reason);
    }
    Abort(reason);
  }
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    inbox_.push_back(ControlMessage{s->peer->rank, type, std::move(s->control)});
    inbox_count_.store(inbox_.size(), std::memory_order_release);
  }
  s->control.clear();
  NotifyEvent();
}

void TcpTransport::Impl::OnStreamClosed(Stream* s, int err) {
  Peer* p = s->peer;
  if (s->goodbye) {
    // The peer shut this stream down in order; the others may still be delivering.
    s->read_closed = true;
    std::lock_guard<std::mutex> lock(s->write_mu);
    s->write_closed = true;
    s->queue.clear();
    return;
  }
  // The streams are separate sockets: a peer that aborts the job sends its reason on the control
  // stream and then exits, and the close of one of its data streams can be read here first. What
  // the control stream still holds is read before the peer is declared lost, so that the error
  // names the cause ("rank 1 aborted the job: rank 5: connection closed") and not the messenger
  // ("rank 1: connection closed", which names a rank that did not fail).
  Stream* control = p->streams.empty() ? nullptr : p->streams[0].get();
  if (control != nullptr && control != s && control->fd >= 0) {
    while (ReadStream(control) == ReadResult::kBudget) {
    }
  }
  std::string why = err == 0 || err == ECONNRESET || err == EPIPE
                        ? "connection closed (process exited or killed?)"
                        : "connection error: " + ErrnoText(err);
  LosePeer(p, Status::PeerLost(RankText(p->rank) + ": " + why));
}

void TcpTransport::Impl::LosePeer(Peer* p, const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!p->status.ok()) return;
    p->status = status;
    RecordFailureLocked(status);
  }
  if (status.code() == StatusCode::kShutdown) {
    HLOG(Info) << status.message();
  } else if (!closing_) {
    HLOG(Warning) << RankText(opts_.rank) << " lost " << status.message();
  }
  for (auto& s : p->streams) {
    s->read_closed = true;
    s->in_payload = false;
    s->msg.reset();
    std::lock_guard<std::mutex> lock(s->write_mu);
    s->write_closed = true;
    s->queue.clear();
    if (s->fd >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, s->fd, nullptr);
    CloseFd(&s->fd);
  }
  FailPending(status, p->rank);
  NotifyEvent();
}

void TcpTransport::Impl::CheckLiveness() {
  double timeout = opts_.peer_timeout_seconds;
  auto tick = std::chrono::duration<double>(std::clamp(timeout / 8, 0.01, 0.5));
  next_liveness_check_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(tick);
  if (closing_) return;
  int64_t now = NowNs();
  auto timeout_ns = static_cast<int64_t>(timeout * 1e9);
  for (auto& peer : peers_) {
    Peer* p = peer.get();
    if (p->streams.empty() || (lazy_ && !p->linked) || p->streams[0]->read_closed) continue;
    if (now - p->last_recv_ns.load() >= timeout_ns) {
      LosePeer(p, Status::PeerLost(RankText(p->rank) + ": no traffic for " +
                                   FormatSeconds(timeout) + " s"));
    } else if (now - p->last_send_ns.load() >= timeout_ns / 4) {
      SendPing(p);
    }
  }
}

void TcpTransport::Impl::SendPing(Peer* p) {
  Stream* s = p->streams[0].get();
  FinishedSends unused;
  std::lock_guard<std::mutex> lock(s->write_mu);
  // A non-empty queue means a frame is already on its way; another ping would not help.
  if (s->write_closed || !s->queue.empty()) return;
  OutFrame f;
  FillHeader(&f, FrameKind::kPing, 0, 0, 0, 0);
  Enqueue(s, std::move(f), &unused);
}

void TcpTransport::Impl::AcceptAndDropStrangers() {
  // The mesh is complete, so nobody legitimate connects any more: whoever does is dropped at
  // once, before it can send anything.
  for (int i = 0; i < 64; ++i) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    // Counted, and logged at most once a second: a flood of strangers must not turn into a
    // flood of blocking writes to stderr from the I/O thread.
    ++strangers_dropped_;
    auto now = Clock::now();
    if (now - last_stranger_log_ >= std::chrono::seconds(1)) {
      std::string ip;
      uint16_t port = 0;
      SocketEndpoint(fd, true, &ip, &port);
      HLOG(Info) << RankText(opts_.rank) << ": dropped a connection from " << ip << ":" << port
                 << " after the mesh was complete (" << strangers_dropped_ << " dropped so far)";
      last_stranger_log_ = now;
    }
    close(fd);
  }
}

void TcpTransport::Impl::RunAdmission() {
  // A joiner dials every stream of every member; each connection is authenticated here (the
  // same handshake as the mesh, blocking but bounded), off the I/O thread, then handed over.
  MeshSpec spec;
  spec.rank = opts_.rank;
  spec.size = static_cast<int>(peers_.size());
  spec.data_streams = opts_.data_streams;
  spec.job_token = job_token_.load();
  spec.secret = secret_;
  while (!stop_requested_.load()) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (poll(&pfd, 1, 200) <= 0) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) continue;
    int peer = -1, stream = -1;
    Status s = AcceptJoiner(fd, spec, opts_.size, Deadline::AfterSeconds(5), &peer, &stream);
    if (s.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!peers_[peer]->vacant || closed_) s = Status::InvalidArgument(RankText(peer) + " already joined");
    }
    if (!s.ok()) {
      HLOG(Warning) << RankText(opts_.rank) << ": rejected a joining connection: " << s.message();
      CloseFd(&fd);
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      admitted_.push_back({peer, stream, fd});
    }
    Wake();
  }
}

void TcpTransport::Impl::AdmitJoiners() {
  std::vector<Admitted> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch.swap(admitted_);
  }
  for (const Admitted& a : batch) {
    Peer* p = peers_[a.peer].get();
    p->arriving.resize(opts_.data_streams + 1, -1);
    if (p->arriving[a.stream] >= 0) close(p->arriving[a.stream]);
    p->arriving[a.stream] = a.fd;
    if (std::any_of(p->arriving.begin(), p->arriving.end(), [](int fd) { return fd < 0; })) continue;
    // Every stream of the joiner is here: it becomes a peer like the others.
    int64_t now = NowNs();
    p->last_send_ns = now;
    p->last_recv_ns = now;
    for (size_t i = 0; i < p->arriving.size(); ++i) {
      auto s = std::make_unique<Stream>();
      s->peer = p;
      s->index = static_cast<int>(i);
      s->fd = p->arriving[i];
      ConfigureStreamSocket(s->fd, 0);
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
      ev.data.ptr = s.get();
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, s->fd, &ev);
      p->streams.push_back(std::move(s));
    }
    p->arriving.clear();
    p->linked = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      p->vacant = false;
    }
    HLOG(Info) << RankText(opts_.rank) << ": " << RankText(p->rank) << " joined";
    NotifyEvent();
  }
}

void TcpTransport::Impl::BeginClosing() {
  closing_ = true;
  closing_deadline_ = Clock::now() + kCloseFlushTimeout;
  if (reset_requested_.load()) {
    // Fault injection: vanish like a crashed host. No goodbye; closing with a zero linger makes
    // the kernel answer with RST.
    closing_deadline_ = Clock::now();
    linger zero{1, 0};
    for (auto& p : peers_) {
      for (auto& s : p->streams) {
        if (s->fd >= 0) setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &zero, sizeof zero);
      }
    }
    FailPending(Status::Aborted(RankText(opts_.rank) + ": connections reset (fault injection)"), -1);
    return;
  }
  FailPending(Status::Shutdown(RankText(opts_.rank) +
                               ": the transport was closed while this transfer was pending"),
              -1);
  for (auto& p : peers_) {
    for (auto& s : p->streams) {
      {
        std::lock_guard<std::mutex> lock(s->write_mu);
        if (s->write_closed) continue;
        if (lazy_ && !p->linked && s->queue.empty()) {
          // Never connected and nothing to say (lazy connections): nobody to say goodbye to.
          s->write_closed = true;
          continue;
        }
        // A peer still connecting with frames queued (an abort message, say) gets them and the
        // goodbye if it connects before the closing deadline.
        OutFrame f;
        FillHeader(&f, FrameKind::kGoodbye, 0, 0, 0, 0);
        s->queue.push_back(std::move(f));
      }
      FlushFromIoThread(s.get());
    }
  }
}

bool TcpTransport::Impl::ClosingDone() const {
  if (Clock::now() >= closing_deadline_) return true;
  for (auto& p : peers_) {
    for (auto& s : p->streams) {
      std::lock_guard<std::mutex> lock(s->write_mu);
      if (!s->write_closed && !s->queue.empty()) return false;
    }
  }
  return true;
}

}  // namespace herring
