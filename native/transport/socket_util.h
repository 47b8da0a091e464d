// Small POSIX socket helpers shared by the TCP mesh builder and the transport (private to
// transport/). Every socket they create is non-blocking and close-on-exec.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "common/status.h"

namespace herring {

// strerror text for an errno value (thread-safe).
std::string ErrnoText(int err);

// A numeric IPv4/IPv6 address and port as a sockaddr; false if `ip` is not numeric.
bool MakeSockaddr(const std::string& ip, uint16_t port, sockaddr_storage* addr, socklen_t* len);

// The "ip:port" a socket is bound to (or connected to, with peer=true).
bool SocketEndpoint(int fd, bool peer, std::string* ip, uint16_t* port);

// TCP_NODELAY, and SO_SNDBUF/SO_RCVBUF when buffer_bytes > 0 (0 keeps kernel autotuning).
void ConfigureStreamSocket(int fd, int buffer_bytes);

// A non-blocking listening socket on ip:0. Accepted sockets inherit its buffer sizes, which must
// be set before the connection exists for the TCP window scale to use them. Throws Error.
int CreateListener(const std::string& ip, int buffer_bytes);

// A non-blocking socket whose connect() to addr has been started: returns the fd with *err = 0
// (connected or EINPROGRESS), or -1 with *err set (the caller retries ECONNREFUSED and friends).
int StartConnect(const sockaddr_storage& addr, socklen_t len, int buffer_bytes, int* err);

// Closes fd if it is >= 0 and sets it to -1.
void CloseFd(int* fd);

}  // namespace herring
