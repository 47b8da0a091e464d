// FaultInjector: makes this rank fail on purpose at a named point of the engine, so the tests can
// prove every phase turns a fault into a clear error on the other ranks (HERRING_FAULT).
//
// Spec: "action:phase:rank[:occurrence]", e.g. "kill:push:2" kills rank 2 with SIGKILL the first
// time it is about to push to the server shards; "stop:shm:1:3" stops rank 1 (SIGSTOP) the third
// time it enters the shared-memory stage.
//   actions: kill (SIGKILL), stop (SIGSTOP), exit (_exit(3)), reset (close every connection
//            with a TCP reset), corrupt (flip one bit of the reduced result before it is copied out),
//            delay (sleep kDelay there, every time from the occurrence on: a rank late in every cycle)
//   phases:  negotiate, gather, shm, push, serve, pull, scatter
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace herring {

class Transport;

class FaultInjector {
 public:
  FaultInjector() = default;
  // Throws Error(InvalidArgument) naming HERRING_FAULT on a malformed spec.
  FaultInjector(const std::string& spec, int rank);

  // How long "delay" holds this rank: long enough that its peers, waiting for it, see what the
  // rest of the job does meanwhile (a retired server's goodbye arrived within 300 ms, not within
  // 60 ms, in tests/test_elastic_servers.py), and far beyond the shared-memory waits' 20 ms poll.
  static constexpr std::chrono::milliseconds kDelay{300};

  bool armed() const { return armed_; }
  // Performs the action if this is the configured point. `result` (may be null) is what
  // "corrupt" damages.
  void At(const char* phase, Transport* net, void* result = nullptr, size_t result_bytes = 0);

 private:
  bool armed_ = false;
  std::string action_;
  std::string phase_;
  int occurrence_ = 1;
  int seen_ = 0;
};

}  // namespace herring
