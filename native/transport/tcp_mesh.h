// Builds the connections of a TcpTransport (private to transport/): rank i dials every rank j < i
// once per stream (stream 0 carries control, 1..data_streams carry bulk data) and accepts the
// streams of every rank j > i. Each connection starts with a hello/hello-ack exchange carrying the
// job token in tag and (rank << 16 | stream) in offset, where rank is the sender's own rank (the
// acceptor answers with its rank); anything else that reaches the listener is dropped.
#pragma once

#include <cstdint>
#include <vector>

#include "common/deadline.h"
#include "transport/tcp_transport.h"

namespace herring {

struct MeshSpec {
  int rank = 0;
  int size = 1;
  int data_streams = 1;
  uint64_t job_token = 0;
  int socket_buffer_bytes = 0;
};

// The hello field that names the sender: (rank << 16) | stream.
inline uint64_t HelloIdentity(int rank, int stream) {
  return (static_cast<uint64_t>(rank) << 16) | static_cast<uint64_t>(stream);
}

// Returns fds[peer][stream] (fds[spec.rank] is empty), every socket non-blocking with
// TCP_NODELAY. Dials are retried while a peer is not listening yet. Throws Error(Timeout) naming
// the missing ranks at the deadline, Error(InvalidArgument) on bad endpoints; on failure every
// socket it opened is closed.
std::vector<std::vector<int>> BuildMesh(const MeshSpec& spec, int listen_fd,
                                        const std::vector<Endpoint>& endpoints,
                                        Deadline deadline);

}  // namespace herring
