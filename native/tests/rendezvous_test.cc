// Tests of the launcher environment, the client of horovodrun's HTTP rendezvous store (against an
// in-process server with the same semantics as horovod.runner.http.http_server) and interface
// addresses.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <ostream>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "rendezvous/host_rendezvous.h"
#include "rendezvous/http_store.h"
#include "rendezvous/launch_env.h"
#include "rendezvous/net_interfaces.h"
#include "rendezvous/rendezvous_protocol.h"
#include "transport/shm_arena.h"
#include <gtest/gtest.h>

using namespace herring;

namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs `body`, which must throw Error; returns its status (Internal "did not throw" otherwise).
Status StatusOf(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.status();
  }
  return Status::Internal("did not throw");
}

std::string Hostname() {
  char buffer[HOST_NAME_MAX + 1] = {};
  gethostname(buffer, sizeof(buffer) - 1);
  return buffer;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// StatusOf(body), and in *seconds how long body took to return or throw.
Status TimedStatusOf(const std::function<void()>& body, double* seconds) {
  auto start = Clock::now();
  Status s = StatusOf(body);
  *seconds = SecondsSince(start);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Launch environment.

std::map<std::string, std::string> HorovodrunEnv() {
  // Rank 3 of 4 on two hosts of two slots, as `horovodrun --gloo -np 4 -H a:2,b:2` sets it.
  return {{"HOROVOD_RANK", "3"},
          {"HOROVOD_SIZE", "4"},
          {"HOROVOD_LOCAL_RANK", "1"},
          {"HOROVOD_LOCAL_SIZE", "2"},
          {"HOROVOD_CROSS_RANK", "1"},
          {"HOROVOD_CROSS_SIZE", "2"},
          {"HOROVOD_HOSTNAME", "hostb"},
          {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.1.2.3"},
          {"HOROVOD_GLOO_RENDEZVOUS_PORT", "31234"},
          {"HOROVOD_CONTROLLER", "gloo"},
          {"HOROVOD_CPU_OPERATIONS", "gloo"},
          {"HOROVOD_GLOO_IFACE", "eth0"}};
}

std::map<std::string, std::string> MpirunEnv() {
  return {{"OMPI_COMM_WORLD_RANK", "2"},
          {"OMPI_COMM_WORLD_SIZE", "4"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
          {"OMPI_COMM_WORLD_NODE_RANK", "1"}};
}

// `env` must be rejected with InvalidArgument and a message naming `variable`.
void ExpectRejected(const std::map<std::string, std::string>& env, const std::string& variable,
                    const std::string& also = "") {
  Status s = StatusOf([&] { DetectLaunch(env); });
  EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), variable));
  if (!also.empty()) EXPECT_TRUE(Contains(s.message(), also));
  if (!Contains(s.message(), variable) || !Contains(s.message(), also)) {
    std::fprintf(stderr, "    (for %s: got '%s')\n", variable.c_str(), s.ToString().c_str());
  }
}

// Where a launch put this process: its rank and the job's size, on its host and among the hosts.
struct Layout {
  int rank, size, local_rank, local_size, cross_rank, cross_size;

  bool operator==(const Layout& o) const {
    return std::tie(rank, size, local_rank, local_size, cross_rank, cross_size) ==
           std::tie(o.rank, o.size, o.local_rank, o.local_size, o.cross_rank, o.cross_size);
  }
};

std::ostream& operator<<(std::ostream& os, const Layout& l) {
  return os << "rank " << l.rank << " of " << l.size << ", local " << l.local_rank << " of " << l.local_size
            << ", cross " << l.cross_rank << " of " << l.cross_size;
}

void ExpectLaunch(const LaunchInfo& info, Launcher launcher, const Layout& want) {
  EXPECT_TRUE(info.launcher == launcher);
  EXPECT_EQ((Layout{info.rank, info.size, info.local_rank, info.local_size, info.cross_rank, info.cross_size}), want);
}

}  // namespace

TEST(Rendezvous, RendezvousLaunchHorovodrun) {
  LaunchInfo info = DetectLaunch(HorovodrunEnv());
  ExpectLaunch(info, Launcher::kHorovodrun, {3, 4, 1, 2, 1, 2});
  EXPECT_EQ(std::string(LauncherName(info.launcher)), std::string("horovodrun"));
  EXPECT_EQ(info.hostname, std::string("hostb"));
  EXPECT_EQ(info.rendezvous_addr, std::string("10.1.2.3"));
  EXPECT_EQ(info.rendezvous_port, 31234);
  EXPECT_EQ(info.iface, std::string("eth0"));

  auto env = HorovodrunEnv();
  env.erase("HOROVOD_GLOO_IFACE");
  EXPECT_EQ(DetectLaunch(env).iface, std::string(""));
}

TEST(Rendezvous, RendezvousLaunchHorovodrunWinsOverMpirun) {
  auto env = HorovodrunEnv();
  for (const auto& kv : MpirunEnv()) env.insert(kv);
  LaunchInfo info = DetectLaunch(env);
  EXPECT_TRUE(info.launcher == Launcher::kHorovodrun);
  EXPECT_EQ(info.rank, 3);
}

TEST(Rendezvous, RendezvousLaunchHorovodrunMissingVariables) {
  for (const char* name :
       {"HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
        "HOROVOD_CROSS_SIZE", "HOROVOD_HOSTNAME", "HOROVOD_GLOO_RENDEZVOUS_ADDR",
        "HOROVOD_GLOO_RENDEZVOUS_PORT", "HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS"}) {
    auto env = HorovodrunEnv();
    env.erase(name);
    ExpectRejected(env, name, "is not set");
    env[name] = "";
    ExpectRejected(env, name, "is not set");
  }
}

TEST(Rendezvous, RendezvousLaunchHorovodrunBadValues) {
  struct Case {
    const char* variable;
    const char* value;
    const char* expected;  // part of the message besides the variable
  };
  const Case cases[] = {
      {"HOROVOD_RANK", "three", "HOROVOD_RANK='three'"},
      {"HOROVOD_RANK", "", "is not set"},
      {"HOROVOD_RANK", "-1", "HOROVOD_RANK='-1'"},
      {"HOROVOD_RANK", " 3", "HOROVOD_RANK=' 3'"},
      {"HOROVOD_RANK", "3x", "HOROVOD_RANK='3x'"},
      {"HOROVOD_RANK", "99999999999", "HOROVOD_RANK='99999999999'"},
      {"HOROVOD_RANK", "4", "less than HOROVOD_SIZE=4"},
      {"HOROVOD_SIZE", "0", "HOROVOD_SIZE='0'"},
      {"HOROVOD_LOCAL_RANK", "2", "less than HOROVOD_LOCAL_SIZE=2"},
      {"HOROVOD_LOCAL_SIZE", "5", "at most HOROVOD_SIZE=4"},
      {"HOROVOD_CROSS_RANK", "2", "less than HOROVOD_CROSS_SIZE=2"},
      {"HOROVOD_CROSS_SIZE", "8", "at most HOROVOD_SIZE=4"},
      {"HOROVOD_GLOO_RENDEZVOUS_PORT", "0", "[1, 65535]"},
      {"HOROVOD_GLOO_RENDEZVOUS_PORT", "65536", "[1, 65535]"},
      {"HOROVOD_GLOO_RENDEZVOUS_PORT", "http", "HOROVOD_GLOO_RENDEZVOUS_PORT='http'"},
  };
  for (const Case& c : cases) {
    auto env = HorovodrunEnv();
    env[c.variable] = c.value;
    // An empty HOROVOD_RANK still selects horovodrun, and is reported like a missing one.
    ExpectRejected(env, c.variable, c.expected);
  }
}

TEST(Rendezvous, RendezvousLaunchMpirun) {
  auto env = MpirunEnv();
  env["HOROVOD_HOSTNAME"] = "node7";
  LaunchInfo info = DetectLaunch(env);
  // The cross rank and size are -1: the engine derives them from the exchanged hostnames.
  ExpectLaunch(info, Launcher::kMpirun, {2, 4, 0, 2, -1, -1});
  EXPECT_EQ(std::string(LauncherName(info.launcher)), std::string("mpirun"));
  EXPECT_EQ(info.hostname, std::string("node7"));
  EXPECT_EQ(info.rendezvous_addr, std::string(""));
  EXPECT_EQ(info.rendezvous_port, 0);

  EXPECT_EQ(DetectLaunch(MpirunEnv()).hostname, Hostname());
}

TEST(Rendezvous, RendezvousLaunchMpirunErrors) {
  for (const char* name :
       {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"}) {
    auto env = MpirunEnv();
    env.erase(name);
    ExpectRejected(env, name, "mpirun");
  }
  auto env = MpirunEnv();
  env["OMPI_COMM_WORLD_RANK"] = "4";
  ExpectRejected(env, "OMPI_COMM_WORLD_RANK", "less than OMPI_COMM_WORLD_SIZE=4");
  env = MpirunEnv();
  env["OMPI_COMM_WORLD_RANK"] = "two";
  ExpectRejected(env, "OMPI_COMM_WORLD_RANK", "'two'");
  env = MpirunEnv();
  env["OMPI_COMM_WORLD_LOCAL_RANK"] = "2";
  ExpectRejected(env, "OMPI_COMM_WORLD_LOCAL_RANK", "less than OMPI_COMM_WORLD_LOCAL_SIZE=2");
  env = MpirunEnv();
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "5";
  ExpectRejected(env, "OMPI_COMM_WORLD_LOCAL_SIZE", "at most OMPI_COMM_WORLD_SIZE=4");
}

TEST(Rendezvous, RendezvousLaunchTorchrun) {
  std::map<std::string, std::string> env = {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                                            {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "node0"},
                                            {"MASTER_PORT", "29500"}, {"HOROVOD_HOSTNAME", "node1"}};
  LaunchInfo info = DetectLaunch(env);
  // The cross rank and size are -1: the engine derives them from the exchanged hostnames.
  ExpectLaunch(info, Launcher::kTorchrun, {3, 4, 1, 2, -1, -1});
  EXPECT_EQ(std::string(LauncherName(info.launcher)), std::string("torchrun"));
  EXPECT_EQ(info.hostname, std::string("node1"));
  // A hand-made env:// launch without the local variables: all here when MASTER_ADDR is loopback.
  info = DetectLaunch({{"RANK", "1"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "127.0.0.1"}});
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_size, 3);
  // horovodrun's and mpirun's own variables win over RANK set by a script.
  auto mixed = MpirunEnv();
  mixed["RANK"] = "0";
  mixed["WORLD_SIZE"] = "1";
  EXPECT_TRUE(DetectLaunch(mixed).launcher == Launcher::kMpirun);
  env["RANK"] = "4";
  ExpectRejected(env, "RANK", "less than WORLD_SIZE=4");
  env["RANK"] = "0";
  env["LOCAL_RANK"] = "2";
  ExpectRejected(env, "LOCAL_RANK", "less than LOCAL_WORLD_SIZE=2");
}

TEST(Rendezvous, RendezvousLaunchSingle) {
  LaunchInfo info = DetectLaunch({});
  ExpectLaunch(info, Launcher::kSingle, {0, 1, 0, 1, 0, 1});
  EXPECT_EQ(info.hostname, Hostname());
  EXPECT_EQ(info.rendezvous_addr, std::string(""));
  // HOROVOD_SIZE alone (no rank) does not make a horovodrun job.
  info = DetectLaunch({{"HOROVOD_SIZE", "4"}, {"HOROVOD_HOSTNAME", "me"}});
  EXPECT_TRUE(info.launcher == Launcher::kSingle);
  EXPECT_EQ(info.size, 1);
  EXPECT_EQ(info.hostname, std::string("me"));
}

TEST(Rendezvous, RendezvousLaunchFromProcessEnvironment) {
  // Only meaningful when this test binary itself was not started by a launcher.
  if (std::getenv("HOROVOD_RANK") != nullptr || std::getenv("OMPI_COMM_WORLD_RANK") != nullptr) {
    return;
  }
  EXPECT_TRUE(DetectLaunchFromProcessEnvironment().launcher == Launcher::kSingle);
  auto env = MpirunEnv();
  for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
  LaunchInfo info = DetectLaunchFromProcessEnvironment();
  for (const auto& kv : env) unsetenv(kv.first.c_str());
  EXPECT_TRUE(info.launcher == Launcher::kMpirun);
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.local_size, 2);
}

// ---------------------------------------------------------------------------------------------
// A stand-in for horovodrun's RendezvousServer: PUT /<scope>/<key> stores, GET answers 200 with
// the value or 404, any other path shape is a 400. Other modes misbehave on purpose.

namespace {

class FakeStore {
 public:
  enum class Mode {
    kStore,      // Horovod's semantics
    kTrickle,    // same, but every answer is written one byte at a time
    kSilent,     // accepts connections and never answers
    kBadStatus,  // answers every request with 400
    kNotHttp,    // answers with something that is not HTTP
  };

  // Binds 127.0.0.1 on a free port. Until Listen(), connections to it are refused.
  explicit FakeStore(Mode mode = Mode::kStore) : mode_(mode) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    if (pipe(wake_) != 0) std::abort();
  }

  ~FakeStore() {
    if (thread_.joinable()) {
      char byte = 0;
      if (write(wake_[1], &byte, 1) != 1) std::abort();
      thread_.join();
    }
    for (int fd : held_) close(fd);
    close(listen_fd_);
    close(wake_[0]);
    close(wake_[1]);
  }

  void Listen() {
    listen(listen_fd_, 64);
    thread_ = std::thread([this] { Serve(); });
  }

  int port() const { return port_; }

  // The request heads received so far ("PUT /s/k HTTP/1.1\r\nHost: ...").
  std::vector<std::string> heads() {
    std::lock_guard<std::mutex> lock(mu_);
    return heads_;
  }

  // Blocks until GET `path` has been answered 404 `count` times; false after `timeout`.
  bool WaitForMisses(const std::string& path, int count, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return misses_[path] >= count; });
  }

  int misses(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    return misses_[path];
  }

 private:
  void Serve() {
    for (;;) {
      pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      if (poll(fds, 2, -1) < 0) continue;
      if (fds[1].revents != 0) return;
      int conn = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) continue;
      if (mode_ == Mode::kSilent) {
        held_.push_back(conn);
        continue;
      }
      Handle(conn);
      close(conn);
    }
  }

  // Reads one request (head + Content-Length body), blocking with a 2 s guard.
  bool ReadRequest(int conn, std::string* head, std::string* body) {
    timeval guard{2, 0};
    setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &guard, sizeof(guard));
    std::string data;
    char chunk[65536];
    size_t head_end = std::string::npos;
    size_t length = 0;
    for (;;) {
      if (head_end != std::string::npos && data.size() >= head_end + 4 + length) break;
      ssize_t n = recv(conn, chunk, sizeof(chunk), 0);
      if (n <= 0) return false;
      data.append(chunk, static_cast<size_t>(n));
      if (head_end != std::string::npos) continue;
      head_end = data.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        size_t at = data.find("Content-Length: ");
        if (at != std::string::npos && at < head_end) length = std::stoul(data.substr(at + 16));
      }
    }
    *head = data.substr(0, head_end);
    *body = data.substr(head_end + 4, length);
    return true;
  }

  void Handle(int conn) {
    std::string head, body;
    if (!ReadRequest(conn, &head, &body)) return;
    std::string method = head.substr(0, head.find(' '));
    size_t path_start = method.size() + 1;
    std::string path = head.substr(path_start, head.find(' ', path_start) - path_start);
    int status = 400;
    std::string answer;
    {
      std::lock_guard<std::mutex> lock(mu_);
      heads_.push_back(head);
      size_t slash = path.find('/', 1);
      bool shaped = path[0] == '/' && slash != std::string::npos &&
                    path.find('/', slash + 1) == std::string::npos;
      if (mode_ == Mode::kBadStatus || !shaped) {
        status = 400;
      } else if (method == "PUT") {
        values_[path] = body;
        status = 200;
      } else if (method == "GET" && values_.count(path)) {
        answer = values_[path];
        status = 200;
      } else if (method == "GET") {
        ++misses_[path];
        status = 404;
      }
    }
    cv_.notify_all();
    std::string response = "HTTP/1.0 " + std::to_string(status) +
                           " Whatever\r\nServer: FakeStore\r\nContent-Length: " +
                           std::to_string(answer.size()) + "\r\n\r\n" + answer;
    if (mode_ == Mode::kNotHttp) response = "SSH-2.0-OpenSSH_9.2\r\n\r\n";
    Write(conn, response);
  }

  void Write(int conn, const std::string& response) {
    if (mode_ == Mode::kTrickle) {
      int one = 1;
      setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      for (char c : response) {
        if (send(conn, &c, 1, MSG_NOSIGNAL) != 1) return;
      }
      return;
    }
    size_t sent = 0;
    while (sent < response.size()) {
      ssize_t n = send(conn, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
  }

  const Mode mode_;
  int listen_fd_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  std::vector<int> held_;  // kSilent connections, owned by the server thread until destruction
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
  std::map<std::string, int> misses_;
  std::vector<std::string> heads_;
};

Deadline Seconds(double s) { return Deadline::AfterSeconds(s); }

}  // namespace

TEST(Rendezvous, RendezvousPollIntervalGrowsWithThePollers) {
  EXPECT_EQ(PollIntervalCap(1).count(), 50);
  EXPECT_EQ(PollIntervalCap(20).count(), 50);
  EXPECT_EQ(PollIntervalCap(256).count(), 640);
  EXPECT_EQ(PollIntervalCap(2048).count(), 5120);
}

TEST(Rendezvous, RendezvousManyPollersPollTheStoreLess) {
  // A key that appears after 1.5 s, awaited as by one of 256 ranks: its polls back off to every
  // 640 ms (about 11 requests) rather than every 50 ms (about 33).
  FakeStore server;
  server.Listen();
  HttpStore store("127.0.0.1", server.port(), "herring");
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    HttpStore("127.0.0.1", server.port(), "herring").Set("world", "everyone", Seconds(5));
  });
  EXPECT_EQ(store.Get("world", Seconds(10), 256), std::string("everyone"));
  late.join();
  int polls = 0;
  for (const auto& head : server.heads()) polls += Contains(head, "GET /herring/world ") ? 1 : 0;
  EXPECT_LE(polls, 16);
  EXPECT_GE(polls, 2);
}

TEST(Rendezvous, RendezvousStoreSetGetRoundTrip) {
  FakeStore server;
  server.Listen();
  HttpStore store("127.0.0.1", server.port(), "herring");
  const std::string binary("a\0b\r\n\r\nc", 8);
  store.Set("endpoint.0", binary, Seconds(5));
  store.Set("empty", "", Seconds(5));
  EXPECT_EQ(store.Get("endpoint.0", Seconds(5)), binary);
  EXPECT_EQ(store.Get("empty", Seconds(5)), std::string(""));
  store.Set("endpoint.0", "overwritten", Seconds(5));
  EXPECT_EQ(store.Get("endpoint.0", Seconds(5)), std::string("overwritten"));

  auto heads = server.heads();
  ASSERT_TRUE(heads.size() == 6u);
  EXPECT_TRUE(Contains(heads[0], "PUT /herring/endpoint.0 HTTP/1."));
  EXPECT_TRUE(Contains(heads[0], "Content-Length: 8"));
  EXPECT_TRUE(Contains(heads[0], "Connection: close"));
  EXPECT_TRUE(Contains(heads[2], "GET /herring/endpoint.0 HTTP/1."));

  // Scopes are separate namespaces.
  HttpStore other("127.0.0.1", server.port(), "other");
  Status s = StatusOf([&] { other.Get("endpoint.0", Seconds(0.05)); });
  EXPECT_TRUE(s.code() == StatusCode::kTimeout);
}

TEST(Rendezvous, RendezvousStoreLargeValueAndTrickledAnswers) {
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + (i >> 12));
  {
    FakeStore server;
    server.Listen();
    HttpStore store("127.0.0.1", server.port(), "s");
    store.Set("big", big, Seconds(5));
    EXPECT_TRUE(store.Get("big", Seconds(5)) == big);
  }
  FakeStore trickle(FakeStore::Mode::kTrickle);
  trickle.Listen();
  HttpStore store("127.0.0.1", trickle.port(), "s");
  store.Set("k", "trickled value", Seconds(5));
  EXPECT_EQ(store.Get("k", Seconds(5)), std::string("trickled value"));
}

TEST(Rendezvous, RendezvousStoreGetWaitsForLateSet) {
  FakeStore server;
  server.Listen();
  std::thread late_writer([&] {
    // Publish only once the reader has demonstrably polled and missed a few times.
    if (server.WaitForMisses("/s/late", 3, std::chrono::seconds(5))) {
      HttpStore("127.0.0.1", server.port(), "s").Set("late", "finally", Seconds(5));
    }
  });
  HttpStore store("127.0.0.1", server.port(), "s");
  auto start = Clock::now();
  std::string value = store.Get("late", Seconds(5));
  double waited = SecondsSince(start);
  late_writer.join();
  EXPECT_EQ(value, std::string("finally"));
  EXPECT_TRUE(server.misses("/s/late") >= 3);
  // Backoff starts at 1 ms: a few misses must not cost anywhere near the 50 ms cap each.
  EXPECT_TRUE(waited < 1.0);
}

TEST(Rendezvous, RendezvousStoreGetTimeoutNamesKey) {
  FakeStore server;
  server.Listen();
  HttpStore store("127.0.0.1", server.port(), "s");
  double waited = 0;
  Status s = TimedStatusOf([&] { store.Get("never.set", Seconds(0.2)); }, &waited);
  EXPECT_TRUE(s.code() == StatusCode::kTimeout);
  EXPECT_TRUE(Contains(s.message(), "'never.set'"));
  EXPECT_TRUE(Contains(s.message(), "127.0.0.1:" + std::to_string(server.port())));
  EXPECT_TRUE(Contains(s.message(), "404"));
  EXPECT_TRUE(waited >= 0.2 && waited < 1.0);
  // Polling backs off to ~50 ms: 0.2 s costs a handful of requests, not thousands.
  int misses = server.misses("/s/never.set");
  EXPECT_TRUE(misses >= 4 && misses <= 20);
}

TEST(Rendezvous, RendezvousStoreUnreachableRetriesUntilDeadline) {
  FakeStore bound_not_listening;  // connections are refused
  HttpStore store("127.0.0.1", bound_not_listening.port(), "s");
  const std::string address = "127.0.0.1:" + std::to_string(bound_not_listening.port());
  double waited = 0;
  Status s = TimedStatusOf([&] { store.Set("k", "v", Seconds(0.2)); }, &waited);
  EXPECT_TRUE(s.code() == StatusCode::kPeerLost);
  EXPECT_TRUE(Contains(s.message(), address));
  EXPECT_TRUE(Contains(s.message(), "'k'"));
  EXPECT_TRUE(Contains(s.message(), "could not connect"));
  EXPECT_TRUE(waited >= 0.2 && waited < 1.0);

  s = StatusOf([&] { store.Get("k", Seconds(0.1)); });
  EXPECT_TRUE(s.code() == StatusCode::kPeerLost);
  EXPECT_TRUE(Contains(s.message(), address));
}

TEST(Rendezvous, RendezvousStoreRetriesUntilServerListens) {
  FakeStore server;  // refuses until Listen()
  std::atomic<bool> stored{false};
  std::thread client([&] {
    HttpStore("127.0.0.1", server.port(), "s").Set("early", "bird", Seconds(5));
    stored = true;
  });
  // Staging, not synchronisation: the client's first attempts should meet a closed door. The
  // test holds whichever way the race goes.
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  server.Listen();
  client.join();
  EXPECT_TRUE(stored.load());
  EXPECT_EQ(HttpStore("127.0.0.1", server.port(), "s").Get("early", Seconds(5)),
            std::string("bird"));
}

TEST(Rendezvous, RendezvousStoreSilentServerHonoursDeadline) {
  FakeStore server(FakeStore::Mode::kSilent);
  server.Listen();
  HttpStore store("127.0.0.1", server.port(), "s");
  double waited = 0;
  Status s = TimedStatusOf([&] { store.Get("k", Seconds(0.3)); }, &waited);
  EXPECT_TRUE(s.code() == StatusCode::kPeerLost);
  EXPECT_TRUE(Contains(s.message(), "no answer in time")) << s.message();
  EXPECT_TRUE(waited >= 0.3 && waited < 1.5);
}

TEST(Rendezvous, RendezvousStoreRejectsBadKeysAndScopes) {
  FakeStore server;
  server.Listen();
  HttpStore store("127.0.0.1", server.port(), "s");
  for (const std::string key : {"a/b", "", "has space", "caf\xc3\xa9", "q?x=1", "%2F"}) {
    Status s = StatusOf([&] { store.Set(key, "v", Seconds(1)); });
    EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(s.message(), "'" + key + "'"));
    s = StatusOf([&] { store.Get(key, Seconds(1)); });
    EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument);
  }
  Status s = StatusOf([&] { store.AllGather("bad/prefix", 0, 1, "v", Seconds(1)); });
  EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument);
  EXPECT_TRUE(server.heads().empty());  // nothing invalid ever went on the wire

  s = StatusOf([&] { HttpStore("127.0.0.1", server.port(), "a/b"); });
  EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "'a/b'"));
  s = StatusOf([&] { HttpStore("127.0.0.1", 0, "s"); });
  EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument);
  s = StatusOf([&] { store.AllGather("p", 4, 4, "v", Seconds(1)); });
  EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "rank 4"));
}

TEST(Rendezvous, RendezvousStoreForeignServerFailsFastOrAtItsDeadline) {
  // An HTTP server that refuses the request: no point retrying until the deadline.
  {
    FakeStore server(FakeStore::Mode::kBadStatus);
    server.Listen();
    HttpStore store("127.0.0.1", server.port(), "s");
    double took = 0;
    Status s = TimedStatusOf([&] { store.Set("k", "v", Seconds(5)); }, &took);
    EXPECT_TRUE(s.code() == StatusCode::kInternal) << s.message();
    EXPECT_TRUE(Contains(s.message(), "127.0.0.1:" + std::to_string(server.port())));
    EXPECT_TRUE(Contains(s.message(), "'k'"));
    EXPECT_TRUE(Contains(s.message(), "HTTP 400"));
    EXPECT_TRUE(took < 1.0);
  }
  // Something that does not speak HTTP: cpp-httplib reports it as a failed read, which cannot be
  // told from a dropped connection, so it is retried like one and fails at the deadline, naming
  // the store and the key.
  FakeStore server(FakeStore::Mode::kNotHttp);
  server.Listen();
  HttpStore store("127.0.0.1", server.port(), "s");
  Status s = StatusOf([&] { store.Set("k", "v", Seconds(0.3)); });
  EXPECT_TRUE(s.code() == StatusCode::kPeerLost) << s.message();
  EXPECT_TRUE(Contains(s.message(), "127.0.0.1:" + std::to_string(server.port())));
  EXPECT_TRUE(Contains(s.message(), "'k'"));
}

TEST(Rendezvous, RendezvousStoreAllGatherFourRanks) {
  FakeStore server;
  server.Listen();
  constexpr int kSize = 4;
  std::vector<std::vector<std::string>> results(kSize);
  std::vector<std::string> errors(kSize);
  std::vector<std::thread> ranks;
  auto start = Clock::now();
  for (int rank = 0; rank < kSize; ++rank) {
    ranks.emplace_back([&, rank] {
      try {
        HttpStore store("127.0.0.1", server.port(), "herring");
        results[rank] = store.AllGather("endpoints", rank, kSize,
                                        "10.0.0." + std::to_string(rank) + ":5000", Seconds(5));
      } catch (const Error& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  double took = SecondsSince(start);
  std::vector<std::string> expected;
  for (int rank = 0; rank < kSize; ++rank) {
    expected.push_back("10.0.0." + std::to_string(rank) + ":5000");
  }
  for (int rank = 0; rank < kSize; ++rank) {
    EXPECT_EQ(errors[rank], std::string(""));
    EXPECT_TRUE(results[rank] == expected);
  }
  EXPECT_TRUE(took < 2.0);
  std::fprintf(stderr, "    4-rank AllGather over the fake store: %.1f ms\n", took * 1e3);
}

// One round per host (HERRING_RENDEZVOUS=host): hosts of different sizes, ranks not contiguous
// per host, records with newlines and spaces; every rank gets every record by rank.
TEST(Rendezvous, RendezvousHostGroupedAllGatherUnevenHosts) {
  FakeStore server;
  server.Listen();
  const std::vector<std::vector<int>> hosts = {{0, 4}, {2}, {1, 3, 5}};
  constexpr int kSize = 6;
  auto record = [](int r) { return "host record of rank " + std::to_string(r) + "\n10.0.0." + std::to_string(r) + "\n"; };
  std::vector<std::vector<std::string>> results(kSize);
  std::vector<std::string> errors(kSize);
  std::vector<std::thread> ranks;
  for (size_t h = 0; h < hosts.size(); ++h) {
    for (size_t l = 0; l < hosts[h].size(); ++l) {
      ranks.emplace_back([&, h, l] {
        LaunchInfo launch;
        launch.launcher = Launcher::kHorovodrun;
        launch.rank = hosts[h][l];
        launch.size = kSize;
        launch.local_rank = static_cast<int>(l);
        launch.local_size = static_cast<int>(hosts[h].size());
        // Horovod's cross rank counts the ranks of one local rank: the host index for local rank 0.
        launch.cross_rank = l == 0 ? static_cast<int>(h) : 0;
        launch.cross_size = l == 0 ? static_cast<int>(hosts.size()) : 1;
        launch.hostname = "simhost" + std::to_string(h);
        try {
          HttpStore store("127.0.0.1", server.port(), "herring");
          ASSERT_TRUE(CanGroupByHost(launch));
          results[launch.rank] = HostGroupedAllGather(store, "e0", launch, record(launch.rank), Seconds(5));
        } catch (const Error& e) {
          errors[launch.rank] = e.what();
        }
      });
    }
  }
  for (auto& t : ranks) t.join();
  std::vector<std::string> expected;
  for (int r = 0; r < kSize; ++r) expected.push_back(record(r));
  for (int r = 0; r < kSize; ++r) {
    EXPECT_EQ(errors[r], std::string("")) << "rank " << r;
    EXPECT_TRUE(results[r] == expected) << "rank " << r;
  }
  // A host's ranks met in shared memory: the store got one record per host and the world, and
  // only the hosts' leaders read from it.
  int puts = 0, gets_of_others = 0;
  for (const std::string& head : server.heads()) {
    if (head.rfind("PUT ", 0) == 0) ++puts;
    if (head.rfind("GET ", 0) == 0 && head.find(".all ") == std::string::npos && head.find(".h") == std::string::npos) {
      ++gets_of_others;
    }
  }
  EXPECT_EQ(puts, static_cast<int>(hosts.size()) + 1);
  EXPECT_EQ(gets_of_others, 0);
  // A rank no host reported is named.
  FakeStore lonely;
  lonely.Listen();
  LaunchInfo leader;
  leader.launcher = Launcher::kHorovodrun;
  leader.size = 2;
  leader.hostname = "a";
  HttpStore store("127.0.0.1", lonely.port(), "herring");
  Status s = StatusOf([&] { HostGroupedAllGather(store, "e0", leader, "x", Seconds(2)); });
  EXPECT_NE(std::string::npos, s.message().find("miss ranks 1")) << s.message();
}

// Rank `rank` (= its local rank) of a job of `job_size` whose first `local_size` ranks share one
// host, as horovodrun describes it.
LaunchInfo OneHostLaunch(int rank, int job_size, int local_size, const std::string& hostname) {
  LaunchInfo launch;
  launch.launcher = Launcher::kHorovodrun;
  launch.rank = rank;
  launch.size = job_size;
  launch.local_rank = rank;
  launch.local_size = local_size;
  launch.cross_rank = 0;
  launch.cross_size = 1;
  launch.hostname = hostname;
  return launch;
}

// A host's arena left behind by a job killed during its rendezvous (same store, round and host)
// does not stop the next one: the leader removes it, a member that opened it first opens again.
TEST(Rendezvous, RendezvousHostGroupedAllGatherSurvivesALeftoverArena) {
  FakeStore server;  // listens after the fork below: the child must not inherit a running thread
  constexpr int kSize = 3;
  auto launch_of = [](int r) { return OneHostLaunch(r, kSize, kSize, "leftover-host"); };
  HttpStore names("127.0.0.1", server.port(), "herring");
  const std::string name = HostArenaName(names, "e0", launch_of(0));
  {
    // What a killed job's leader leaves: an arena whose member 0 is a dead process. Shaped like
    // the new one, so a member that opens it first joins it and then finds its creator gone.
    pid_t child = fork();
    if (child == 0) {
      ShmArenaOptions o;
      o.name = name;
      o.local_size = kSize;
      o.slot_bytes = static_cast<size_t>(kSize) * 1024;
      o.deadline = Seconds(30);
      try {
        ShmArena::Attach(o);
      } catch (...) {
      }
      _exit(0);
    }
    const std::string path = "/dev/shm" + name;
    for (int i = 0; i < 2000 && access(path.c_str(), F_OK) != 0; ++i) usleep(1000);
    usleep(20000);  // its member line is written right after the name appears
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    ASSERT_EQ(access(path.c_str(), F_OK), 0) << "the killed creator left no arena to test with";
  }
  server.Listen();
  std::vector<std::vector<std::string>> results(kSize);
  std::vector<std::string> errors(kSize);
  std::vector<std::thread> ranks;
  // The other members first, so that they find the leftover before the leader removes it.
  for (int r : {1, 2, 0}) {
    ranks.emplace_back([&, r] {
      try {
        HttpStore store("127.0.0.1", server.port(), "herring");
        results[r] = HostGroupedAllGather(store, "e0", launch_of(r), "record " + std::to_string(r), Seconds(10));
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
    if (r != 0) usleep(100000);
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kSize; ++r) {
    EXPECT_EQ(errors[r], std::string("")) << "rank " << r;
    EXPECT_TRUE(results[r] == (std::vector<std::string>{"record 0", "record 1", "record 2"})) << "rank " << r;
  }
  EXPECT_NE(access(("/dev/shm" + name).c_str(), F_OK), 0) << "the arena's name was left in /dev/shm";
}

// Runs ranks 0..records.size()-1 of a job of `job_size`, all on one host, through the grouped
// gather (rank r contributing records[r]); returns what each raised ("" if nothing).
std::vector<std::string> OneHostErrors(int job_size, const std::string& hostname,
                                       const std::vector<std::string>& records) {
  FakeStore server;
  server.Listen();
  const int local_size = static_cast<int>(records.size());
  std::vector<std::string> errors(local_size);
  std::vector<std::thread> ranks;
  for (int r = 0; r < local_size; ++r) {
    ranks.emplace_back([&, r] {
      try {
        HttpStore store("127.0.0.1", server.port(), "herring");
        HostGroupedAllGather(store, "e0", OneHostLaunch(r, job_size, local_size, hostname), records[r], Seconds(20));
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  return errors;
}

// When the leader's round fails (here: its host's records do not make the world), the host's other
// ranks, waiting for the world in the arena, report the leader's reason at once.
TEST(Rendezvous, RendezvousHostGroupedAllGatherHandsTheLeadersErrorToItsHost) {
  const auto start = Clock::now();
  const auto errors = OneHostErrors(/*job_size=*/3, "short-host", {"record", "record"});  // rank 2 is on no host
  EXPECT_TRUE(Contains(errors[0], "miss ranks 2")) << errors[0];
  EXPECT_TRUE(Contains(errors[1], "miss ranks 2")) << errors[1];
  EXPECT_TRUE(SecondsSince(start) < 10.0);
}

// A record too large for the arena is an error naming the rank, on it and on its host's leader,
// at once rather than at the deadline.
TEST(Rendezvous, RendezvousHostGroupedAllGatherNamesAnOversizedRecord) {
  const auto start = Clock::now();
  const auto errors = OneHostErrors(2, "oversize-host", {"small", std::string(ShmArena::kNoticeBytes, 'x')});
  EXPECT_TRUE(Contains(errors[1], "rank 1's record is larger than")) << errors[1];
  EXPECT_TRUE(Contains(errors[0], "local rank 1's record is larger than")) << errors[0];
  EXPECT_TRUE(SecondsSince(start) < 10.0);
}

// ---------------------------------------------------------------------------------------------
// Interfaces.

TEST(Rendezvous, RendezvousInterfaceLoopback) {
  EXPECT_EQ(InterfaceAddress("lo"), std::string("127.0.0.1"));
}

TEST(Rendezvous, RendezvousInterfaceUnknownListsInterfaces) {
  Status s = StatusOf([] { InterfaceAddress("no-such-if0"); });
  EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "'no-such-if0' does not exist"));
  EXPECT_TRUE(Contains(s.message(), "lo (127.0.0.1)"));
  s = StatusOf([] { InterfaceAddress(""); });
  EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// The rendezvous protocol (rendezvous/rendezvous_protocol.h): what ranks publish, at init and
// when a server joins a running job.

TEST(Rendezvous, RendezvousProtocolRecordRoundTrip) {
  RankRecord r;
  r.hostname = "hosta";
  r.ip = "10.0.0.7";
  r.port = 40123;
  r.fingerprint = "HOROVOD_FUSION_THRESHOLD=64;HERRING_TCP_STREAMS=2;";
  r.job_id = "abc123";
  r.secret_hex = "00ff";
  RankRecord back = RankRecord::Decode(r.Encode(), 3);
  EXPECT_EQ(back.hostname, r.hostname);
  EXPECT_EQ(back.ip, r.ip);
  EXPECT_EQ(back.port, r.port);
  EXPECT_EQ(back.fingerprint, r.fingerprint);
  EXPECT_EQ(back.job_id, r.job_id);
  EXPECT_EQ(back.secret_hex, r.secret_hex);
  // A rank other than 0 (or a joining server) publishes neither job id nor secret.
  RankRecord plain{"h", "127.0.0.1", 5, "K=1;", "", ""};
  EXPECT_EQ(plain.Encode(), std::string("h\n127.0.0.1\n5\nK=1;\n\n"));
  EXPECT_EQ(RankRecord::Decode(plain.Encode(), 1).job_id, std::string(""));
  Status s = StatusOf([] { RankRecord::Decode("h\n1.2.3.4\nnot-a-port\n", 5); });
  EXPECT_TRUE(s.code() == StatusCode::kInternal);
  EXPECT_TRUE(Contains(s.message(), "rank 5"));
}

TEST(Rendezvous, RendezvousProtocolFingerprintNamesTheKnobAndTheRanks) {
  EXPECT_EQ(FingerprintDifference("A=1;B=2;", 0, "A=1;B=2;", 3), std::string(""));
  std::string why = FingerprintDifference("A=1;B=2;", 0, "A=1;B=5;", 3);
  EXPECT_TRUE(Contains(why, "B differs between ranks"));
  EXPECT_TRUE(Contains(why, "rank 0 has '2'"));
  EXPECT_TRUE(Contains(why, "rank 3 has '5'"));
  // A knob only one side knows counts as differing, whichever side it is.
  EXPECT_TRUE(Contains(FingerprintDifference("A=1;", 0, "A=1;C=4;", 2), "C differs"));
  EXPECT_TRUE(Contains(FingerprintDifference("A=1;C=4;", 0, "A=1;", 2), "C differs"));

  std::vector<RankRecord> records(3);
  for (auto& r : records) r.fingerprint = "A=1;B=2;";
  CheckFingerprints(records);  // agree: no throw
  records[2].fingerprint = "A=9;B=2;";
  Status s = StatusOf([&] { CheckFingerprints(records); });
  EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "A differs between ranks: rank 0 has '1', rank 2 has '9'"));
}

TEST(Rendezvous, RendezvousProtocolHandsOutTheJobCredentials) {
  // Rank 0 draws the job id and the secret, and publishes both in its record.
  RankRecord rank0;
  JobCredentials issued = IssueJobCredentials("", &rank0);
  EXPECT_EQ(rank0.job_id, JobIdHex(issued.job_id));
  EXPECT_EQ(issued.secret.size(), size_t(32));
  EXPECT_EQ(rank0.secret_hex.size(), size_t(64));
  JobCredentials learned = JobCredentialsFrom(RankRecord::Decode(rank0.Encode(), 0), "");
  EXPECT_EQ(learned.job_id, issued.job_id);
  EXPECT_TRUE(learned.secret == issued.secret);
  // A configured secret (HERRING_SECRET) never travels; each rank uses its own.
  RankRecord configured;
  JobCredentials c0 = IssueJobCredentials("s3cret", &configured);
  EXPECT_EQ(c0.secret, std::string("s3cret"));
  EXPECT_EQ(configured.secret_hex, std::string(""));
  EXPECT_EQ(JobCredentialsFrom(configured, "s3cret").secret, std::string("s3cret"));
  EXPECT_EQ(JobCredentialsFrom(configured, "").secret, std::string(""));
  RankRecord unreadable;
  unreadable.job_id = "zz";
  EXPECT_TRUE(StatusOf([&] { JobCredentialsFrom(unreadable, ""); }).code() == StatusCode::kInternal);
}

TEST(Rendezvous, RendezvousProtocolExchangeChecksTheRecords) {
  LaunchInfo launch;
  launch.launcher = Launcher::kMpirun;
  launch.rank = 1;
  launch.size = 2;
  RankRecord mine{"b", "127.0.0.1", 2, "K=1;", "", ""};
  RankRecord rank0{"a", "127.0.0.1", 1, "K=1;", "7f", ""};
  auto records = ExchangeRecords(
      mine, [&](const std::string& text) { return std::vector<std::string>{rank0.Encode(), text}; }, launch, 0,
      Seconds(1));
  EXPECT_EQ(records.size(), size_t(2));
  EXPECT_EQ(records[0].job_id, std::string("7f"));
  EXPECT_EQ(records[1].port, uint16_t(2));
  Status s = StatusOf([&] {
    ExchangeRecords(mine, [](const std::string& text) { return std::vector<std::string>{text}; }, launch, 0,
                    Seconds(1));
  });
  EXPECT_TRUE(s.code() == StatusCode::kInternal);
  EXPECT_TRUE(Contains(s.message(), "1 records for 2 processes"));
  mine.fingerprint = "K=2;";
  s = StatusOf([&] {
    ExchangeRecords(
        mine, [&](const std::string& text) { return std::vector<std::string>{rank0.Encode(), text}; }, launch, 0,
        Seconds(1));
  });
  EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "K differs between ranks: rank 0 has '1', rank 1 has '2'"));
  // mpirun without the front end's exchange cannot meet the others.
  s = StatusOf([&] { ExchangeRecords(mine, nullptr, launch, 0, Seconds(1)); });
  EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "mpi4py"));
  // A job of one needs nobody.
  launch.launcher = Launcher::kSingle;
  launch.rank = 0;
  launch.size = 1;
  EXPECT_EQ(ExchangeRecords(mine, nullptr, launch, 0, Seconds(1))[0].hostname, std::string("b"));
}

TEST(Rendezvous, RendezvousProtocolAddress) {
  EXPECT_EQ(AdvertisedAddress("", true), std::string("127.0.0.1"));
  EXPECT_EQ(AdvertisedAddress("lo", false), std::string("127.0.0.1"));
  Status s = StatusOf([] { AdvertisedAddress("", false); });
  EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "HERRING_IFACE"));
  // One machine can look like several nodes (Spark's local-cluster executors): the message says
  // what the launcher said, and that lo serves when every rank is on this machine.
  s = StatusOf([] { AdvertisedAddress("", false, "torchrun gives this rank a local size of 1 of 2 ranks"); });
  EXPECT_TRUE(Contains(s.message(), "local size of 1 of 2")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "lo when every rank runs on this machine")) << s.message();
  EXPECT_FALSE(Contains(s.message(), "several hosts")) << s.message();
}

TEST(Rendezvous, RendezvousProtocolRunningJobThroughTheStore) {
  FakeStore server;
  server.Listen();
  HttpStore store("127.0.0.1", server.port(), kRendezvousScope);
  // Init wrote the records of ranks 0..2 (epoch 4); rank 1 has retired since.
  for (int r = 0; r < 3; ++r) {
    RankRecord rec{"host" + std::to_string(r), "127.0.0.1", static_cast<uint16_t>(5000 + r), "K=1;",
                   r == 0 ? "beef" : "", r == 0 ? "0102" : ""};
    store.Set(RecordKey(4, r), rec.Encode(), Seconds(2));
  }
  WorldRecord world;
  world.workers = 1;
  world.next_rank = 3;
  world.active = {0, 2};
  EXPECT_EQ(world.Encode(), std::string("1 3 0 2"));
  PublishRunningJob(store, 4, world, Seconds(2));
  RunningJob job = ReadRunningJob(store, Seconds(2));
  EXPECT_EQ(job.epoch, 4);
  EXPECT_EQ(job.world.workers, 1);
  EXPECT_EQ(job.world.next_rank, 3);
  EXPECT_TRUE(job.world.active == std::vector<int>({0, 2}));
  EXPECT_EQ(job.records.size(), size_t(3));
  EXPECT_EQ(job.records[2].hostname, std::string("host2"));
  EXPECT_EQ(job.records[2].port, uint16_t(5002));
  EXPECT_EQ(JobCredentialsFrom(job.records[0], "").job_id, uint64_t(0xbeef));
  EXPECT_TRUE(StatusOf([] { WorldRecord::Decode("1 x"); }).code() == StatusCode::kInternal);
  JoinRequest join = JoinRequest::Decode(JoinRequest{"hostz", "K=1;"}.Encode());
  EXPECT_EQ(join.hostname, std::string("hostz"));
  EXPECT_EQ(join.fingerprint, std::string("K=1;"));
}
