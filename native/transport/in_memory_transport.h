// InMemoryFabric: the ranks of a job as threads of one process, connected through memory instead
// of sockets. Each rank's end is an InMemoryTransport keeping the Transport contract
// (transport/transport.h), so the collectives and the server shards run unchanged, n threads on
// one fabric, in unit tests that need no processes, ports or timing luck.
//
// A Send copies straight into the matching posted receive, or, when none is posted yet, into a
// buffer the receive takes later: either way the sender's buffer is free when Send returns.
// Kill(rank) plays a crashed process: its peers see PeerLost naming it, it sees Shutdown.
// Everything is guarded by one mutex; waiting is the completions' (condition variables), so
// threads that outnumber the cores sleep instead of spinning.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/completion.h"
#include "transport/transport.h"

namespace herring {

class InMemoryTransport;

struct InMemoryFabricOptions {
  int size = 1;
  // As TransportOptions::abort_control_type: a control message of this type (0: none) aborts
  // the receiver's transfers on arrival with "rank N aborted the job: <payload>", which is how
  // one rank's failure reaches peers that are blocked waiting for its data.
  uint32_t abort_control_type = 0;
};

class InMemoryFabric {
 public:
  explicit InMemoryFabric(InMemoryFabricOptions options);
  explicit InMemoryFabric(int size) : InMemoryFabric(InMemoryFabricOptions{size, 0}) {}
  // Fails whatever is still pending with Shutdown: no completion is left waiting forever.
  ~InMemoryFabric();
  InMemoryFabric(const InMemoryFabric&) = delete;
  InMemoryFabric& operator=(const InMemoryFabric&) = delete;

  int size() const;
  InMemoryTransport& endpoint(int rank);

  // A simulated crash of `rank`: every pending and later transfer of its peers with it fails
  // with PeerLost ("rank <rank>: ..."), its own with Shutdown; control messages to and from it
  // are dropped. Messages it sent that were fully delivered stay receivable, as over TCP.
  void Kill(int rank);

 private:
  friend class InMemoryTransport;
  struct State;
  std::unique_ptr<State> state_;
  std::vector<std::unique_ptr<InMemoryTransport>> endpoints_;
};

// One rank's end of an InMemoryFabric (made by the fabric, valid while it lives).
class InMemoryTransport final : public Transport {
 public:
  int rank() const override { return rank_; }
  int size() const override;
  CompletionPtr Send(int peer, uint64_t tag, const void* data, size_t bytes) override;
  CompletionPtr Recv(int peer, uint64_t tag, void* data, size_t bytes) override;
  void SendControl(int peer, uint32_t type, const std::string& payload) override;
  bool PopControl(ControlMessage* out) override;
  Status PeerStatus(int peer) const override;
  Status FirstFailure() const override;
  void Abort(const Status& reason) override;
  // This rank's links drop at once: the same as InMemoryFabric::Kill(rank()).
  void ResetConnections() override;

 private:
  friend class InMemoryFabric;
  using State = InMemoryFabric::State;
  InMemoryTransport(State* state, int rank) : state_(state), rank_(rank) {}

  State* state_;
  int rank_;
};

}  // namespace herring
