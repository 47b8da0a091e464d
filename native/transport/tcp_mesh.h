// Builds the connections of a TcpTransport (private to transport/): rank i dials every rank j < i
// once per stream (stream 0 carries control, 1..data_streams carry bulk data) and accepts the
// streams of every rank j > i. Each connection starts with a hello / hello-ack / proof exchange
// carrying the job token in tag and (rank << 16 | stream) in offset, where rank is the sender's
// own rank (the acceptor answers with its rank), and nonces and HMAC proofs that both ends hold
// the job's secret; anything else that reaches the listener is dropped.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "transport/tcp_transport.h"

namespace herring {

struct MeshSpec {
  std::string secret;  // both ends prove they hold it (HMAC-SHA256 over fresh nonces)
  int rank = 0;
  int size = 1;
  int data_streams = 1;
  uint64_t job_token = 0;
  int socket_buffer_bytes = 0;
  // Lazy connections: how long a wanted peer may take to connect (HERRING_START_TIMEOUT_SECONDS).
  double connect_timeout_seconds = 60;
};

// The stream index of a "call me" hello (lazy connections): a lower rank that needs a higher one
// cannot dial it (higher ranks dial lower ones, so every pair has one dialer and no tie to break),
// so it dials with this stream index; the higher rank authenticates it like any hello, closes it
// and dials the streams of the pair itself.
constexpr int kCallMeStream = 0xffff;

// The proofs of the handshake: HMAC-SHA256 under the job secret of both nonces and both
// identities, with a label and an order that differ per direction ("herring-ack|" from the
// acceptor over dialer nonce then its own; "herring-proof|" from the dialer over acceptor nonce
// then its own), so no proof can be replayed or reflected.
std::string HandshakeProof(const std::string& secret, const char* label, const std::string& first_nonce,
                           const std::string& second_nonce, uint64_t dialer, uint64_t acceptor, uint64_t token);

// Runs the acceptor's side of the handshake on one connection of a process joining a built mesh
// (an elastic dedicated server): its rank must be in [first_joiner_rank, spec.size). Blocking
// (poll on the non-blocking fd) until `deadline`. Fills *peer and *stream on success.
Status AcceptJoiner(int fd, const MeshSpec& spec, int first_joiner_rank, Deadline deadline, int* peer,
                    int* stream);

// The hello field that names the sender: (rank << 16) | stream.
inline uint64_t HelloIdentity(int rank, int stream) {
  return (static_cast<uint64_t>(rank) << 16) | static_cast<uint64_t>(stream);
}

// Returns fds[peer][stream] (fds[spec.rank] is empty), every socket non-blocking with
// TCP_NODELAY. Failed dials are retried until the deadline, except that an endpoint refusing
// every connection for a few seconds belongs to a process that has ended (a rank listens before
// its endpoint is exchanged): Error(PeerLost) then, naming the rank and the address. Throws
// Error(Timeout) naming the missing ranks at the deadline, Error(InvalidArgument) on bad
// endpoints; on failure every socket it opened is closed.
std::vector<std::vector<int>> BuildMesh(const MeshSpec& spec, int listen_fd,
                                        const std::vector<Endpoint>& endpoints,
                                        Deadline deadline);

}  // namespace herring

namespace herring {

// Lazy connections (HERRING_CONNECTIONS=lazy): connects a pair of ranks when one of them first
// needs the other, with the mesh's handshake, direction (the higher rank dials) and deadline.
// Used by one thread only (TcpTransport's connector thread); it owns the listener.
class LazyConnector {
 public:
  struct Connected {
    int peer;
    std::vector<int> fds;  // by stream, authenticated, non-blocking
  };
  struct Failed {
    int peer;
    std::string why;  // starts with "rank <peer>: "
  };
  LazyConnector(const MeshSpec& spec, int listen_fd, const std::vector<Endpoint>& endpoints);
  ~LazyConnector();
  // Connect to `peer` within spec.connect_timeout_seconds: dial it (lower ranks) or ask it to dial
  // (higher ranks). Nothing happens for a peer connected, failed or being connected already.
  void Want(int peer);
  // Waits up to max_wait_ms for socket events, retries, expiries or `wake_fd` readable (which it
  // does not read), then handles whatever is ready.
  void PollOnce(int wake_fd, int max_wait_ms);
  // What completed or failed since the last call.
  std::vector<Connected> TakeConnected();
  std::vector<Failed> TakeFailed();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace herring
