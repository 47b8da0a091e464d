#include "engine/r2sp_sessions.h"

#include <set>
#include <sstream>

#include "common/logging.h"
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

R2spSessions::R2spSessions(Transport* transport, const Config& config, int rank, std::function<Status()> job_failure,
                           std::function<void(const Status&)> fail)
    : transport_(transport),
      config_(config),
      rank_(rank),
      job_failure_(std::move(job_failure)),
      fail_(std::move(fail)) {}

R2spSessions::~R2spSessions() = default;

uint32_t R2spSessions::Begin(const float* initial, int64_t count, double lr, double momentum, double weight_decay,
                             const std::vector<int>& workers, const ServerLayout& layout) {
  if (count <= 0) throw Error(Status::InvalidArgument("R2SP: no parameters to train"));
  if (!(lr > 0)) throw Error(Status::InvalidArgument("R2SP: the learning rate must be positive"));
  if (momentum < 0 || weight_decay < 0) {
    throw Error(Status::InvalidArgument("R2SP: momentum and weight decay must not be negative"));
  }
  Client client;
  client.spec.count = count;
  client.spec.lr = lr;
  client.spec.momentum = momentum;
  client.spec.weight_decay = weight_decay;
  for (int r : workers) client.spec.workers.push_back(r);
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
    std::lock_guard<std::mutex> lock(mu_);
    if (sessions_ >= kMaxR2spSessionId) {
      throw Error(Status::InvalidArgument("R2SP: at most " + std::to_string(kMaxR2spSessionId) +
                                          " sessions per hvd.init()"));
    }
    client.spec.id = ++sessions_;
    clients_[client.spec.id] = client;
  }
  if (rank_ != 0) return client.spec.id;

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
    if (server == rank_) {
      StartServer(spec);
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

void R2spSessions::Step(uint32_t session, const float* grad, float* params, int64_t count) {
  Client client;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = clients_.find(session);
    if (it == clients_.end()) {
      throw Error(Status::InvalidArgument("R2SP: no session " + std::to_string(session) + " on rank " +
                                          std::to_string(rank_) + " (ended, or begun on another engine)"));
    }
    if (it->second.in_step) {
      throw Error(Status::InvalidArgument("R2SP session " + std::to_string(session) +
                                          ": a step is already in progress on rank " + std::to_string(rank_)));
    }
    if (count != it->second.spec.count) {
      throw Error(Status::InvalidArgument("R2SP session " + std::to_string(session) + " on rank " +
                                          std::to_string(rank_) + ": the gradient has " + std::to_string(count) +
                                          " elements, the session's parameters " +
                                          std::to_string(it->second.spec.count)));
    }
    it->second.in_step = true;
    ++it->second.steps;
    client = it->second;
  }
  struct StepDone {
    R2spSessions* sessions;
    uint32_t session;
    ~StepDone() {
      std::lock_guard<std::mutex> lock(sessions->mu_);
      auto it = sessions->clients_.find(session);
      if (it != sessions->clients_.end()) it->second.in_step = false;
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
    Status job = job_failure_();
    if (!job.ok()) throw Error(Status(job.code(), StepName(session, step, rank_) + ": " + job.message()));
    if (s.code() != StatusCode::kTimeout) {
      throw Error(Status(s.code(), StepName(session, step, rank_) + ": " + s.message()));
    }
  }
}

void R2spSessions::End(uint32_t session) {
  Client client;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = clients_.find(session);
    if (it == clients_.end()) return;  // idempotent
    client = std::move(it->second);
    clients_.erase(it);
  }
  if (rank_ != 0) return;
  std::set<int> servers(client.shard_rank.begin(), client.shard_rank.end());
  for (int server : servers) {
    if (server == rank_) {
      StopServer(session);
    } else if (transport_->PeerStatus(server).ok()) {
      transport_->SendControl(server, kR2spEndMessage, EncodeR2spEnd(session));
    }
  }
}

void R2spSessions::StartServer(const R2spSessionSpec& spec) {
  R2spServer::Options options;
  options.stall_warning_seconds = config_.stall_check_disabled ? 1e300 : config_.stall_check_seconds;
  options.stall_shutdown_seconds = config_.stall_shutdown_seconds;
  auto server = std::make_unique<R2spServer>(transport_, spec, options, fail_);
  HLOG(Debug) << "R2SP session " << spec.id << ": serving " << spec.shards.size() << " shard(s)";
  std::lock_guard<std::mutex> lock(mu_);
  servers_[spec.id] = std::move(server);
}

void R2spSessions::StopServer(uint32_t session) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = servers_.find(session);
  if (it != servers_.end()) it->second->Stop();  // kept until the transport closed
}

void R2spSessions::StopAllServers() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, server] : servers_) server->Stop();
}

void R2spSessions::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  servers_.clear();
  clients_.clear();
}

}  // namespace herring
