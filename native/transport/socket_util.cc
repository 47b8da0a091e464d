#include "transport/socket_util.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

namespace herring {

std::string ErrnoText(int err) {
  char buf[128];
  // GNU strerror_r may return a static string instead of filling buf.
  const char* text = strerror_r(err, buf, sizeof(buf));
  return text;
}

bool MakeSockaddr(const std::string& ip, uint16_t port, sockaddr_storage* addr, socklen_t* len) {
  std::memset(addr, 0, sizeof(*addr));
  auto* v4 = reinterpret_cast<sockaddr_in*>(addr);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    *len = sizeof(sockaddr_in);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(addr);
  if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    *len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

bool SocketEndpoint(int fd, bool peer, std::string* ip, uint16_t* port) {
  sockaddr_storage addr;
  socklen_t len = sizeof(addr);
  int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                : getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc != 0) return false;
  char text[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
    *port = ntohs(v4->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
    *port = ntohs(v6->sin6_port);
  } else {
    return false;
  }
  *ip = text;
  return true;
}

void ConfigureStreamSocket(int fd, int buffer_bytes) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (buffer_bytes > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof(buffer_bytes));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof(buffer_bytes));
  }
}

int CreateListener(const std::string& ip, int buffer_bytes) {
  sockaddr_storage addr;
  socklen_t len = 0;
  if (!MakeSockaddr(ip, 0, &addr, &len)) {
    throw Error(Status::InvalidArgument("cannot listen on '" + ip +
                                        "': not a numeric IPv4/IPv6 address"));
  }
  int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(Status::Internal("socket(): " + ErrnoText(errno)));
  ConfigureStreamSocket(fd, buffer_bytes);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    int err = errno;
    close(fd);
    throw Error(Status::Internal("cannot bind a listener to " + ip + ": " + ErrnoText(err)));
  }
  if (listen(fd, SOMAXCONN) != 0) {
    int err = errno;
    close(fd);
    throw Error(Status::Internal("listen() on " + ip + ": " + ErrnoText(err)));
  }
  return fd;
}

int StartConnect(const sockaddr_storage& addr, socklen_t len, int buffer_bytes, int* err) {
  int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  ConfigureStreamSocket(fd, buffer_bytes);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0 && errno != EINPROGRESS) {
    *err = errno;
    close(fd);
    return -1;
  }
  *err = 0;
  return fd;
}

void CloseFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

}  // namespace herring
