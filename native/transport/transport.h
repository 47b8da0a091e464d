// Transport: what the collectives (ops/), the server shards (ps/) and the engine's control plane
// need from the network between the ranks of a job, whatever carries the bytes: TcpTransport
// between processes, InMemoryFabric between the threads of one test. The algorithms are written
// against this class only, so they can be unit-tested without processes or sockets.
//
// The contract every implementation keeps:
//  - Bulk messages carry a 64-bit tag chosen by the collective. A Send to rank P with tag T meets
//    the Recv that P posts for (this rank, T), whichever of the two is posted first; data that
//    arrives first is buffered until its receive is posted.
//  - At most one message per (peer, tag) may be in flight in each direction; a second Send or
//    Recv with the same key fails at once with InvalidArgument.
//  - Sizes must match exactly: a Recv of N bytes met by a message of M != N bytes fails with
//    InvalidArgument (SizeMismatchText: the receiver, the tag, the peer and both sizes) and the
//    message is dropped. The sender is not told: the receiver's error is the job's error.
//  - A Send's data stays valid and untouched, and a Recv's buffer is not touched by the caller,
//    until the completion is done. peer == rank() is a local copy. Zero-byte messages are fine.
//  - Completions finish exactly once (finished_at is set then); wait on them with a deadline
//    (Completion::Wait, WaitAll). Nothing here blocks: Send and Recv return at once.
//  - A lost peer: every pending and later transfer with it fails with PeerLost, the message
//    starting "rank <peer>: ", except messages already received in full, which stay receivable.
//  - Abort(reason) fails every pending and later Send/Recv of this rank with `reason`; control
//    messages still flow, so the rank can tell the others why it stopped.
//  - Control messages are small, delivered in order per peer into an inbox that PopControl
//    drains; a control message to a lost peer is dropped silently (PeerStatus reports the loss).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "transport/completion.h"

namespace herring {

struct ControlMessage {
  int from = -1;
  uint32_t type = 0;
  std::string payload;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Tagged bulk transfers (see the contract above).
  virtual CompletionPtr Send(int peer, uint64_t tag, const void* data, size_t bytes) = 0;
  virtual CompletionPtr Recv(int peer, uint64_t tag, void* data, size_t bytes) = 0;

  // Control messages, in order per peer. PopControl does not block: false when the inbox is empty.
  virtual void SendControl(int peer, uint32_t type, const std::string& payload) = 0;
  virtual bool PopControl(ControlMessage* out) = 0;

  // OK while `peer` is reachable, else why not (PeerLost, Shutdown...).
  virtual Status PeerStatus(int peer) const = 0;
  // The first failure this rank observed (OK if none).
  virtual Status FirstFailure() const = 0;
  // Fails every pending and future Send/Recv of this rank with `reason`.
  virtual void Abort(const Status& reason) = 0;
  // Fault injection (HERRING_FAULT=reset): this rank's links all drop at once, with no goodbye,
  // as a crashed host would look to its peers.
  virtual void ResetConnections() = 0;
};

// The error text of a size mismatch, the same from every implementation.
std::string SizeMismatchText(int me, int peer, uint64_t tag, uint64_t expected, uint64_t sent);

}  // namespace herring
