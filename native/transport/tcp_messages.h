// Bookkeeping shared by the TcpTransport's caller threads and its I/O thread (private to
// transport/): messages being sent or received, queued frames, and the per-connection state.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/completion.h"
#include "transport/frame.h"

namespace herring {
namespace tcp {

struct MessageKey {
  int peer = 0;
  uint64_t tag = 0;
  bool operator==(const MessageKey& o) const { return peer == o.peer && tag == o.tag; }
};

struct MessageKeyHash {
  size_t operator()(const MessageKey& k) const {
    return std::hash<uint64_t>()(k.tag * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(k.peer));
  }
};

// A bulk message being sent: its chunks sit in the write queues of the peer's data streams.
struct OutMessage {
  MessageKey key;
  CompletionPtr done;
  std::atomic<size_t> frames_left{0};
  // Set (before the streams are scrubbed) when the send failed: no more of its frames may be
  // queued, because the caller may reuse its buffer as soon as the completion is done.
  std::atomic<bool> failed{false};
};

// One frame in a stream's write queue: the encoded header, then the payload.
struct OutFrame {
  uint8_t header[kFrameHeaderBytes];
  const uint8_t* payload = nullptr;  // caller memory (data) or owned.data()
  size_t payload_bytes = 0;
  size_t written = 0;                // bytes of header + payload already on the socket
  std::shared_ptr<OutMessage> msg;   // set for data chunks that still point at caller memory
  std::vector<uint8_t> owned;        // control payloads; rescued tails of failed data chunks

  size_t total_bytes() const { return kFrameHeaderBytes + payload_bytes; }
  const uint8_t* payload_data() const { return owned.empty() ? payload : owned.data(); }
};

// A bulk message being received, keyed by (peer, tag). Fields are guarded by the transport's
// state mutex except where noted.
struct InMessage {
  enum class Mode {
    kUser,     // a receive was posted first: chunks land straight in the caller's buffer
    kTemp,     // data arrived first: chunks land in `temp`, copied out when the receive comes
    kDiscard,  // the receive failed (size mismatch, abort): remaining chunks are read and dropped
  };
  MessageKey key;
  Mode mode = Mode::kUser;
  bool total_known = false;  // set by the first chunk
  uint64_t total = 0;
  uint64_t received = 0;
  bool complete = false;     // kTemp only: every byte is in `temp`, waiting for its receive
  uint64_t arrival = 0;      // kTemp only: its place in the order unexpected messages arrived
  CompletionPtr recv;        // the posted receive, if any
  uint8_t* user = nullptr;
  size_t user_bytes = 0;
  std::unique_ptr<uint8_t[]> temp;

  // Held by the I/O thread while it writes into caller memory (recv() into `user`, or the copy
  // out of `temp`). Failing the receive from another thread takes it to set `detached`, after
  // which nothing touches `user` again - so the caller may free its buffer once the receive's
  // completion is done.
  std::mutex io_mu;
  bool detached = false;  // guarded by io_mu
};

struct Peer;

// One TCP connection to a peer. Index 0 carries control frames, 1..data_streams carry data.
struct Stream {
  Peer* peer = nullptr;
  int index = 0;

  // Write side, shared by caller threads (direct writes) and the I/O thread.
  std::mutex write_mu;
  int fd = -1;                  // closed only by the I/O thread, under write_mu
  bool write_closed = false;    // guarded by write_mu
  std::deque<OutFrame> queue;   // guarded by write_mu
  int write_error = 0;          // guarded by write_mu: errno of a failed write

  // Read side: I/O thread only.
  bool read_closed = false;
  uint8_t header[kFrameHeaderBytes];
  size_t header_got = 0;
  bool in_payload = false;
  FrameHeader frame;
  uint64_t payload_got = 0;
  std::string control;              // payload of the control frame being read
  std::shared_ptr<InMessage> msg;   // message of the data chunk being read
  uint8_t* dest = nullptr;          // where byte 0 of that chunk goes; null: discard it
  bool dest_is_user = false;        // dest points into InMessage::user
  bool goodbye = false;             // the peer said goodbye on this stream
  bool read_carried = false;        // queued for another read turn
  bool write_carried = false;       // queued for another write turn
};

struct Peer {
  int rank = 0;
  std::vector<std::unique_ptr<Stream>> streams;
  std::atomic<int64_t> last_send_ns{0};  // any bytes written to any of its streams
  std::atomic<int64_t> last_recv_ns{0};  // any bytes read from any of its streams
  Status status;                         // guarded by the transport's state mutex
  int goodbyes = 0;                      // I/O thread only
  bool vacant = false;                   // a slot for a late joiner, not connected (state mutex)
  std::vector<int> arriving;             // a joiner's fds by stream until all arrived (I/O thread)
  // Lazy connections: the streams exist from ConnectMesh on, without fds until the pair connects
  // (frames queue meanwhile). linked: the fds are in place (I/O thread only); want_asked: the
  // connector was asked to connect it (set once, by whichever thread first needs the peer).
  bool linked = false;
  std::atomic<bool> want_asked{false};
};

}  // namespace tcp
}  // namespace herring
