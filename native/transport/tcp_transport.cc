// TcpTransport, the callers' side: construction and mesh, sends (with the direct-write fast path),
// receives, control messages, abort and close. The I/O thread lives in tcp_io_loop.cc.
#include "transport/tcp_transport.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "common/logging.h"
#include "common/thread_name.h"
#include "transport/socket_util.h"
#include "transport/tcp_mesh.h"
#include "transport/tcp_transport_impl.h"

namespace herring {

// ------------------------------------------------------------------------------------------
// Construction, mesh, teardown

TcpTransport::Impl::Impl(TransportOptions options)
    : opts_(std::move(options)), streams_in_use_(opts_.data_streams), job_token_(opts_.job_token), secret_(opts_.secret) {
  if (opts_.size < 1 || opts_.rank < 0 || opts_.rank >= opts_.size) {
    throw Error(Status::InvalidArgument("TcpTransport: rank " + std::to_string(opts_.rank) +
                                        " outside a job of size " + std::to_string(opts_.size)));
  }
  if (opts_.data_streams < 1 || opts_.data_streams > kMaxDataStreams) {
    throw Error(Status::InvalidArgument("TcpTransport: data_streams must be in [1, " +
                                        std::to_string(kMaxDataStreams) + "], got " +
                                        std::to_string(opts_.data_streams)));
  }
  if (opts_.chunk_bytes < 1 || opts_.chunk_bytes > kMaxChunkBytes) {
    throw Error(Status::InvalidArgument("TcpTransport: chunk_bytes must be in [1, " +
                                        std::to_string(kMaxChunkBytes) + "], got " +
                                        std::to_string(opts_.chunk_bytes)));
  }
  if (!(opts_.peer_timeout_seconds > 0)) {
    throw Error(Status::InvalidArgument("TcpTransport: peer_timeout_seconds must be positive"));
  }
  if (opts_.vacant_slots < 0) throw Error(Status::InvalidArgument("TcpTransport: negative vacant_slots"));
  peers_.resize(opts_.size + opts_.vacant_slots);
  for (size_t r = 0; r < peers_.size(); ++r) {
    peers_[r] = std::make_unique<Peer>();
    peers_[r]->rank = static_cast<int>(r);
    peers_[r]->vacant = static_cast<int>(r) >= opts_.size;
  }
  listen_fd_ = CreateListener(opts_.bind_ip, opts_.socket_buffer_bytes);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || event_fd_ < 0) {
    int err = errno;
    CloseFd(&listen_fd_);
    CloseFd(&epoll_fd_);
    CloseFd(&event_fd_);
    throw Error(Status::Internal("TcpTransport: epoll/eventfd: " + ErrnoText(err)));
  }
  endpoint_.ip = opts_.bind_ip;
  std::string ip;
  SocketEndpoint(listen_fd_, false, &ip, &endpoint_.port);
  scratch_.reset(new uint8_t[kScratchBytes]);
}

TcpTransport::Impl::~Impl() { Close(); }

void TcpTransport::Impl::ConnectMesh(const std::vector<Endpoint>& endpoints, Deadline deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) throw Error(Status::Shutdown("ConnectMesh on a closed transport"));
  }
  if (connected_.load() || io_thread_.joinable()) {
    throw Error(Status::InvalidArgument("ConnectMesh called twice"));
  }
  MeshSpec spec;
  spec.rank = opts_.rank;
  spec.size = opts_.size;
  spec.data_streams = opts_.data_streams;
  spec.job_token = job_token_.load();
  spec.secret = secret_;
  spec.socket_buffer_bytes = opts_.socket_buffer_bytes;
  spec.connect_timeout_seconds = opts_.connect_timeout_seconds;
  // Lazy connections need every peer's endpoint and no late joiners (whose endpoints the members
  // never learn): elastic dedicated-server jobs keep the full mesh.
  lazy_ = opts_.lazy_connections && opts_.vacant_slots == 0 &&
          std::none_of(endpoints.begin(), endpoints.end(), [](const Endpoint& e) { return e.port == 0; });
  std::vector<std::vector<int>> fds(opts_.size);
  if (lazy_) {
    connector_ = std::make_unique<LazyConnector>(spec, listen_fd_, endpoints);
    connector_wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (connector_wake_fd_ < 0) throw Error(Status::Internal("TcpTransport: eventfd: " + ErrnoText(errno)));
    for (int r = 0; r < opts_.size; ++r) {
      if (r != opts_.rank) fds[r].assign(opts_.data_streams + 1, -1);  // streams without sockets yet
    }
  } else {
    fds = BuildMesh(spec, listen_fd_, endpoints, deadline);
  }

  int64_t now = NowNs();
  for (int r = 0; r < opts_.size; ++r) {
    Peer* p = peers_[r].get();
    p->last_send_ns = now;
    p->last_recv_ns = now;
    if (r != opts_.rank && fds[r].empty()) p->vacant = true;  // absent (a retired rank)
    p->linked = !lazy_ && !fds[r].empty();
    for (size_t i = 0; i < fds[r].size(); ++i) {
      auto s = std::make_unique<Stream>();
      s->peer = p;
      s->index = static_cast<int>(i);
      s->fd = fds[r][i];
      if (s->fd >= 0) {
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
        ev.data.ptr = s.get();
        epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, s->fd, &ev);
      }
      p->streams.push_back(std::move(s));
    }
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (opts_.vacant_slots == 0 && !lazy_) {
    // Nobody legitimate connects after the mesh: the I/O thread drops whoever does at once.
    ev.data.ptr = &listener_marker_;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  }
  ev.data.ptr = &wake_marker_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, event_fd_, &ev);
  next_liveness_check_ = Clock::now();
  connected_.store(true);
  io_thread_ = std::thread([this] { IoLoop(); });
  NameThread(io_thread_, "herring-tcp-io");
  if (opts_.vacant_slots > 0) {
    admission_thread_ = std::thread([this] { RunAdmission(); });
    NameThread(admission_thread_, "herring-admit");
  }
  if (lazy_) {
    connector_thread_ = std::thread([this] { RunConnector(); });
    NameThread(connector_thread_, "herring-dial");
  }
}

// ------------------------------------------------------------------------------------------
// Lazy connections

void TcpTransport::Impl::WantPeer(int peer) {
  if (!lazy_ || peer == opts_.rank) return;
  Peer* p = peers_[peer].get();
  if (p->want_asked.load(std::memory_order_relaxed) || p->want_asked.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(want_mu_);
    want_queue_.push_back(peer);
  }
  uint64_t one = 1;
  ssize_t n = write(connector_wake_fd_, &one, sizeof(one));
  (void)n;
}

// The connector thread: runs the handshakes (lazy_connections), off the I/O thread, and hands
// each connected (or given up) peer to the I/O thread, which owns the streams.
void TcpTransport::Impl::RunConnector() {
  while (!connector_stop_.load()) {
    std::vector<int> wanted;
    {
      std::lock_guard<std::mutex> lock(want_mu_);
      wanted.swap(want_queue_);
    }
    try {
      for (int peer : wanted) connector_->Want(peer);
      connector_->PollOnce(connector_wake_fd_, 200);
    } catch (const std::exception& e) {
      HLOG(Error) << RankText(opts_.rank) << ": the connector failed: " << e.what();
      break;
    }
    uint64_t count;
    ssize_t r = read(connector_wake_fd_, &count, sizeof(count));
    (void)r;
    std::vector<LinkResult> results;
    for (auto& c : connector_->TakeConnected()) results.push_back({c.peer, std::move(c.fds), ""});
    for (auto& f : connector_->TakeFailed()) results.push_back({f.peer, {}, std::move(f.why)});
    if (results.empty()) continue;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& res : results) link_results_.push_back(std::move(res));
    }
    Wake();
  }
}

// I/O thread: a connected peer's sockets go into its streams (whose queued frames now leave); a
// peer the connector gave up on is lost, naming it.
void TcpTransport::Impl::AttachLinks() {
  std::vector<LinkResult> results;
  {
    std::lock_guard<std::mutex> lock(mu_);
    results.swap(link_results_);
  }
  for (auto& res : results) {
    Peer* p = peers_[res.peer].get();
    if (res.fds.empty()) {
      LosePeer(p, Status::PeerLost(res.why));
      continue;
    }
    bool usable;
    {
      std::lock_guard<std::mutex> lock(mu_);
      usable = p->status.ok() && !p->linked && !closed_;
    }
    if (!usable) {
      for (int& fd : res.fds) CloseFd(&fd);
      continue;
    }
    LinkStreams(p, res.fds);
  }
}

void TcpTransport::Impl::LinkStreams(Peer* p, const std::vector<int>& fds) {
  int64_t now = NowNs();
  p->last_send_ns = now;
  p->last_recv_ns = now;
  p->linked = true;
  for (size_t i = 0; i < fds.size() && i < p->streams.size(); ++i) {
    Stream* s = p->streams[i].get();
    {
      std::lock_guard<std::mutex> lock(s->write_mu);
      s->fd = fds[i];
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.ptr = s;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, s->fd, &ev);
  }
  for (auto& s : p->streams) FlushFromIoThread(s.get());  // what was sent before the pair connected
}

void TcpTransport::Impl::Close() {
  std::lock_guard<std::mutex> close_lock(close_mu_);
  if (close_done_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  if (io_thread_.joinable()) {
    stop_requested_.store(true);
    Wake();
    io_thread_.join();
  }
  if (admission_thread_.joinable()) admission_thread_.join();  // it polls stop_requested_
  if (connector_thread_.joinable()) {
    // After the I/O thread: connections that complete while it says goodbye still get theirs.
    connector_stop_.store(true);
    uint64_t one = 1;
    ssize_t n = write(connector_wake_fd_, &one, sizeof(one));
    (void)n;
    connector_thread_.join();
  }
  connector_.reset();
  CloseFd(&connector_wake_fd_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& a : admitted_) CloseFd(&a.fd);
    admitted_.clear();
    for (auto& res : link_results_) {
      for (int& fd : res.fds) CloseFd(&fd);
    }
    link_results_.clear();
  }
  for (auto& p : peers_) {
    for (int& fd : p->arriving) CloseFd(&fd);
  }
  // Anything still pending (no I/O thread ever ran, or posted while it was stopping).
  FailPending(Status::Shutdown(RankText(opts_.rank) +
                               ": the transport was closed while this transfer was pending"),
              -1);
  CloseAllSockets();
  CloseFd(&listen_fd_);
  CloseFd(&epoll_fd_);
  CloseFd(&event_fd_);
  close_done_ = true;
}

void TcpTransport::Impl::CloseAllSockets() {
  for (auto& p : peers_) {
    for (auto& s : p->streams) {
      std::lock_guard<std::mutex> lock(s->write_mu);
      s->write_closed = true;
      s->read_closed = true;
      s->queue.clear();
      if (s->fd >= 0 && epoll_fd_ >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, s->fd, nullptr);
      CloseFd(&s->fd);
    }
  }
}

// ------------------------------------------------------------------------------------------
// Sending

Status TcpTransport::Impl::CheckPeerArgument(int peer, const char* what) const {
  if (peer < 0 || peer >= static_cast<int>(peers_.size())) {
    return Status::InvalidArgument(std::string(what) + " to/from rank " + std::to_string(peer) +
                                   " outside a job of size " + std::to_string(opts_.size));
  }
  return Status::OK();
}

Status TcpTransport::Impl::RefusalLocked(const char* what) const {
  if (!abort_.ok()) return abort_;
  if (closed_) return Status::Shutdown(RankText(opts_.rank) + ": " + what + " on a closed transport");
  if (!connected_.load()) return Status::InvalidArgument(RankText(opts_.rank) + ": " + what + " before ConnectMesh");
  return Status::OK();
}

CompletionPtr TcpTransport::Impl::Send(int peer, uint64_t tag, const void* data, size_t bytes) {
  Status bad = CheckPeerArgument(peer, "Send");
  if (!bad.ok()) return FinishedCompletion(bad);
  if (bytes > kMaxMessageBytes) {
    return FinishedCompletion(Status::InvalidArgument(
        "Send of " + std::to_string(bytes) + " bytes exceeds the limit of " +
        std::to_string(kMaxMessageBytes)));
  }
  if (peer == opts_.rank) return SendToSelf(tag, data, bytes);

  auto msg = std::make_shared<OutMessage>();
  msg->key = MessageKey{peer, tag};
  msg->done = std::make_shared<Completion>();
  size_t chunks = bytes == 0 ? 1 : (bytes + opts_.chunk_bytes - 1) / opts_.chunk_bytes;
  msg->frames_left = chunks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Status refuse = RefusalLocked("Send");
    if (!refuse.ok()) {
      // the transport takes no transfer now
    } else if (peers_[peer]->vacant) {
      refuse = Status::InvalidArgument(RankText(peer) + " has not joined the job");
    } else if (!peers_[peer]->status.ok()) {
      refuse = peers_[peer]->status;
    } else if (out_.count(msg->key) != 0) {
      refuse = Status::InvalidArgument(RankText(opts_.rank) + ": a send to rank " +
                                       std::to_string(peer) + " with tag " +
                                       std::to_string(tag) + " is already in flight");
    }
    if (!refuse.ok()) return FinishedCompletion(refuse);
    out_[msg->key] = msg;
  }
  WantPeer(peer);
  EnqueueChunks(msg, static_cast<const uint8_t*>(data), bytes);
  return msg->done;
}

void TcpTransport::Impl::EnqueueChunks(const std::shared_ptr<OutMessage>& msg,
                                       const uint8_t* data, size_t bytes) {
  Peer* p = peers_[msg->key.peer].get();
  size_t chunks = msg->frames_left.load();
  const int streams = streams_in_use_.load(std::memory_order_relaxed);
  FinishedSends finished;
  for (size_t k = 0; k < chunks; ++k) {
    size_t offset = k * opts_.chunk_bytes;
    size_t len = std::min(opts_.chunk_bytes, bytes - offset);
    OutFrame f;
    FillHeader(&f, FrameKind::kData, msg->key.tag, offset, bytes, len);
    f.payload = data + offset;
    f.msg = msg;
    Stream* s = p->streams[1 + k % streams].get();
    std::lock_guard<std::mutex> lock(s->write_mu);
    // A failed message (abort, lost peer) was finished already: its buffer is the caller's again.
    if (s->write_closed || msg->failed.load()) break;
    Enqueue(s, std::move(f), &finished);
  }
  FinishSends(&finished);
}

// Requires s->write_mu. Writes directly from the calling thread when the queue was empty (the
// fast path); otherwise the I/O thread is already responsible for the queue.
void TcpTransport::Impl::Enqueue(Stream* s, OutFrame frame, FinishedSends* finished) {
  s->queue.push_back(std::move(frame));
  if (s->queue.size() != 1) return;
  if (FlushLocked(s, SIZE_MAX, finished) == WriteResult::kError) {
    check_write_errors_.store(true);
    Wake();
  }
}

// Requires s->write_mu. Writes queued frames until the queue is empty, the socket is full
// (EAGAIN: the edge-triggered EPOLLOUT will call back), the budget is spent, or an error.
TcpTransport::Impl::WriteResult TcpTransport::Impl::FlushLocked(Stream* s, size_t budget,
                                                                FinishedSends* finished) {
  size_t sent_total = 0;
  while (!s->queue.empty()) {
    if (s->write_closed) return WriteResult::kError;
    if (s->fd < 0) return WriteResult::kBlocked;  // not connected yet (lazy): sent once it is
    if (sent_total >= budget) return WriteResult::kBudget;
    iovec iov[kMaxIov];
    int n_iov = 0;
    for (auto it = s->queue.begin(); it != s->queue.end() && n_iov + 2 <= kMaxIov; ++it) {
      if (it->written < kFrameHeaderBytes) {
        iov[n_iov++] = {it->header + it->written, kFrameHeaderBytes - it->written};
      }
      size_t payload_done = it->written > kFrameHeaderBytes ? it->written - kFrameHeaderBytes : 0;
      if (it->payload_bytes > payload_done) {
        iov[n_iov++] = {const_cast<uint8_t*>(it->payload_data()) + payload_done,
                        it->payload_bytes - payload_done};
      }
    }
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = n_iov;
    ssize_t n = sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return WriteResult::kBlocked;
      s->write_error = errno;
      return WriteResult::kError;
    }
    bytes_sent_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
    s->peer->last_send_ns.store(NowNs(), std::memory_order_relaxed);
    sent_total += static_cast<size_t>(n);
    size_t left = static_cast<size_t>(n);
    while (left > 0) {
      OutFrame& front = s->queue.front();
      size_t take = std::min(left, front.total_bytes() - front.written);
      front.written += take;
      left -= take;
      if (front.written == front.total_bytes()) {
        if (front.msg && front.msg->frames_left.fetch_sub(1) == 1) {
          finished->push_back(std::move(front.msg));
        }
        s->queue.pop_front();
      }
    }
  }
  return WriteResult::kDrained;
}

void TcpTransport::Impl::FinishSends(FinishedSends* finished) {
  if (finished->empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& msg : *finished) {
      auto it = out_.find(msg->key);
      if (it != out_.end() && it->second == msg) out_.erase(it);
    }
  }
  for (const auto& msg : *finished) msg->done->Finish(Status::OK());  // ignored if it failed
  finished->clear();
}

CompletionPtr TcpTransport::Impl::SendToSelf(uint64_t tag, const void* data, size_t bytes) {
  MessageKey key{opts_.rank, tag};
  std::shared_ptr<InMessage> target;  // a posted receive, or a new unexpected message
  Status recv_failure;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!abort_.ok()) return FinishedCompletion(abort_);
    if (closed_) {
      return FinishedCompletion(
          Status::Shutdown(RankText(opts_.rank) + ": Send on a closed transport"));
    }
    auto it = in_.find(key);
    if (it != in_.end()) {
      target = it->second;
      if (!target->recv || target->total_known) {
        return FinishedCompletion(Status::InvalidArgument(
            RankText(opts_.rank) + ": a send to itself with tag " + std::to_string(tag) +
            " is already in flight"));
      }
      in_.erase(it);
      if (target->user_bytes != bytes) {
        recv_failure = Status::InvalidArgument(MismatchText(key, target->user_bytes, bytes));
      }
    } else {
      target = std::make_shared<InMessage>();
      target->key = key;
      target->mode = InMessage::Mode::kTemp;
      target->total_known = true;
      target->total = bytes;
      if (bytes > 0) {
        target->temp.reset(new (std::nothrow) uint8_t[bytes]);
        if (!target->temp) {
          return FinishedCompletion(Status::Internal(
              RankText(opts_.rank) + ": cannot buffer a " + std::to_string(bytes) +
              "-byte message to itself"));
        }
      }
      in_[key] = target;
      unexpected_messages_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (target->mode == InMessage::Mode::kUser) {
    // The receive was posted first and is now ours alone: copy straight into it.
    if (recv_failure.ok() && bytes > 0) std::memcpy(target->user, data, bytes);
    target->recv->Finish(recv_failure);
    return FinishedCompletion(Status::OK());
  }
  if (bytes > 0) std::memcpy(target->temp.get(), data, bytes);
  std::vector<RecvAction> actions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    target->received = bytes;
    if (target->recv) {  // posted while we copied
      auto it = in_.find(key);
      if (it != in_.end() && it->second == target) in_.erase(it);
      if (target->mode == InMessage::Mode::kTemp) {
        actions.push_back({target, target->recv, Status::OK(), true});
      }
    } else if (target->mode == InMessage::Mode::kDiscard) {
      auto it = in_.find(key);
      if (it != in_.end() && it->second == target) in_.erase(it);
    } else {
      target->complete = true;
    }
  }
  RunRecvActions(&actions);
  return FinishedCompletion(Status::OK());
}

std::string TcpTransport::Impl::MismatchText(const MessageKey& key, uint64_t expected,
                                             uint64_t sent) const {
  return SizeMismatchText(opts_.rank, key.peer, key.tag, expected, sent);
}

// ------------------------------------------------------------------------------------------
// Receiving (caller side)

CompletionPtr TcpTransport::Impl::Recv(int peer, uint64_t tag, void* data, size_t bytes) {
  Status bad = CheckPeerArgument(peer, "Recv");
  if (!bad.ok()) return FinishedCompletion(bad);
  MessageKey key{peer, tag};
  auto done = std::make_shared<Completion>();
  std::shared_ptr<InMessage> ready;  // complete unexpected message to copy out
  bool want = false;                 // a receive from a peer: connect to it (lazy connections)
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!abort_.ok()) return FinishedCompletion(abort_);
    if (closed_) {
      return FinishedCompletion(
          Status::Shutdown(RankText(opts_.rank) + ": Recv on a closed transport"));
    }
    if (peers_[peer]->vacant) {
      return FinishedCompletion(Status::InvalidArgument(RankText(peer) + " has not joined the job"));
    }
    auto it = in_.find(key);
    if (it != in_.end()) {
      std::shared_ptr<InMessage> m = it->second;
      if (m->recv || m->mode == InMessage::Mode::kDiscard) {
        return FinishedCompletion(Status::InvalidArgument(
            RankText(opts_.rank) + ": a receive of tag " + std::to_string(tag) + " from rank " +
            std::to_string(peer) + " is already posted (or failed)"));
      }
      if (m->total != bytes) {
        // The message is dropped: a receive of the wrong size means the ranks disagree about
        // the collective, and the job is about to fail with this message.
        if (m->complete) {
          in_.erase(it);
        } else {
          m->mode = InMessage::Mode::kDiscard;
        }
        return FinishedCompletion(Status::InvalidArgument(MismatchText(key, bytes, m->total)));
      }
      if (m->complete) {
        in_.erase(it);
        ready = std::move(m);
      } else {
        // Still arriving into its temporary buffer: the I/O thread copies it out at the end.
        m->recv = done;
        m->user = static_cast<uint8_t*>(data);
        m->user_bytes = bytes;
      }
    } else {
      if (peer != opts_.rank) {
        if (!connected_.load()) {
          return FinishedCompletion(
              Status::InvalidArgument(RankText(opts_.rank) + ": Recv before ConnectMesh"));
        }
        if (!peers_[peer]->status.ok()) return FinishedCompletion(peers_[peer]->status);
      }
      want = peer != opts_.rank;
      auto m = std::make_shared<InMessage>();
      m->key = key;
      m->mode = InMessage::Mode::kUser;
      m->recv = done;
      m->user = static_cast<uint8_t*>(data);
      m->user_bytes = bytes;
      in_[key] = std::move(m);
    }
  }
  if (want) WantPeer(peer);
  if (ready) {
    if (bytes > 0) std::memcpy(data, ready->temp.get(), bytes);
    done->Finish(Status::OK());
  }
  return done;
}

void TcpTransport::Impl::RunRecvActions(std::vector<RecvAction>* actions) {
  for (auto& a : *actions) {
    InMessage* m = a.msg.get();
    if (a.copy_temp) {
      std::lock_guard<std::mutex> lock(m->io_mu);
      if (m->detached) continue;  // failed meanwhile (abort): the failure already finished it
      if (m->total > 0) std::memcpy(m->user, m->temp.get(), m->total);
    } else if (!a.status.ok()) {
      // Whoever fails a receive detaches it first, so the I/O thread stops writing into it.
      std::lock_guard<std::mutex> lock(m->io_mu);
      m->detached = true;
    }
    a.recv->Finish(a.status);
  }
  actions->clear();
}

// ------------------------------------------------------------------------------------------
// Control messages

void TcpTransport::Impl::SendControl(int peer, uint32_t type, const std::string& payload) {
  if (peer < 0 || peer >= static_cast<int>(peers_.size())) {
    throw Error(CheckPeerArgument(peer, "SendControl"));
  }
  if (payload.size() >= kMaxControlPayloadBytes) {
    throw Error(Status::InvalidArgument("control payload of " + std::to_string(payload.size()) +
                                        " bytes exceeds the limit of " +
                                        std::to_string(kMaxControlPayloadBytes)));
  }
  if (peer == opts_.rank) {
    {
      std::lock_guard<std::mutex> lock(inbox_mu_);
      inbox_.push_back(ControlMessage{peer, type, payload});
      inbox_count_.store(inbox_.size(), std::memory_order_release);
    }
    notify_requested_.store(true);
    Wake();
    return;
  }
  if (!connected_.load()) {
    throw Error(Status::InvalidArgument(RankText(opts_.rank) + ": SendControl before ConnectMesh"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || peers_[peer]->vacant || !peers_[peer]->status.ok()) return;  // reported elsewhere
  }
  WantPeer(peer);
  OutFrame f;
  FillHeader(&f, FrameKind::kControl, type, 0, 0, payload.size());
  f.owned.assign(payload.begin(), payload.end());
  Stream* s = peers_[peer]->streams[0].get();
  FinishedSends unused;
  std::lock_guard<std::mutex> lock(s->write_mu);
  if (s->write_closed) return;
  Enqueue(s, std::move(f), &unused);
}

bool TcpTransport::Impl::PopControl(ControlMessage* out) {
  if (inbox_count_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(inbox_mu_);
  if (inbox_.empty()) return false;
  *out = std::move(inbox_.front());
  inbox_.pop_front();
  inbox_count_.store(inbox_.size(), std::memory_order_release);
  return true;
}

// ------------------------------------------------------------------------------------------
// Status, abort, failure

Status TcpTransport::Impl::PeerStatus(int peer) const {
  Status bad = CheckPeerArgument(peer, "PeerStatus");
  if (!bad.ok()) return bad;
  std::lock_guard<std::mutex> lock(mu_);
  if (peers_[peer]->vacant) return Status::InvalidArgument(RankText(peer) + " has not joined the job");
  return peers_[peer]->status;
}

bool TcpTransport::Impl::Joined(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(peers_.size())) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return !peers_[peer]->vacant;
}

void TcpTransport::Impl::RecordFailureLocked(const Status& status) {
  // An orderly shutdown of a peer is the least telling failure: a crash, a reset or an abort
  // reason from a peer that came later explains more, so it replaces it.
  if (first_failure_.ok() ||
      (first_failure_.code() == StatusCode::kShutdown && status.code() != StatusCode::kShutdown)) {
    first_failure_ = status;
    has_failure_.store(true, std::memory_order_release);
  }
}

Status TcpTransport::Impl::FirstFailure() const {
  if (!has_failure_.load(std::memory_order_acquire)) return Status::OK();
  std::lock_guard<std::mutex> lock(mu_);
  return first_failure_;
}

TcpTransport::Stats TcpTransport::Impl::stats() const {
  Stats s;
  s.bytes_sent = bytes_sent_.load();
  s.bytes_received = bytes_received_.load();
  s.unexpected_messages = unexpected_messages_.load();
  for (const auto& p : peers_) {
    {
      // A vacant slot's streams are being built by the I/O thread (AdmitJoiners appends to the
      // vector, then clears vacant under mu_): read them only once the joiner is in.
      std::lock_guard<std::mutex> lock(mu_);
      if (p->vacant) continue;
    }
    uint64_t open = 0;
    for (const auto& st : p->streams) {
      std::lock_guard<std::mutex> lock(st->write_mu);
      if (st->fd >= 0) ++open;
    }
    s.open_sockets += open;
    s.connected_peers += open > 0 ? 1 : 0;
  }
  return s;
}

void TcpTransport::Impl::Abort(const Status& reason) {
  Status status = reason.ok() ? Status::Aborted(RankText(opts_.rank) + ": transport aborted")
                              : reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (abort_.ok()) abort_ = status;
    status = abort_;
  }
  FailPending(status, -1);
}

void TcpTransport::Impl::FailPending(const Status& status, int only_peer) {
  std::vector<std::shared_ptr<OutMessage>> sends;
  std::vector<RecvAction> recvs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = out_.begin(); it != out_.end();) {
      if (only_peer >= 0 && it->first.peer != only_peer) {
        ++it;
        continue;
      }
      if (it->second->frames_left.load() == 0) {
        // Every byte is with the kernel: the send completed, and the thread that wrote its last
        // frame finishes it (FinishSends) once it runs again. A peer that read it and said
        // goodbye meanwhile (the writer preempted by that very wake-up) must not fail it.
        ++it;
        continue;
      }
      it->second->failed.store(true);
      sends.push_back(std::move(it->second));
      it = out_.erase(it);
    }
    for (auto it = in_.begin(); it != in_.end();) {
      InMessage* m = it->second.get();
      bool mine = only_peer < 0 || it->first.peer == only_peer;
      if (!mine || m->complete) {
        ++it;  // complete messages stay receivable: their bytes are all here
        continue;
      }
      if (m->recv) recvs.push_back({it->second, m->recv, status, false});
      // A message whose chunks are still arriving from a live peer keeps its entry (as a
      // discard) so its later chunks do not start a new one; one that never started, or whose
      // peer is gone, goes.
      if (m->total_known && only_peer < 0) {
        m->mode = InMessage::Mode::kDiscard;
        m->recv = nullptr;
        ++it;
      } else {
        it = in_.erase(it);
      }
    }
    if (!any_waits_.empty()) FailAnySourceLocked(status, only_peer);
  }
  RunSettledAnySource();
  if (!sends.empty()) {
    for (auto& p : peers_) {
      if (only_peer >= 0 && p->rank != only_peer) continue;
      for (auto& s : p->streams) ScrubFailedFrames(s.get());
    }
  }
  RunRecvActions(&recvs);
  for (auto& msg : sends) msg->done->Finish(status);
}

// Removes queued chunks of failed sends. A chunk already partly on the wire must still be
// finished (the stream would lose its framing otherwise), so its tail is copied out of the
// caller's buffer first.
void TcpTransport::Impl::ScrubFailedFrames(Stream* s) {
  std::lock_guard<std::mutex> lock(s->write_mu);
  std::deque<OutFrame> kept;
  for (auto& f : s->queue) {
    if (!f.msg || !f.msg->failed.load()) {
      kept.push_back(std::move(f));
      continue;
    }
    if (f.written == 0) continue;
    size_t payload_done = f.written > kFrameHeaderBytes ? f.written - kFrameHeaderBytes : 0;
    f.owned.assign(f.payload + payload_done, f.payload + f.payload_bytes);
    if (f.written >= kFrameHeaderBytes) {
      f.payload_bytes -= payload_done;
      f.written = kFrameHeaderBytes;
    }
    f.payload = nullptr;
    f.msg = nullptr;
    kept.push_back(std::move(f));
  }
  s->queue.swap(kept);
}

void TcpTransport::Impl::NotifyEvent() {
  if (opts_.on_event) opts_.on_event();
}

void TcpTransport::Impl::Wake() {
  if (event_fd_ < 0) return;
  uint64_t one = 1;
  ssize_t n = write(event_fd_, &one, sizeof(one));
  (void)n;  // EAGAIN means the counter is already non-zero: the loop wakes anyway
}

// ------------------------------------------------------------------------------------------
// Public wrappers

TcpTransport::TcpTransport(TransportOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
TcpTransport::~TcpTransport() = default;
Endpoint TcpTransport::listen_endpoint() const { return impl_->listen_endpoint(); }
int TcpTransport::rank() const { return impl_->rank(); }
int TcpTransport::size() const { return impl_->size(); }
void TcpTransport::set_job_token(uint64_t token) { impl_->set_job_token(token); }
bool TcpTransport::Joined(int peer) const { return impl_->Joined(peer); }
void TcpTransport::set_secret(const std::string& secret) { impl_->set_secret(secret); }
void TcpTransport::set_data_streams_in_use(int streams) { impl_->set_data_streams_in_use(streams); }
void TcpTransport::ResetConnections() { impl_->ResetConnections(); }

void TcpTransport::ConnectMesh(const std::vector<Endpoint>& endpoints, Deadline deadline) {
  impl_->ConnectMesh(endpoints, deadline);
}
CompletionPtr TcpTransport::Send(int peer, uint64_t tag, const void* data, size_t bytes) {
  return impl_->Send(peer, tag, data, bytes);
}
CompletionPtr TcpTransport::Recv(int peer, uint64_t tag, void* data, size_t bytes) {
  return impl_->Recv(peer, tag, data, bytes);
}
void TcpTransport::SendControl(int peer, uint32_t type, const std::string& payload) {
  impl_->SendControl(peer, type, payload);
}
bool TcpTransport::PopControl(ControlMessage* out) { return impl_->PopControl(out); }
Status TcpTransport::PeerStatus(int peer) const { return impl_->PeerStatus(peer); }
Status TcpTransport::FirstFailure() const { return impl_->FirstFailure(); }
void TcpTransport::Abort(const Status& reason) { impl_->Abort(reason); }
void TcpTransport::Close() { impl_->Close(); }
TcpTransport::Stats TcpTransport::stats() const { return impl_->stats(); }

}  // namespace herring
