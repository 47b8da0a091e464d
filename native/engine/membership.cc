// Elastic dedicated servers (PSLD): servers join a running job and leave it between two steps,
// their byte ranges moving to and from the others, with no gradient lost or counted twice (a
// range's sum never depends on which server adds it: servers add the hosts' contributions in
// host order).
//
// Join: a new server process reads the job from horovodrun's rendezvous store (its epoch, the
// world, rank 0's record), takes the next free rank, dials every rank (the transport admits it
// into a vacant slot after the same authenticated handshake) and asks rank 0 to join. Rank 0
// announces it with the next cycle's result; after executing that cycle every rank adds the
// server and its shard, and rank 0 sends it a snapshot of the job's negotiation state (cycle,
// response cache, process sets, partition maps), from which it runs the next cycles like any
// dedicated server.
// Leave: anyone asks rank 0 (a server itself on SIGTERM); after the announcing cycle everyone
// drops the shard and the server retires.
#include <algorithm>
#include <sstream>

#include "common/environment.h"
#include "common/logging.h"
#include "engine/engine.h"
#include "runtime/wire.h"
#include "rendezvous/net_interfaces.h"


namespace herring {
namespace {

std::string WorldKey(int epoch) { return "e" + std::to_string(epoch) + ".world"; }
std::string RecordKey(int epoch, int rank) { return "e" + std::to_string(epoch) + "." + std::to_string(rank); }

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream s(text);
  std::string line;
  while (std::getline(s, line)) out.push_back(line);
  return out;
}

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

}  // namespace

std::vector<int> Engine::ActiveServers() const {
  std::vector<int> servers;
  for (int r : world_) {
    if (r >= workers_) servers.push_back(r);
  }
  return servers;
}

void Engine::PublishWorld() {
  // "<workers> <next free rank> <active ranks...>": what a joining server needs to find the job.
  if (rank() != 0 || launch_.launcher != Launcher::kHorovodrun) return;
  if (!store_) store_ = std::make_unique<HttpStore>(launch_.rendezvous_addr, launch_.rendezvous_port, "herring");
  std::string world = std::to_string(workers_) + " " + std::to_string(hostnames_.size());
  for (int r : world_) world += " " + std::to_string(r);
  const Deadline deadline = Deadline::AfterSeconds(config_.timeout_seconds);
  store_->Set("current", std::to_string(epoch_), deadline);
  store_->Set(WorldKey(epoch_), world, deadline);
}

void Engine::RequestLeave(int server) { transport_->SendControl(0, kLeaveRequest, std::to_string(server)); }

void Engine::HandleMembershipRequest(const ControlMessage& m) {
  if (rank() != 0) return;
  if (m.type == kJoinRequest) {
    auto lines = Lines(m.payload);
    std::string host = lines.empty() ? "" : lines[0];
    std::string fingerprint = lines.size() > 1 ? lines[1] : "";
    if (fingerprint != config_.MustMatchFingerprint()) {
      transport_->SendControl(m.from, kJoinSnapshot,
                              "error: its knobs differ from the job's (" + fingerprint + " vs " +
                                  config_.MustMatchFingerprint() + ")");
      return;
    }
    HLOG(Info) << "rank " << m.from << " on " << host << " asks to join as a dedicated server";
    pending_membership_.push_back({MembershipChange::kJoin, m.from, host});
    return;
  }
  int target = -1;
  try {
    target = std::stoi(m.payload);
  } catch (...) {
  }
  int leaving = 0;
  for (const auto& c : pending_membership_) leaving += c.kind == MembershipChange::kLeave ? 1 : 0;
  const auto servers = ActiveServers();
  if (std::find(servers.begin(), servers.end(), target) == servers.end()) {
    HLOG(Warning) << "ignoring a request (from rank " << m.from << ") that rank " << target
                  << " leave: it is not an active dedicated server";
  } else if (static_cast<int>(servers.size()) - leaving <= 1) {
    HLOG(Warning) << "ignoring a request that server " << target << " leave: it is the last one";
  } else {
    HLOG(Info) << "dedicated server " << target << " leaves (asked by rank " << m.from << ")";
    pending_membership_.push_back({MembershipChange::kLeave, target, ""});
  }
}

void Engine::ApplyMembership(const MembershipChange& c) {
  if (c.kind == MembershipChange::kJoin) {
    // Its connections were admitted before it could ask; wait out the rest of the admission.
    Deadline deadline = Deadline::AfterSeconds(config_.timeout_seconds);
    while (!transport_->Joined(c.rank)) {
      if (deadline.Expired()) throw Error(Status::Timeout("rank " + std::to_string(c.rank) + " never connected"));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    world_.insert(std::upper_bound(world_.begin(), world_.end(), c.rank), c.rank);
    if (static_cast<int>(hostnames_.size()) <= c.rank) hostnames_.resize(c.rank + 1);
    hostnames_[c.rank] = c.hostname;
    topo_ = Topology(hostnames_);
  } else {
    world_.erase(std::remove(world_.begin(), world_.end(), c.rank), world_.end());
  }
  {
    std::lock_guard<std::mutex> lock(sets_mu_);
    for (int32_t id : sets_.ids()) {
      ServerLayout& l = sets_.Find(id)->servers;
      if (!l.dedicated) continue;
      if (c.kind == MembershipChange::kJoin) {
        l.map = l.map.WithShardAdded(1.0 / (l.shard_rank.size() + 1));
        l.shard_rank.push_back(c.rank);
      } else {
        auto it = std::find(l.shard_rank.begin(), l.shard_rank.end(), c.rank);
        if (it == l.shard_rank.end()) continue;
        l.map = l.map.WithShardRemoved(static_cast<int>(it - l.shard_rank.begin()));
        l.shard_rank.erase(it);
      }
      if (id == 0) counters_.partition_map_version = l.map.version();
    }
  }
  counters_.membership_changes++;
  if (balancer_) balancer_ = std::make_unique<PsldBalancer>(BalancerOptions{config_.balance_interval});
  HLOG(Info) << (c.kind == MembershipChange::kJoin ? "server " : "server ") << c.rank
             << (c.kind == MembershipChange::kJoin ? " joined" : " left") << " after cycle " << cycle_;
  if (c.kind == MembershipChange::kLeave && c.rank == rank()) stop_after_cycle_ = true;  // retired
  if (rank() == 0) {
    if (c.kind == MembershipChange::kJoin) transport_->SendControl(c.rank, kJoinSnapshot, EncodeSnapshot());
    PublishWorld();
  }
}

std::string Engine::EncodeSnapshot() const {
  WireWriter w;
  w.U64(cycle_);
  w.I32(workers_);
  w.I32s(world_);
  w.U32(static_cast<uint32_t>(hostnames_.size()));
  for (const auto& h : hostnames_) w.Str(h);
  w.Str(cache_.Serialize());
  std::lock_guard<std::mutex> lock(sets_mu_);
  auto ids = sets_.ids();
  w.U32(static_cast<uint32_t>(ids.size()));
  for (int32_t id : ids) {
    const ProcessSet* s = sets_.Find(id);
    w.I32(id);
    w.I32s(std::vector<int32_t>(s->ranks.begin(), s->ranks.end()));
    w.I32s(std::vector<int32_t>(s->servers.shard_rank.begin(), s->servers.shard_rank.end()));
    w.U8(s->servers.dedicated ? 1 : 0);
    w.U64(s->servers.map.version());
    w.U32(static_cast<uint32_t>(s->servers.map.weights().size()));
    for (double x : s->servers.map.weights()) w.F64(x);
  }
  return w.Take();
}

void Engine::RestoreSnapshot(const std::string& payload, Deadline deadline) {
  if (payload.rfind("error:", 0) == 0) throw Error(Status::InvalidArgument("rank 0 refused the join: " + payload.substr(7)));
  WireReader r(payload, "join snapshot");
  cycle_ = r.U64();
  workers_ = r.I32();
  auto world = r.I32s();
  world_.assign(world.begin(), world.end());
  hostnames_.clear();
  uint32_t n = r.Count(4);
  for (uint32_t i = 0; i < n; ++i) hostnames_.push_back(r.Str());
  topo_ = Topology(hostnames_);
  cache_.Restore(r.Str());
  uint32_t sets = r.Count(4);
  for (uint32_t i = 0; i < sets; ++i) {
    int32_t id = r.I32();
    auto ranks = r.I32s();
    auto shards = r.I32s();
    bool dedicated = r.U8() != 0;
    uint64_t version = r.U64();
    std::vector<double> weights(r.Count(8));
    for (auto& x : weights) x = r.F64();
    auto set = ProcessSetTable::Make(id, std::vector<int>(ranks.begin(), ranks.end()), rank(), topo_);
    set->servers.shard_rank.assign(shards.begin(), shards.end());
    set->servers.dedicated = dedicated;
    set->servers.map = PartitionMap::Weighted(weights, version);
    std::lock_guard<std::mutex> lock(sets_mu_);
    if (id == 0) global_set_ = set.get();
    sets_.Add(std::move(set));
  }
  r.ExpectEnd();
  (void)deadline;
}

void Engine::JoinRunningJob(const EngineOptions& options, Deadline deadline) {
  const Environment env = GivenOrProcessEnvironment(options.env);
  auto need = [&](const char* key) {
    auto it = env.find(key);
    if (it == env.end() || it->second.empty()) {
      throw Error(Status::InvalidArgument(std::string("joining a running job needs ") + key +
                                          " (the job's horovodrun rendezvous)"));
    }
    return it->second;
  };
  if (config_.dedicated_servers <= 0 || config_.elastic_slots <= 0) {
    throw Error(Status::InvalidArgument("joining needs HERRING_DEDICATED_SERVERS > 0 and HERRING_ELASTIC_SLOTS > 0, "
                                        "as the job was started with"));
  }
  HttpStore store(need("HOROVOD_GLOO_RENDEZVOUS_ADDR"), std::stoi(need("HOROVOD_GLOO_RENDEZVOUS_PORT")), "herring");
  epoch_ = std::stoi(store.Get("current", deadline));
  std::vector<std::string> world_fields;
  {
    std::stringstream s(store.Get(WorldKey(epoch_), deadline));
    std::string f;
    while (s >> f) world_fields.push_back(f);
  }
  if (world_fields.size() < 3) throw Error(Status::Internal("unreadable world record in the rendezvous store"));
  workers_ = std::stoi(world_fields[0]);
  const int me = std::stoi(world_fields[1]);
  std::vector<int> active;
  for (size_t i = 2; i < world_fields.size(); ++i) active.push_back(std::stoi(world_fields[i]));

  // Everyone's record (retired ranks stay unreachable and are not dialed).
  std::vector<Endpoint> endpoints(me + 1);
  hostnames_.assign(me + 1, "");
  std::string job_hex, secret_hex;
  for (int r = 0; r < me; ++r) {
    auto f = Lines(store.Get(RecordKey(epoch_, r), deadline));
    f.resize(6);
    hostnames_[r] = f[0];
    if (std::find(active.begin(), active.end(), r) != active.end()) endpoints[r] = {f[1], static_cast<uint16_t>(std::stoi(f[2]))};
    if (r == 0) {
      job_hex = f[4];
      secret_hex = f[5];
    }
  }
  std::string secret = !config_.secret.empty() ? config_.secret : Unhex(secret_hex);
  if (secret.empty()) {
    throw Error(Status::InvalidArgument("the job's secret is not in the rendezvous store: set HERRING_SECRET to it"));
  }
  job_id_ = std::stoull(job_hex, nullptr, 16);
  launch_.launcher = Launcher::kHorovodrun;
  launch_.rendezvous_addr = need("HOROVOD_GLOO_RENDEZVOUS_ADDR");
  launch_.rendezvous_port = std::stoi(need("HOROVOD_GLOO_RENDEZVOUS_PORT"));
  launch_.rank = me;
  launch_.size = me + 1;
  std::string host = !config_.hostname.empty() ? config_.hostname : launch_.hostname;
  hostnames_[me] = host;
  std::string iface = !config_.iface.empty() ? config_.iface : (env.count("HOROVOD_GLOO_IFACE") ? env.at("HOROVOD_GLOO_IFACE") : "");
  std::string ip = iface.empty() ? "127.0.0.1" : InterfaceAddress(iface);

  TransportOptions topts;
  topts.rank = me;
  topts.size = me + 1;
  topts.bind_ip = ip;
  topts.data_streams = config_.tcp_streams;
  topts.chunk_bytes = config_.chunk_bytes;
  topts.peer_timeout_seconds = config_.timeout_seconds;
  topts.on_event = [this] { Wake(); };
  topts.abort_control_type = kAbortMessage;
  topts.vacant_slots = config_.elastic_slots;
  topts.job_token = job_id_;
  topts.secret = secret;
  transport_ = std::make_unique<TcpTransport>(topts);
  endpoints[me] = transport_->listen_endpoint();
  store.Set(RecordKey(epoch_, me), host + "\n" + ip + "\n" + std::to_string(endpoints[me].port) + "\n" +
                                        config_.MustMatchFingerprint() + "\n\n",
            deadline);
  transport_->ConnectMesh(endpoints, deadline);
  transport_->SendControl(0, kJoinRequest, host + "\n" + config_.MustMatchFingerprint());
  while (true) {
    ControlMessage m;
    if (transport_->PopControl(&m)) {
      if (m.from == 0 && m.type == kJoinSnapshot) {
        RestoreSnapshot(m.payload, deadline);
        break;
      }
      if (m.type == kAbortMessage) throw Error(Status::Aborted("rank " + std::to_string(m.from) + " aborted the job: " + m.payload));
      inbox_.push_back(std::move(m));
      continue;
    }
    Status f = transport_->PeerStatus(0);
    if (!f.ok()) throw Error(f);
    if (deadline.Expired()) throw Error(Status::Timeout("rank 0 did not admit this server before the deadline"));
    std::unique_lock<std::mutex> lock(wake_mu_);
    wake_cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return wake_pending_; });
    wake_pending_ = false;
  }
  HLOG(Info) << "joined the job as dedicated server rank " << me << " after cycle " << cycle_;
}

}  // namespace herring
