// TcpTransport::Impl, private to transport/: the state shared by the callers' side
// (tcp_transport.cc: sends, receives, control, abort, close) and the I/O thread (tcp_io_loop.cc:
// epoll loop, frame parsing, liveness). See tcp_transport.h for the behaviour and
// tcp_messages.h for the bookkeeping structures.
//
// Locking: mu_ guards the message tables, peer statuses and abort/close state; each stream's
// write_mu guards its write queue and fd; InMessage::io_mu guards writes into a caller's receive
// buffer; inbox_mu_ guards the control inbox. No two of these are ever held at once (work that
// needs two is split, e.g. a flush under write_mu collects finished sends, which are retired
// under mu_ afterwards), and callbacks (on_event, completions) run with no lock held.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "transport/frame.h"
#include "transport/tcp_mesh.h"
#include "transport/tcp_messages.h"
#include "transport/tcp_transport.h"

namespace herring {

using tcp::InMessage;
using tcp::MessageKey;
using tcp::OutFrame;
using tcp::OutMessage;
using tcp::Peer;
using tcp::Stream;

namespace tcp {

// Bytes one stream may read or write per turn of the I/O loop, so a bulk transfer cannot starve
// the control stream (whose latency the negotiation cycle pays).
constexpr size_t kIoBudgetBytes = 4 << 20;
constexpr size_t kScratchBytes = 256 << 10;  // sink for payload bytes that are being discarded
constexpr int kMaxIov = 64;
constexpr int kMaxEvents = 64;
// Close() waits this long for goodbyes (and queued control messages) to leave.
constexpr auto kCloseFlushTimeout = std::chrono::seconds(1);
constexpr int kMaxDataStreams = 1024;

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

inline std::string FormatSeconds(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", s);
  return text;
}

inline std::string RankText(int rank) { return "rank " + std::to_string(rank); }

inline CompletionPtr FinishedCompletion(Status status) {
  auto c = std::make_shared<Completion>();
  c->Finish(std::move(status));
  return c;
}

inline void FillHeader(OutFrame* f, FrameKind kind, uint64_t tag, uint64_t offset,
                       uint64_t total, size_t payload_bytes) {
  FrameHeader h;
  h.kind = kind;
  h.tag = tag;
  h.offset = offset;
  h.total_bytes = total;
  h.payload_bytes = static_cast<uint32_t>(payload_bytes);
  EncodeFrameHeader(h, f->header);
  f->payload_bytes = payload_bytes;
}

using FinishedSends = std::vector<std::shared_ptr<OutMessage>>;

// What to do with a receive once the state mutex is released.
struct RecvAction {
  std::shared_ptr<InMessage> msg;
  CompletionPtr recv;
  Status status;           // how to finish `recv`
  bool copy_temp = false;  // copy msg->temp into msg->user first (under msg->io_mu)
};

}  // namespace tcp

using tcp::FillHeader;
using tcp::FinishedCompletion;
using tcp::FinishedSends;
using tcp::FormatSeconds;
using tcp::kCloseFlushTimeout;
using tcp::kIoBudgetBytes;
using tcp::kMaxDataStreams;
using tcp::kMaxEvents;
using tcp::kMaxIov;
using tcp::kScratchBytes;
using tcp::NowNs;
using tcp::RankText;
using tcp::RecvAction;

class TcpTransport::Impl {
 public:
  explicit Impl(TransportOptions options);
  ~Impl();

  Endpoint listen_endpoint() const { return endpoint_; }
  int rank() const { return opts_.rank; }
  int size() const { return opts_.size; }

  void ConnectMesh(const std::vector<Endpoint>& endpoints, Deadline deadline);
  void set_job_token(uint64_t token) { job_token_ = token; }
  void set_secret(const std::string& secret) { secret_ = secret; }
  void set_data_streams_in_use(int streams) {
    streams_in_use_.store(std::clamp(streams, 1, opts_.data_streams), std::memory_order_relaxed);
  }
  void ResetConnections() {
    reset_requested_ = true;
    Close();
  }
  CompletionPtr Send(int peer, uint64_t tag, const void* data, size_t bytes);
  CompletionPtr Recv(int peer, uint64_t tag, void* data, size_t bytes);
  void RecvAny(const std::vector<AnySourceCandidate>& candidates, void* data, size_t bytes,
               const AnySourceReceivePtr& receive);
  void SendControl(int peer, uint32_t type, const std::string& payload);
  bool PopControl(ControlMessage* out);
  Status PeerStatus(int peer) const;
  bool Joined(int peer) const;
  Status FirstFailure() const;
  void RecordFailureLocked(const Status& status);  // mu_ held
  void Abort(const Status& reason);
  void Close();
  Stats stats() const;

 private:
  enum class WriteResult { kDrained, kBlocked, kBudget, kError };
  enum class ReadResult { kBlocked, kBudget, kClosed };

  // --- caller-thread helpers ---
  Status CheckPeerArgument(int peer, const char* what) const;
  // Why a transfer to or from another rank (`what`: "Send", "Recv") cannot start now: the
  // transport aborted, closed or not connected yet; OK when it can. mu_ held.
  Status RefusalLocked(const char* what) const;
  CompletionPtr SendToSelf(uint64_t tag, const void* data, size_t bytes);
  void EnqueueChunks(const std::shared_ptr<OutMessage>& msg, const uint8_t* data, size_t bytes);
  void Enqueue(Stream* s, OutFrame frame, FinishedSends* finished);
  std::string MismatchText(const MessageKey& key, uint64_t expected, uint64_t sent) const;

  // --- shared by caller threads and the I/O thread ---
  WriteResult FlushLocked(Stream* s, size_t budget, FinishedSends* finished);
  void FinishSends(FinishedSends* finished);
  void RunRecvActions(std::vector<RecvAction>* actions);
  // Fails every pending send and receive (under mu_); scrubs queued frames that point at
  // caller memory. Used by Abort, Close and peer loss (peer >= 0 limits it to one peer).
  void FailPending(const Status& status, int only_peer);
  void ScrubFailedFrames(Stream* s);
  void NotifyEvent();
  void Wake();

  // --- any-source receives (tcp_any_source.cc) ---
  // The receive waiting for the message of `key`, now taken by it: a posted receive of that key
  // (to enter in_), or null. mu_ held.
  std::shared_ptr<InMessage> BindAnySourceLocked(const MessageKey& key);
  // Fails the waiting any-source receives (only_peer >= 0: those with that candidate; a goodbye
  // only drops the candidate unless none is left). mu_ held; finished by RunSettledAnySource.
  void FailAnySourceLocked(const Status& status, int only_peer);
  // Finishes and reports what the two above settled; call with mu_ released.
  void RunSettledAnySource();

  // --- I/O thread ---
  void IoLoop();
  void RunIoLoop();
  void FailTransport(const std::string& what);
  void HandleStreamEvent(Stream* s, uint32_t events);
  void CarryRead(Stream* s);
  void CarryWrite(Stream* s);
  ReadResult ReadStream(Stream* s);
  ssize_t ReceivePayload(Stream* s, size_t want);
  Status BeginFrame(Stream* s);
  Status BeginChunk(Stream* s);
  Status LocateChunkLocked(Stream* s, std::vector<RecvAction>* actions);
  void FinishChunk(Stream* s);
  void DeliverControl(Stream* s);
  void OnStreamClosed(Stream* s, int err);
  void LosePeer(Peer* p, const Status& status);
  void FlushFromIoThread(Stream* s);
  void CheckLiveness();
  void SendPing(Peer* p);
  void AcceptAndDropStrangers();
  void AdmitJoiners();     // I/O thread: streams the admission thread handed over
  // Lazy connections: ask the connector thread for a peer (any thread); the connector thread's
  // loop; the I/O thread puts what it connected (or gave up on) in place.
  void WantPeer(int peer);
  void RunConnector();
  void AttachLinks();
  void LinkStreams(Peer* p, const std::vector<int>& fds);
  void RunAdmission();     // admission thread: accepts and authenticates late joiners
  void BeginClosing();
  bool ClosingDone() const;
  void CloseAllSockets();
  void DrainSockets();
  void CheckWriteErrors();
  int NextTimeoutMs() const;

  const TransportOptions opts_;
  std::atomic<int> streams_in_use_;  // data streams a message is striped over (<= opts_.data_streams)
  std::atomic<uint64_t> job_token_;
  std::string secret_;  // set before ConnectMesh, read only by it
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int event_fd_ = -1;
  Endpoint endpoint_;
  std::vector<std::unique_ptr<Peer>> peers_;  // by rank; peers_[rank] has no streams
  std::atomic<bool> connected_{false};        // the mesh is built and the I/O thread runs
  std::thread io_thread_;
  std::thread admission_thread_;  // only with vacant slots
  bool lazy_ = false;             // decided by ConnectMesh, constant afterwards
  std::thread connector_thread_;  // only when lazy_
  std::unique_ptr<LazyConnector> connector_;  // connector thread only
  int connector_wake_fd_ = -1;
  std::mutex want_mu_;
  std::vector<int> want_queue_;   // guarded by want_mu_
  struct LinkResult {
    int peer;
    std::vector<int> fds;  // empty: failed, with why
    std::string why;
  };
  std::vector<LinkResult> link_results_;  // guarded by mu_
  struct Admitted {
    int peer;
    int stream;
    int fd;
  };
  std::vector<Admitted> admitted_;  // guarded by mu_
  uint64_t strangers_dropped_ = 0;          // I/O thread only
  Clock::time_point last_stranger_log_{};   // I/O thread only
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> connector_stop_{false};
  std::atomic<bool> reset_requested_{false};
  std::atomic<bool> notify_requested_{false};    // fire on_event from the I/O thread
  std::atomic<bool> check_write_errors_{false};  // a caller thread's direct write failed

  mutable std::mutex mu_;  // the state below
  Status abort_;
  bool closed_ = false;
  Status first_failure_;
  // Set once first_failure_ is: the engine asks for it every cycle, and the answer is nearly
  // always "none", which this tells without taking mu_.
  std::atomic<bool> has_failure_{false};
  std::unordered_map<MessageKey, std::shared_ptr<InMessage>, tcp::MessageKeyHash> in_;
  std::unordered_map<MessageKey, std::shared_ptr<OutMessage>, tcp::MessageKeyHash> out_;
  struct AnySourceWait {
    AnySourceReceivePtr receive;
    std::vector<MessageKey> keys;  // its candidates still able to send
    void* data = nullptr;
    size_t bytes = 0;
  };
  struct AnySourceSettled {
    AnySourceReceivePtr receive;
    int peer = -1;   // the peer it took a message from; -1: none
    Status status;   // non-OK: finish the receive with it
  };
  // Any-source receives waiting for their first message, by every candidate key.
  std::unordered_map<MessageKey, std::shared_ptr<AnySourceWait>, tcp::MessageKeyHash> any_waits_;
  std::vector<AnySourceSettled> any_settled_;  // to finish and report once mu_ is released
  std::atomic<bool> any_settled_waiting_{false};  // any_settled_ is not empty: spares the hot path a lock
  uint64_t arrivals_ = 0;                      // numbers unexpected messages as they arrive

  std::mutex inbox_mu_;
  std::deque<ControlMessage> inbox_;
  // inbox_.size(), readable without inbox_mu_: the engine drains the inbox every cycle, and it is
  // nearly always empty.
  std::atomic<size_t> inbox_count_{0};

  std::mutex close_mu_;  // serializes Close()
  bool close_done_ = false;

  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> bytes_received_{0};
  std::atomic<uint64_t> unexpected_messages_{0};

  // I/O thread only.
  std::unique_ptr<uint8_t[]> scratch_;
  std::vector<Stream*> read_carry_, write_carry_;  // hit their budget: continue next turn
  bool closing_ = false;
  Clock::time_point closing_deadline_;
  Clock::time_point next_liveness_check_;
  char listener_marker_ = 0;  // epoll data.ptr tags
  char wake_marker_ = 0;
};

}  // namespace herring
