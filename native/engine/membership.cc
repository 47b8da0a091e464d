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
//
// The roster (who takes part, their hosts, rank 0's pending requests, the world published for
// joiners) is engine/server_membership.h's; the records read and written in the store are
// rendezvous/rendezvous_protocol.h's. What is here changes the engine's own state: the process
// sets' server layouts, the topology, and the negotiation state a joiner is sent.
#include <algorithm>

#include "common/environment.h"
#include "common/logging.h"
#include "engine/engine.h"
#include "rendezvous/rendezvous_protocol.h"
#include "runtime/wire.h"

namespace herring {

void Engine::PublishWorld() {
  // What a joining server needs to find the job (rendezvous/rendezvous_protocol.h).
  if (rank() != 0 || launch_.launcher != Launcher::kHorovodrun) return;
  membership_.Publish(launch_.rendezvous_addr, launch_.rendezvous_port, epoch_,
                      Deadline::AfterSeconds(config_.timeout_seconds));
}

void Engine::RequestLeave(int server) { transport_->SendControl(0, kLeaveRequest, std::to_string(server)); }

void Engine::HandleMembershipRequest(const ControlMessage& m) {
  if (rank() != 0) return;
  if (m.type == kJoinRequest) {
    const std::string refused =
        membership_.RequestJoin(rank(), MustMatchFingerprint(), m.from, JoinRequest::Decode(m.payload));
    if (!refused.empty()) transport_->SendControl(m.from, kJoinSnapshot, "error: " + refused);
    return;
  }
  membership_.RequestLeave(m.from, m.payload);
}

void Engine::ApplyMembership(const MembershipChange& c) {
  if (c.kind == MembershipChange::kJoin) {
    // Its connections were admitted before it could ask; wait out the rest of the admission.
    Deadline deadline = Deadline::AfterSeconds(config_.timeout_seconds);
    while (!transport_->Joined(c.rank)) {
      if (deadline.Expired()) throw Error(Status::Timeout("rank " + std::to_string(c.rank) + " never connected"));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  membership_.Apply(c);
  if (c.kind == MembershipChange::kJoin) topo_ = Topology(membership_.hostnames());
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
  psld_->RestartMeasurements();
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
  membership_.EncodeTo(w);
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
  w.I32(sets_.id_limit());
  w.I32s(sets_.free_ids());
  return w.Take();
}

void Engine::RestoreSnapshot(const std::string& payload, Deadline deadline) {
  if (payload.rfind("error:", 0) == 0) throw Error(Status::InvalidArgument("rank 0 refused the join: " + payload.substr(7)));
  WireReader r(payload, "join snapshot");
  cycle_ = r.U64();
  membership_.RestoreFrom(r);
  topo_ = Topology(membership_.hostnames());
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
  const int32_t id_limit = r.I32();
  const auto free_ids = r.I32s();
  {
    std::lock_guard<std::mutex> lock(sets_mu_);
    sets_.RestoreIds(id_limit, free_ids);
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
  HttpStore store(need("HOROVOD_GLOO_RENDEZVOUS_ADDR"), std::stoi(need("HOROVOD_GLOO_RENDEZVOUS_PORT")),
                  kRendezvousScope);
  const RunningJob job = ReadRunningJob(store, deadline);
  epoch_ = job.epoch;
  const int me = job.world.next_rank;
  if (job.records.empty()) throw Error(Status::Internal("the rendezvous store names no rank 0 of the running job"));

  // Everyone's record (retired ranks stay unreachable and are not dialed). The world itself
  // comes with rank 0's snapshot, once admitted.
  std::vector<Endpoint> endpoints(me + 1);
  std::vector<std::string> hostnames(me + 1);
  for (int r = 0; r < me; ++r) {
    hostnames[r] = job.records[r].hostname;
    if (std::find(job.world.active.begin(), job.world.active.end(), r) != job.world.active.end()) {
      endpoints[r] = {job.records[r].ip, job.records[r].port};
    }
  }
  const JobCredentials credentials = JobCredentialsFrom(job.records[0], config_.secret);
  if (credentials.secret.empty()) {
    throw Error(Status::InvalidArgument("the job's secret is not in the rendezvous store: set HERRING_SECRET to it"));
  }
  launch_.launcher = Launcher::kHorovodrun;
  launch_.rendezvous_addr = need("HOROVOD_GLOO_RENDEZVOUS_ADDR");
  launch_.rendezvous_port = std::stoi(need("HOROVOD_GLOO_RENDEZVOUS_PORT"));
  launch_.rank = me;
  launch_.size = me + 1;
  RankRecord mine;
  mine.hostname = !config_.hostname.empty() ? config_.hostname : launch_.hostname;
  mine.fingerprint = MustMatchFingerprint();
  hostnames[me] = mine.hostname;
  membership_.Reset(job.world.workers, {}, std::move(hostnames));
  // A joiner is not told the job's layout: without an interface it listens on loopback.
  mine.ip = AdvertisedAddress(!config_.iface.empty() ? config_.iface : launch_.iface, /*all_on_this_host=*/true);

  ConnectTransport(
      me, me + 1, mine.ip,
      [&](const Endpoint& listening) {
        mine.port = listening.port;
        store.Set(RecordKey(epoch_, me), mine.Encode(), deadline);
        endpoints[me] = listening;
        return MeshPlan{endpoints, credentials};
      },
      deadline);
  transport_->SendControl(0, kJoinRequest, JoinRequest{mine.hostname, mine.fingerprint}.Encode());
  while (true) {
    const uint64_t seen = WakeSeq();  // before looking: a message after it cuts the sleep short
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
    AwaitWake(seen, Clock::now() + std::chrono::milliseconds(100));
  }
  HLOG(Info) << "joined the job as dedicated server rank " << me << " after cycle " << cycle_;
}

}  // namespace herring
