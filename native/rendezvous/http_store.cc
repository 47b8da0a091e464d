#include "rendezvous/http_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include "common/status.h"

namespace herring {

namespace {

using std::chrono::milliseconds;

// Horovod's server never blocks a GET, so a missing key is polled: quickly at first because peers
// usually publish within milliseconds of each other, then at most every 50 ms so that many ranks
// polling one Python server do not saturate it.
constexpr milliseconds kFirstBackoff(1);
constexpr milliseconds kMaxBackoff(50);
// A single request that takes longer than this is abandoned and retried: the server handles each
// request in a thread with its own 3 s read timeout, so a longer silence means a lost exchange.
constexpr milliseconds kAttemptCap(5000);
// Horovod's answers carry a few short headers; anything larger is not the rendezvous store.
constexpr size_t kMaxHeaderBytes = 64 * 1024;

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

struct HttpResponse {
  int status = 0;
  std::string body;
};

// Why one request did not complete. Retryable failures (server not listening yet, connection
// dropped, no answer in time) are retried until the deadline; fatal ones are reported at once.
struct AttemptFailure {
  bool retryable;
  bool timed_out;  // the attempt ran out of time rather than meeting an error
  StatusCode code;
  std::string what;
};

AttemptFailure Retryable(std::string what) {
  return {true, false, StatusCode::kPeerLost, std::move(what)};
}
AttemptFailure TimedOut(std::string what) {
  return {true, true, StatusCode::kPeerLost, std::move(what)};
}
AttemptFailure Fatal(StatusCode code, std::string what) {
  return {false, false, code, std::move(what)};
}

std::string Errno(const char* call) { return std::string(call) + ": " + std::strerror(errno); }

bool IsValidName(const std::string& name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
  });
}

// Waits until `fd` is ready for `events`. False when `until` passes first.
bool WaitFor(int fd, short events, Clock::time_point until) {
  for (;;) {
    auto left = std::chrono::ceil<milliseconds>(until - Clock::now()).count();
    if (left < 0) left = 0;
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
    if (rc > 0) return true;
    if (rc == 0) {
      if (Clock::now() >= until) return false;
      continue;  // woke up early: wait for the rest
    }
    if (errno != EINTR) return true;  // let the following call report the error
  }
}

std::optional<AttemptFailure> Resolve(const std::string& addr, int port, sockaddr_in* out) {
  std::memset(out, 0, sizeof(*out));
  out->sin_family = AF_INET;
  out->sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, addr.c_str(), &out->sin_addr) == 1) return std::nullopt;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(addr.c_str(), nullptr, &hints, &found);
  if (rc != 0) {
    // A name that does not exist will not start existing; a failing resolver might recover.
    std::string what = std::string("cannot resolve host: ") + gai_strerror(rc);
    if (rc == EAI_AGAIN || rc == EAI_SYSTEM) return Retryable(what);
    return Fatal(StatusCode::kInvalidArgument, what);
  }
  out->sin_addr = reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr;
  freeaddrinfo(found);
  return std::nullopt;
}

std::optional<AttemptFailure> Connect(const Socket& s, const sockaddr_in& to,
                                      Clock::time_point until) {
  if (connect(s.fd(), reinterpret_cast<const sockaddr*>(&to), sizeof(to)) == 0) {
    return std::nullopt;
  }
  // An interrupted connect carries on asynchronously, exactly like a non-blocking one.
  if (errno != EINPROGRESS && errno != EINTR) return Retryable(Errno("connect"));
  if (!WaitFor(s.fd(), POLLOUT, until)) return TimedOut("connect: timed out");
  int error = 0;
  socklen_t len = sizeof(error);
  if (getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &error, &len) != 0) {
    return Retryable(Errno("getsockopt(SO_ERROR)"));
  }
  if (error != 0) return Retryable(std::string("connect: ") + std::strerror(error));
  return std::nullopt;
}

std::optional<AttemptFailure> SendAll(const Socket& s, const std::string& data,
                                      Clock::time_point until) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = send(s.fd(), data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!WaitFor(s.fd(), POLLOUT, until)) return TimedOut("send: timed out");
    } else {
      return Retryable(Errno("send"));
    }
  }
  return std::nullopt;
}

std::string Lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string Trim(const std::string& s) {
  size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return std::string();
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

// The parsed head of a response: its status, and the body length when the server announced it.
struct ResponseHead {
  int status = 0;
  std::optional<size_t> content_length;
};

std::optional<AttemptFailure> ParseHead(const std::string& head, ResponseHead* out) {
  size_t line_end = head.find("\r\n");
  std::string status_line = head.substr(0, line_end);
  int status = 0;
  if (status_line.compare(0, 5, "HTTP/") != 0 ||
      std::sscanf(status_line.c_str(), "HTTP/%*d.%*d %3d", &status) != 1 || status < 100) {
    return Fatal(StatusCode::kInternal,
                 "not an HTTP response: '" + status_line.substr(0, 80) + "'");
  }
  out->status = status;
  size_t pos = line_end;
  while (pos != std::string::npos && pos + 2 < head.size()) {
    size_t next = head.find("\r\n", pos + 2);
    std::string line = head.substr(pos + 2, next == std::string::npos ? std::string::npos
                                                                      : next - pos - 2);
    size_t colon = line.find(':');
    if (colon != std::string::npos && Lowercase(Trim(line.substr(0, colon))) == "content-length") {
      std::string value = Trim(line.substr(colon + 1));
      char* end = nullptr;
      unsigned long long length = std::strtoull(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || !std::isdigit(static_cast<unsigned char>(value[0]))) {
        return Fatal(StatusCode::kInternal, "bad Content-Length '" + value + "'");
      }
      out->content_length = static_cast<size_t>(length);
    }
    pos = next;
  }
  return std::nullopt;
}

// Reads one response. The request asked for "Connection: close", so the body ends at
// Content-Length or, without one, where the server closes the connection.
std::optional<AttemptFailure> ReceiveResponse(const Socket& s, Clock::time_point until,
                                              HttpResponse* response) {
  std::string data;
  std::optional<ResponseHead> head;
  size_t body_start = 0;
  char chunk[16384];
  for (;;) {
    if (head && head->content_length && data.size() - body_start >= *head->content_length) break;
    ssize_t n = recv(s.fd(), chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!WaitFor(s.fd(), POLLIN, until)) return TimedOut("no answer in time");
      continue;
    }
    if (n < 0) return Retryable(Errno("recv"));
    if (n == 0) {
      if (!head) return Retryable("connection closed before a complete answer");
      if (head->content_length && data.size() - body_start < *head->content_length) {
        return Retryable("connection closed in the middle of the answer");
      }
      break;
    }
    data.append(chunk, static_cast<size_t>(n));
    if (!head) {
      size_t end = data.find("\r\n\r\n");
      if (end == std::string::npos) {
        if (data.size() > kMaxHeaderBytes) {
          return Fatal(StatusCode::kInternal, "oversized HTTP header");
        }
        continue;
      }
      ResponseHead parsed;
      if (auto failure = ParseHead(data.substr(0, end), &parsed)) return failure;
      head = parsed;
      body_start = end + 4;
    }
  }
  response->status = head->status;
  size_t body_size = data.size() - body_start;
  if (head->content_length) body_size = std::min(body_size, *head->content_length);
  response->body = data.substr(body_start, body_size);
  return std::nullopt;
}

// One request on a fresh connection, entirely bounded by `until`.
std::optional<AttemptFailure> Exchange(const std::string& addr, int port,
                                       const std::string& request, Clock::time_point until,
                                       HttpResponse* response) {
  sockaddr_in to;
  if (auto failure = Resolve(addr, port, &to)) return failure;
  Socket s(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (s.fd() < 0) return Retryable(Errno("socket"));
  if (auto failure = Connect(s, to, until)) return failure;
  if (auto failure = SendAll(s, request, until)) return failure;
  return ReceiveResponse(s, until, response);
}

std::string BuildRequest(const char* method, const std::string& host, const std::string& path,
                         const std::string* body) {
  std::string request = std::string(method) + " " + path + " HTTP/1.1\r\nHost: " + host +
                        "\r\nConnection: close\r\n";
  if (body != nullptr) request += "Content-Length: " + std::to_string(body->size()) + "\r\n";
  request += "\r\n";
  if (body != nullptr) request += *body;
  return request;
}

std::string FormatSeconds(Clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f s", std::chrono::duration<double>(d).count());
  return text;
}

// What the caller makes of an answer: done, or not yet (the key is missing or the server is
// busy) - retried with backoff - or a hard error.
enum class Verdict { kDone, kRetry };

// Runs one request until `judge` accepts an answer, retrying with backoff until `deadline`.
// At the deadline the error is Timeout when the store's last answer was "not yet" (the key never
// appeared), PeerLost when the store did not answer (horovodrun gone, or not reachable from here).
template <typename Judge>
void RequestUntil(const std::string& addr, int port, const std::string& request,
                  const std::string& what, Deadline deadline, Judge judge) {
  const std::string store = "horovodrun's rendezvous store at " + addr + ":" + std::to_string(port);
  const auto start = Clock::now();
  auto backoff = kFirstBackoff;
  std::string last;            // what the most telling attempt so far met
  bool last_answered = false;  // ... and whether that was an answer from the store
  for (;;) {
    HttpResponse response;
    auto failure = Exchange(addr, port, request, deadline.Capped(kAttemptCap), &response);
    if (!failure) {
      if (judge(response, store, &last) == Verdict::kDone) return;
      last_answered = true;
    } else if (!failure->retryable) {
      throw Error(Status(failure->code, store + " failed to " + what + ": " + failure->what));
    } else if (!(failure->timed_out && deadline.Expired() && !last.empty())) {
      // (An attempt that the deadline cut short says less than the one before it.)
      last = failure->what;
      last_answered = false;
    }
    if (!deadline.Expired()) {
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline.Remaining()));
      backoff = std::min(backoff * 2, kMaxBackoff);
    }
    if (deadline.Expired()) {
      std::string message = "gave up after " + FormatSeconds(Clock::now() - start) +
                            " trying to " + what + " at " + store + " (last attempt: " + last + ")";
      throw Error(last_answered ? Status::Timeout(message) : Status::PeerLost(message));
    }
  }
}

bool IsRetryableStatus(int status) { return status == 408 || status == 429 || status >= 500; }

[[noreturn]] void UnexpectedStatus(const std::string& store, const std::string& what,
                                   const HttpResponse& response) {
  throw Error(Status::Internal(store + " answered HTTP " + std::to_string(response.status) +
                               " when asked to " + what));
}

// Horovod's handler splits the path on '/' and expects exactly /<scope>/<key>; limiting keys to
// URL-safe characters also spares any percent-encoding.
void ValidateKey(const std::string& key, const std::string& addr, int port) {
  if (!IsValidName(key)) {
    throw Error(Status::InvalidArgument("rendezvous key '" + key + "' for the store at " + addr +
                                        ":" + std::to_string(port) +
                                        " is not valid: use only [A-Za-z0-9._-], no '/'"));
  }
}

}  // namespace

HttpStore::HttpStore(std::string addr, int port, std::string scope)
    : addr_(std::move(addr)), port_(port), scope_(std::move(scope)) {
  if (port_ < 1 || port_ > 65535) {
    throw Error(Status::InvalidArgument("rendezvous store port " + std::to_string(port_) +
                                        " of " + addr_ + " is not in [1, 65535]"));
  }
  if (!IsValidName(scope_)) {
    throw Error(Status::InvalidArgument("rendezvous store scope '" + scope_ +
                                        "' is not valid: use only [A-Za-z0-9._-]"));
  }
}

void HttpStore::Set(const std::string& key, const std::string& value, Deadline deadline) {
  ValidateKey(key, addr_, port_);
  const std::string path = "/" + scope_ + "/" + key;
  const std::string host = addr_ + ":" + std::to_string(port_);
  const std::string what = "store key '" + key + "' (PUT " + path + ")";
  RequestUntil(addr_, port_, BuildRequest("PUT", host, path, &value), what, deadline,
               [&](const HttpResponse& response, const std::string& store, std::string* last) {
                 if (response.status == 200) return Verdict::kDone;
                 if (!IsRetryableStatus(response.status)) UnexpectedStatus(store, what, response);
                 *last = "HTTP " + std::to_string(response.status);
                 return Verdict::kRetry;
               });
}

std::string HttpStore::Get(const std::string& key, Deadline deadline) {
  ValidateKey(key, addr_, port_);
  const std::string path = "/" + scope_ + "/" + key;
  const std::string host = addr_ + ":" + std::to_string(port_);
  const std::string what = "read key '" + key + "' (GET " + path + ")";
  std::string value;
  RequestUntil(addr_, port_, BuildRequest("GET", host, path, nullptr), what, deadline,
               [&](const HttpResponse& response, const std::string& store, std::string* last) {
                 if (response.status == 200) {
                   value = response.body;
                   return Verdict::kDone;
                 }
                 if (response.status != 404 && !IsRetryableStatus(response.status)) {
                   UnexpectedStatus(store, what, response);
                 }
                 *last = response.status == 404 ? std::string("HTTP 404, no rank stored it yet")
                                                : "HTTP " + std::to_string(response.status);
                 return Verdict::kRetry;
               });
  return value;
}

std::vector<std::string> HttpStore::AllGather(const std::string& prefix, int rank, int size,
                                              const std::string& mine, Deadline deadline) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw Error(Status::InvalidArgument("AllGather '" + prefix + "' through the store at " +
                                        addr_ + ":" + std::to_string(port_) + ": rank " +
                                        std::to_string(rank) + " is not in [0, " +
                                        std::to_string(size) + ")"));
  }
  Set(prefix + "." + std::to_string(rank), mine, deadline);
  std::vector<std::string> all;
  all.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) all.push_back(Get(prefix + "." + std::to_string(r), deadline));
  return all;
}

}  // namespace herring
