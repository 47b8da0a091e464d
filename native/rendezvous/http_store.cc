#include "rendezvous/http_store.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netdb.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <thread>
#include <utility>

#include "common/status.h"

namespace herring {

namespace {

using std::chrono::milliseconds;

// Horovod's server never blocks a GET, so a missing key is polled: quickly at first because peers
// usually publish within milliseconds of each other, then at most every PollIntervalCap so that
// many ranks polling one Python server do not saturate it.
constexpr milliseconds kFirstBackoff(1);
constexpr milliseconds kMaxBackoff(50);
constexpr int kStorePollsPerSecond = 400;
// A single request that takes longer than this is abandoned and retried: the server handles each
// request in a thread with its own 3 s read timeout, so a longer silence means a lost exchange.
constexpr milliseconds kAttemptCap(5000);
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

bool IsValidName(const std::string& name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
  });
}

// A name that does not exist will not start existing (fatal); a failing resolver might recover.
std::optional<AttemptFailure> CheckResolvable(const std::string& addr) {
  in_addr numeric;
  if (inet_pton(AF_INET, addr.c_str(), &numeric) == 1) return std::nullopt;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(addr.c_str(), nullptr, &hints, &found);
  if (rc == 0) {
    freeaddrinfo(found);
    return std::nullopt;
  }
  std::string what = std::string("cannot resolve host: ") + gai_strerror(rc);
  if (rc == EAI_AGAIN || rc == EAI_SYSTEM) return Retryable(what);
  return Fatal(StatusCode::kInvalidArgument, what);
}

// One request on a fresh connection (cpp-httplib), entirely bounded by `until`.
std::optional<AttemptFailure> Exchange(const std::string& addr, int port, const char* method,
                                       const std::string& path, const std::string* body,
                                       Clock::time_point until, HttpResponse* response) {
  if (auto failure = CheckResolvable(addr)) return failure;
  const auto budget = std::max<Clock::duration>(until - Clock::now(), milliseconds(1));
  httplib::Client client(addr, port);
  client.set_keep_alive(false);
  client.set_connection_timeout(budget);
  client.set_read_timeout(budget);
  client.set_write_timeout(budget);
  const auto start = Clock::now();
  httplib::Result result = body != nullptr
                               ? client.Put(path.c_str(), *body, "application/octet-stream")
                               : client.Get(path.c_str());
  if (!result) {
    const httplib::Error error = result.error();
    // httplib reports a timeout as a read or connection error: the clock tells them apart.
    if (error == httplib::Error::ConnectionTimeout || Clock::now() - start >= budget * 9 / 10) {
      return TimedOut("no answer in time");
    }
    if (error == httplib::Error::Connection) return Retryable("could not connect (is horovodrun's store listening?)");
    return Retryable("HTTP exchange failed: " + httplib::to_string(error));
  }
  response->status = result->status;
  response->body = result->body;
  return std::nullopt;
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
void RequestUntil(const std::string& addr, int port, const char* method, const std::string& path,
                  const std::string* body, const std::string& what, Deadline deadline, milliseconds max_backoff,
                  Judge judge) {
  const std::string store = "horovodrun's rendezvous store at " + addr + ":" + std::to_string(port);
  const auto start = Clock::now();
  auto backoff = kFirstBackoff;
  std::string last;            // what the most telling attempt so far met
  bool last_answered = false;  // ... and whether that was an answer from the store
  for (;;) {
    HttpResponse response;
    auto failure = Exchange(addr, port, method, path, body, deadline.Capped(kAttemptCap), &response);
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
      backoff = std::min(backoff * 2, max_backoff);
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

milliseconds PollIntervalCap(int pollers) {
  return std::max(kMaxBackoff, milliseconds(1000LL * std::max(pollers, 1) / kStorePollsPerSecond));
}

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
  const std::string what = "store key '" + key + "' (PUT " + path + ")";
  RequestUntil(addr_, port_, "PUT", path, &value, what, deadline, kMaxBackoff,
               [&](const HttpResponse& response, const std::string& store, std::string* last) {
                 if (response.status == 200) return Verdict::kDone;
                 if (!IsRetryableStatus(response.status)) UnexpectedStatus(store, what, response);
                 *last = "HTTP " + std::to_string(response.status);
                 return Verdict::kRetry;
               });
}

std::string HttpStore::Get(const std::string& key, Deadline deadline, int pollers) {
  ValidateKey(key, addr_, port_);
  const std::string path = "/" + scope_ + "/" + key;
  const std::string what = "read key '" + key + "' (GET " + path + ")";
  std::string value;
  RequestUntil(addr_, port_, "GET", path, nullptr, what, deadline, PollIntervalCap(pollers),
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
