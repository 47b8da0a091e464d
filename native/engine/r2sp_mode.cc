// R2SP training mode: the engine's side of ps/r2sp_server.h. Rank 0 hands each process hosting
// server shards of the global process set its ranges (a kR2spSessionMessage control message) and the
// initial parameters (step 0); workers then push and pull directly, in their turns, through tagged
// transfers that never enter the negotiation cycles.
#include <sstream>

#include "common/logging.h"
#include "engine/engine.h"
#include "runtime/collective.h"

namespace herring {
namespace {

// Parameter ranges start on 64-byte boundaries (16 floats), as the fusion buffers' do.
constexpr int64_t kR2spAlignElements = 16;

std::string StepName(uint32_t session, uint64_t step, int rank) {
  std::ostringstream out;
  out << "R2SP session " << session << ", step " << step << " of rank " << rank;
  return out.str();
}

}  // namespace

uint32_t Engine::R2spBegin(const float* initial, int64_t count, double lr, double momentum, double weight_decay) {
  if (!running()) throw Error(Status::Shutdown("R2SP: the engine is not running (call hvd.init() first)"));
  if (is_dedicated_server()) throw Error(Status::InvalidArgument("R2SP: only workers train"));
  if (count <= 0) throw Error(Status::InvalidArgument("R2SP: no parameters to train"));
  if (!(lr > 0)) throw Error(Status::InvalidArgument("R2SP: the learning rate must be positive"));
  if (momentum < 0 || weight_decay < 0) {
    throw Error(Status::InvalidArgument("R2SP: momentum and weight decay must not be negative"));
  }
  R2spClient client;
  client.spec.count = count;
  client.spec.lr = lr;
  client.spec.momentum = momentum;
  client.spec.weight_decay = weight_decay;
  for (int r : ProcessSetRanks(0)) client.spec.workers.push_back(r);
  const ServerLayout layout = ProcessSetServers(0);
  const int shards = static_cast<int>(layout.shard_rank.size());
  if (shards > kMaxR2spShards) {
    throw Error(Status::InvalidArgument("R2SP: at most " + std::to_string(kMaxR2spShards) + " server shards"));
  }
  // Even ranges, whatever the load balancer decided for the allreduce: every worker derives the
  // same ones without another message, and the session keeps them to its end.
  const auto ranges = PartitionMap::Balanced(shards).Ranges(count, kR2spAlignElements);
  for (int s = 0; s < shards; ++s) {
    client.spec.shards.push_back({s, ranges[s].begin, ranges[s].end});
    client.shard_rank.push_back(layout.shard_rank[s]);
  }
  {
    std::lock_guard<std::mutex> lock(r2sp_mu_);
    if (r2sp_sessions_ >= kMaxR2spSessionId) {
      throw Error(Status::InvalidArgument("R2SP: at most " + std::to_string(kMaxR2spSessionId) +
                                          " sessions per hvd.init()"));
    }
    client.spec.id = ++r2sp_sessions_;
    r2sp_clients_[client.spec.id] = client;
  }
  if (rank() != 0) return client.spec.id;

  // Rank 0: tell every server process which shards it serves, then hand over the parameters.
  std::map<int, R2spSessionSpec> per_server;
  for (int s = 0; s < shards; ++s) {
    R2spSessionSpec& spec = per_server[client.shard_rank[s]];
    if (spec.id == 0) {
      spec = client.spec;
      spec.shards.clear();
    }
    spec.shards.push_back(client.spec.shards[s]);
  }
  for (const auto& [server, spec] : per_server) {
    if (server == rank()) {
      StartR2spServer(spec);
    } else {
      transport_->SendControl(server, kR2spSessionMessage, EncodeR2spSession(spec));
    }
  }
  std::vector<CompletionPtr> sends;
  for (int s = 0; s < shards; ++s) {
    const auto& range = client.spec.shards[s];
    sends.push_back(transport_->Send(client.shard_rank[s], MakeR2spTag(0, client.spec.id, s, 0, false),
                                     initial + range.begin, (range.end - range.begin) * sizeof(float)));
  }
  Status sent = WaitAll(sends, Deadline::AfterSeconds(config_.timeout_seconds));
  if (!sent.ok()) {
    throw Error(Status(sent.code(), "R2SP session " + std::to_string(client.spec.id) +
                                        ": sending the initial parameters to the servers: " + sent.message()));
  }
  return client.spec.id;
}

void Engine::R2spStep(uint32_t session, const float* grad, float* params, int64_t count) {
  R2spClient client;
  {
    std::lock_guard<std::mutex> lock(r2sp_mu_);
    auto it = r2sp_clients_.find(session);
    if (it == r2sp_clients_.end()) {
      throw Error(Status::InvalidArgument("R2SP: no session " + std::to_string(session) + " on rank " +
                                          std::to_string(rank()) + " (ended, or begun on another engine)"));
    }
    if (it->second.in_step) {
      throw Error(Status::InvalidArgument("R2SP session " + std::to_string(session) +
                                          ": a step is already in progress on rank " + std::to_string(rank())));
    }
    if (count != it->second.spec.count) {
      throw Error(Status::InvalidArgument("R2SP session " + std::to_string(session) + " on rank " +
                                          std::to_string(rank()) + ": the gradient has " + std::to_string(count) +
                                          " elements, the session's parameters " +
                                          std::to_string(it->second.spec.count)));
    }
    it->second.in_step = true;
    ++it->second.steps;
    client = it->second;
  }
  struct StepDone {
    Engine* engine;
    uint32_t session;
    ~StepDone() {
      std::lock_guard<std::mutex> lock(engine->r2sp_mu_);
      auto it = engine->r2sp_clients_.find(session);
      if (it != engine->r2sp_clients_.end()) it->second.in_step = false;
    }
  } done{this, session};

  const uint64_t step = client.steps;
  std::vector<CompletionPtr> transfers;
  for (size_t s = 0; s < client.shard_rank.size(); ++s) {
    const auto& range = client.spec.shards[s];
    const auto chunks = R2spChunks(range);
    for (uint32_t c = 0; c < chunks.size(); ++c) {
      const int64_t at = range.begin + chunks[c].begin;
      const size_t bytes = chunks[c].size() * sizeof(float);
      transfers.push_back(transport_->Recv(client.shard_rank[s], MakeR2spTag(step, session, range.shard, c, true),
                                           params + at, bytes));
      transfers.push_back(transport_->Send(client.shard_rank[s], MakeR2spTag(step, session, range.shard, c, false),
                                           grad + at, bytes));
    }
  }
  // Waiting for our turn may take as long as the workers before us compute: no fixed deadline
  // here. A lost peer fails the transfers (transport liveness, HERRING_TIMEOUT_SECONDS), and a
  // turn stalled past HOROVOD_STALL_SHUTDOWN_TIME_SECONDS fails the job from the server.
  while (true) {
    Status s = WaitAll(transfers, Deadline::AfterSeconds(0.2));
    if (s.ok()) return;
    Status job = failure();
    if (!job.ok()) throw Error(Status(job.code(), StepName(session, step, rank()) + ": " + job.message()));
    if (s.code() != StatusCode::kTimeout) {
      throw Error(Status(s.code(), StepName(session, step, rank()) + ": " + s.message()));
    }
  }
}

void Engine::R2spEnd(uint32_t session) {
  R2spClient client;
  {
    std::lock_guard<std::mutex> lock(r2sp_mu_);
    auto it = r2sp_clients_.find(session);
    if (it == r2sp_clients_.end()) return;  // idempotent
    client = std::move(it->second);
    r2sp_clients_.erase(it);
  }
  if (rank() != 0) return;
  std::set<int> servers(client.shard_rank.begin(), client.shard_rank.end());
  for (int server : servers) {
    if (server == rank()) {
      StopR2spServer(session);
    } else if (transport_->PeerStatus(server).ok()) {
      transport_->SendControl(server, kR2spEndMessage, EncodeR2spEnd(session));
    }
  }
}

void Engine::StartR2spServer(const R2spSessionSpec& spec) {
  R2spServer::Options options;
  options.stall_warning_seconds = config_.stall_check_disabled ? 1e300 : config_.stall_check_seconds;
  options.stall_shutdown_seconds = config_.stall_shutdown_seconds;
  auto server = std::make_unique<R2spServer>(transport_.get(), spec, options, [this](const Status& s) {
    Fail(s);
    Wake();
  });
  HLOG(Debug) << "R2SP session " << spec.id << ": serving " << spec.shards.size() << " shard(s)";
  std::lock_guard<std::mutex> lock(r2sp_mu_);
  r2sp_servers_[spec.id] = std::move(server);
}

void Engine::StopR2spServer(uint32_t session) {
  std::lock_guard<std::mutex> lock(r2sp_mu_);
  auto it = r2sp_servers_.find(session);
  if (it != r2sp_servers_.end()) it->second->Stop();  // kept until the transport closed
}

void Engine::StopAllR2spServers() {
  std::lock_guard<std::mutex> lock(r2sp_mu_);
  for (auto& [id, server] : r2sp_servers_) server->Stop();
}

}  // namespace herring
