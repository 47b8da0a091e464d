// R2SP training mode, the engine's side of ps/r2sp_server.h: the sessions this worker trains in
// (client side: its turns' pushes and pulls) and the servers this process hosts for them.
//
// A collaborator of its own because R2SP runs beside the negotiation cycles, not in them: the
// application's threads call Begin/Step/End, the engine's loop thread starts and stops servers
// when rank 0's control messages arrive, and neither needs anything else of the engine than the
// transport, a few knobs and a way to fail the job. The Engine owns one and delegates
// R2spBegin/R2spStep/R2spEnd to it.
//
// Rank 0 hands each process hosting server shards of the global process set its ranges (a
// kR2spSessionMessage control message) and the initial parameters (step 0); workers then push and
// pull directly, in their turns, through tagged transfers that never enter the negotiation cycles.
//
// Lock order: mu_ is held while a server is stopped, which joins its thread; that thread's `fail`
// callback takes the engine's failure_mu_, sets_mu_ and wake_mu_. So mu_ comes first: never call
// into this class while holding one of those (the engine does not), and `fail` must never call
// back into it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "common/knobs.h"
#include "common/status.h"
#include "ps/r2sp_server.h"
#include "runtime/server_layout.h"
#include "transport/transport.h"

namespace herring {

class R2spSessions {
 public:
  // `transport` and `config` outlive this object. `job_failure` returns the job's first failure
  // (OK while healthy): a waiting step gives up with it. `fail` is called from a server's thread
  // when its session fails; the engine fails the job.
  R2spSessions(Transport* transport, const Config& config, int rank, std::function<Status()> job_failure,
               std::function<void(const Status&)> fail);
  ~R2spSessions();
  R2spSessions(const R2spSessions&) = delete;
  R2spSessions& operator=(const R2spSessions&) = delete;

  // Every worker calls it with the same initial parameters and hyper-parameters; `workers` and
  // `servers` are the global process set's. Rank 0 starts the servers and sends them the
  // parameters. Returns the session id.
  uint32_t Begin(const float* initial, int64_t count, double lr, double momentum, double weight_decay,
                 const std::vector<int>& workers, const ServerLayout& servers);
  // This worker's next turn: pushes `grad`, and once the servers applied it (after every worker
  // before it in the turn order), pulls the resulting parameters into `params`.
  void Step(uint32_t session, const float* grad, float* params, int64_t count);
  // After every worker's last step: rank 0 stops the servers. Idempotent.
  void End(uint32_t session);

  // Server side: a session this process serves shards of (from rank 0's control messages).
  void StartServer(const R2spSessionSpec& spec);
  void StopServer(uint32_t session);
  void StopAllServers();
  // Drops every session and server. Only after the transport closed: a receive a server had
  // posted may have been pending until the close.
  void Clear();

 private:
  struct Client {
    R2spSessionSpec spec;         // every shard of the session
    std::vector<int> shard_rank;  // the process serving each
    uint64_t steps = 0;
    bool in_step = false;
  };

  Transport* transport_;
  const Config& config_;
  const int rank_;
  std::function<Status()> job_failure_;
  std::function<void(const Status&)> fail_;

  std::mutex mu_;
  uint32_t sessions_ = 0;                                    // sessions begun (ids 1, 2, ...)
  std::map<uint32_t, Client> clients_;                       // workers
  std::map<uint32_t, std::unique_ptr<R2spServer>> servers_;  // processes hosting shards
};

}  // namespace herring
