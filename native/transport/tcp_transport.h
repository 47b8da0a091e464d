// TcpTransport, the Transport between processes (transport/transport.h has the contract it
// keeps): every rank connected to every other rank by one control stream and N bulk data
// streams (TCP_NODELAY, large socket buffers), driven by one epoll I/O thread per process.
//
// Bulk messages are identified by a 64-bit tag chosen by the collective that sends them; they are
// striped over the data streams in chunks and reassembled by offset, received straight into the
// buffer the receiver posted (or into a temporary one if the data arrives first). Control
// messages are small, ordered per peer, and land in one inbox the engine drains.
//
// Connections: a full mesh at ConnectMesh, or (lazy_connections) each pair when it is first used.
// A peer this rank never connected to is never declared lost by it.
//
// Failure model: a peer whose connection closes, or who sends nothing (not even a ping) for
// peer_timeout, is lost: every pending transfer with it fails with PeerLost naming the rank, and
// on_event fires so the engine can abort the job with that message. A peer that says goodbye
// before closing shut down in order and is reported as such.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "transport/any_source_receive.h"
#include "transport/completion.h"
#include "transport/transport.h"

namespace herring {

struct Endpoint {
  std::string ip;
  uint16_t port = 0;
};

struct TransportOptions {
  int rank = 0;
  int size = 1;
  std::string bind_ip = "127.0.0.1";  // listen on this address only
  int data_streams = 2;
  size_t chunk_bytes = 1 << 20;
  int socket_buffer_bytes = 4 << 20;
  uint64_t job_token = 0;             // both ends of a connection must present the same token
  std::string secret;                 // ... and prove they hold this secret (HMAC challenge-response)
  double peer_timeout_seconds = 30;
  // HERRING_CONNECTIONS=lazy: ConnectMesh connects nobody; a pair of ranks connects when one of
  // them first sends to (or posts a receive from) the other, or when the other dials in, with the
  // same handshake, within connect_timeout_seconds (else the peer is lost, the error naming it).
  // Only without vacant slots and absent ranks (elastic dedicated servers keep the full mesh).
  bool lazy_connections = false;
  double connect_timeout_seconds = 60;
  // Ranks size .. size + vacant_slots - 1 may join after the mesh is built (elastic dedicated
  // servers): they dial in with the same handshake and are admitted into their slot.
  int vacant_slots = 0;
  // A control message of this type (0: none) aborts every pending transfer as soon as it arrives
  // (with "rank N aborted the job: <payload>"), so a failure on one rank reaches the others while
  // they wait for data, not only when they next read their inbox.
  uint32_t abort_control_type = 0;
  // Called from the I/O thread after a control message was queued or a peer was lost. Must be
  // cheap and must not call back into the transport (the engine just wakes its loop).
  std::function<void()> on_event;
};

class TcpTransport final : public Transport {
 public:
  // Binds and listens on options.bind_ip with an ephemeral port. Throws Error on failure.
  explicit TcpTransport(TransportOptions options);
  ~TcpTransport() override;
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  Endpoint listen_endpoint() const;
  int rank() const override;
  int size() const override;

  // Builds the full mesh (higher ranks connect to lower ones, with a hello/ack handshake carrying
  // rank, stream index and job token; connections from strangers are dropped), then starts the
  // I/O thread. endpoints[r] is rank r's listen endpoint. Throws Error(Timeout) naming the ranks
  // still missing at the deadline.
  void ConnectMesh(const std::vector<Endpoint>& endpoints, Deadline deadline);
  // The token both ends of every connection must present; replaces TransportOptions::job_token.
  // The engine learns it in the rendezvous, after the listener exists. Call before ConnectMesh.
  void set_job_token(uint64_t token);
  // The secret every connection must prove (replaces TransportOptions::secret). Before ConnectMesh.
  void set_secret(const std::string& secret);
  // How many of the data streams each later message is striped over (1..data_streams; the rest
  // stay connected and idle): autotune tries counts. Safe at any time, for the receiver places a
  // chunk by its (peer, tag, offset) whatever stream brings it, and no two messages in flight
  // share a (peer, tag).
  void set_data_streams_in_use(int streams);

  // Bulk transfer. `data` must stay valid and untouched until the completion is done. At most one
  // message with a given (peer, tag) may be in flight per direction. peer == rank() is delivered
  // by a local copy. Zero-byte messages are allowed.
  CompletionPtr Send(int peer, uint64_t tag, const void* data, size_t bytes) override;
  // The matching message must have exactly `bytes` bytes; otherwise the completion fails with an
  // error naming the peer, the tag and both sizes.
  CompletionPtr Recv(int peer, uint64_t tag, void* data, size_t bytes) override;

  // A receive from whichever candidate (peer, tag) sends first (transport/any_source_receive.h;
  // tcp_any_source.cc): `receive->done` finishes as a Recv's does and `receive->source` names the
  // peer. Candidates are other ranks, each (peer, tag) posted by nobody else. A candidate that
  // said goodbye is dropped (its messages that arrived before still count); one that was lost
  // fails the receive, and so does having no candidate left.
  void RecvAny(const std::vector<AnySourceCandidate>& candidates, void* data, size_t bytes,
               const AnySourceReceivePtr& receive);

  // Control messages (payload < kMaxControlPayloadBytes); delivered in order per peer. Sending to
  // a lost peer is silently dropped (its loss is reported through PeerStatus / on_event).
  void SendControl(int peer, uint32_t type, const std::string& payload) override;
  // Non-blocking; returns false when the inbox is empty.
  bool PopControl(ControlMessage* out) override;

  // OK while the peer is connected; otherwise PeerLost / Shutdown with the reason (or
  // InvalidArgument for a vacant slot nobody joined yet).
  Status PeerStatus(int peer) const override;
  // Slots for joiners: ranks in [size(), size() + vacant_slots) that dialed in since the mesh.
  bool Joined(int peer) const;
  // The first failure observed (OK if none); a peer's orderly shutdown is superseded by a later
  // crash, reset or abort reason, which says more about what went wrong.
  Status FirstFailure() const override;

  // Fails every pending and future Send/Recv with `reason`. Control messages still flow, so the
  // engine can tell the others why it stopped.
  void Abort(const Status& reason) override;
  // Says goodbye on every connection, closes them and joins the I/O thread. Idempotent.
  void Close();
  // Fault injection: closes every connection with a TCP reset and no goodbye, as a host that
  // crashed or lost its network would look to the peers.
  void ResetConnections() override;

  struct Stats {
    uint64_t bytes_sent = 0;
    uint64_t bytes_received = 0;
    uint64_t unexpected_messages = 0;  // data that arrived before its receive was posted
    uint64_t open_sockets = 0;         // connected TCP sockets to peers (streams of every peer)
    uint64_t connected_peers = 0;      // peers with at least one connected socket
  };
  Stats stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace herring
