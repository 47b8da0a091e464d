#include "engine/engine.h"

#include <algorithm>
#include <cmath>

#include "common/environment.h"
#include "common/json.h"
#include "common/logging.h"
#include "common/thread_name.h"
#include "ops/adasum_allreduce.h"
#include "ps/shard_server.h"
#include "kernels/hash.h"
#include "kernels/reduce.h"
#include "rendezvous/rendezvous_protocol.h"

namespace herring {

void Engine::StartLoop() {
  loop_ = std::thread([this] { Loop(); });
  NameThread(loop_, "herring-loop");
}

Engine::Engine(EngineOptions options)
    : config_(Config::FromEnvironment(GivenOrProcessEnvironment(options.env))),
      launch_(DetectLaunch(GivenOrProcessEnvironment(options.env))),
      epoch_(options.epoch),
      zero_copy_(options.zero_copy),
      cache_(static_cast<uint32_t>(config_.cache_capacity)),
      stall_(config_),
      faults_(config_.fault, launch_.rank) {
  const Deadline deadline = Deadline::AfterSeconds(config_.start_timeout_seconds);
  if (options.join_running_job) {
    JoinRunningJob(options, deadline);  // takes its rank, the world and the state from the job
    SetLogRank(launch_.rank);
    StartR2spSessions();
    psld_ = std::make_unique<PsldPolicy>(config_.psld_balancer, rank() == 0, config_.balance_interval);
    ops_ = std::make_unique<OperationManager>(config_);
    timeline_ = Timeline::Open(config_.timeline, rank(), config_.timeline_mark_cycles);
    StartAutotune();
    last_cycle_start_ = Clock::now();
    StartLoop();
    return;
  }
  SetLogRank(launch_.rank);
  std::vector<int> launched(world_size());
  for (int r = 0; r < world_size(); ++r) launched[r] = r;
  membership_.Reset(launch_.size - config_.dedicated_servers, std::move(launched), {});
  Rendezvous(options, deadline);
  StartR2spSessions();
  ops_ = std::make_unique<OperationManager>(config_);
  timeline_ = Timeline::Open(config_.timeline, rank(), config_.timeline_mark_cycles);
  if (size() < 1) {
    throw Error(Status::InvalidArgument("HERRING_DEDICATED_SERVERS=" + std::to_string(config_.dedicated_servers) +
                                        " leaves no worker among the " + std::to_string(world_size()) +
                                        " launched processes"));
  }
  std::vector<int> everyone(size());
  for (int r = 0; r < size(); ++r) everyone[r] = r;
  CreateProcessSet(0, everyone, deadline);
  for (const auto& ranks : options.process_sets) {
    for (int r : ranks) {
      if (r < 0 || r >= size()) {
        throw Error(Status::InvalidArgument("process set " + ShapeToString({ranks.begin(), ranks.end()}) +
                                            " names rank " + std::to_string(r) + ", but the job has " +
                                            std::to_string(size()) + " ranks"));
      }
    }
    if (sets_.FindByRanks(ranks) >= 0) continue;  // a duplicate: the Python layer reports it
    CreateProcessSet(sets_.next_id(), ranks, deadline);
  }
  if (rank() == 0) coordinator_ = std::make_unique<Coordinator>(size(), &sets_);
  if (rank() == 0 && config_.deadlock_seconds > 0) {
    deadlock_ = std::make_unique<DeadlockDetector>(config_.deadlock_seconds);
  }
  psld_ = std::make_unique<PsldPolicy>(config_.psld_balancer, rank() == 0, config_.balance_interval);
  if (config_.elastic_slots > 0) PublishWorld();
  AttachShmControlPlane(deadline);
  StartAutotune();
  last_cycle_start_ = Clock::now();
  StartLoop();
  HLOG(Debug) << "engine up: " << size() << " ranks on " << topo_.num_hosts() << " hosts, launcher "
              << launcher();
}

Engine::~Engine() {
  try {
    Shutdown();
  } catch (...) {
  }
}

namespace {

// The topology file as its JSON reads (whitespace and key order aside), hashed: the knob holds a
// path, and the same path may hold different files on different hosts.
std::string TopologyDigest(const std::string& path) {
  try {
    // Re-read with nlohmann::json, whose objects keep their keys sorted (Json keeps file order).
    const std::string canonical = nlohmann::json::parse(ReadJsonFile(path).dump()).dump();
    return std::to_string(HashBytes(canonical.data(), canonical.size()));
  } catch (const Error&) {
    return "unreadable";  // everywhere alike: hd-topo then fails with the reason when it loads it
  }
}

}  // namespace

std::string Engine::MustMatchFingerprint() const {
  std::string f = config_.MustMatchFingerprint();
  // Under HOROVOD_AUTOTUNE whether HERRING_TCP_STREAMS is set, not its value, decides how many
  // streams a pair connects: ranks that disagree would wait on each other's connections until
  // the start deadline, blaming a missing rank.
  // (No ';' or '=' in a name: they delimit the entries.)
  f += "the TCP data streams a pair of ranks connects (HERRING_TCP_STREAMS, or under HOROVOD_AUTOTUNE " +
       std::string("when it is unset the most autotune tries)=") + std::to_string(ConnectedTcpStreams()) + ";";
  if (!config_.topology.empty()) {
    // Ranks with different networks in mind pair differently in hd-topo, and hang.
    f += "the contents of the HERRING_TOPOLOGY file=" + TopologyDigest(config_.topology) + ";";
  }
  return f;
}

void Engine::Rendezvous(const EngineOptions& options, Deadline deadline) {
  const std::string ip =
      AdvertisedAddress(!config_.iface.empty() ? config_.iface : launch_.iface,
                        launch_.local_size == launch_.size || launch_.launcher == Launcher::kSingle,
                        std::string(LauncherName(launch_.launcher)) + " gives this rank a local size of " +
                            std::to_string(launch_.local_size) + " of " + std::to_string(launch_.size) + " ranks");
  RankRecord mine;
  mine.hostname = config_.hostname.empty() ? launch_.hostname : config_.hostname;
  mine.ip = ip;
  mine.fingerprint = MustMatchFingerprint();
  JobCredentials issued;
  if (rank() == 0) issued = IssueJobCredentials(config_.secret, &mine);
  ConnectTransport(
      rank(), world_size(), ip,
      [&](const Endpoint& listening) {
        mine.port = listening.port;
        const std::vector<RankRecord> records = ExchangeRecords(
            mine, options.exchange, launch_, epoch_, deadline,
            /*per_host=*/config_.per_host_rendezvous && config_.elastic_slots == 0);
        MeshPlan plan;
        plan.credentials = rank() == 0 ? issued : JobCredentialsFrom(records[0], config_.secret);
        std::vector<std::string> hostnames;
        for (const auto& rec : records) {
          hostnames.push_back(rec.hostname);
          plan.endpoints.push_back({rec.ip, rec.port});
        }
        membership_.set_hostnames(std::move(hostnames));
        topo_ = Topology(membership_.hostnames());
        return plan;
      },
      deadline);
}

void Engine::ConnectTransport(int rank, int size, const std::string& ip,
                              const std::function<MeshPlan(const Endpoint& listening)>& rendezvous,
                              Deadline deadline) {
  TransportOptions topts;
  topts.rank = rank;
  topts.size = size;
  topts.bind_ip = ip;
  topts.data_streams = ConnectedTcpStreams();
  topts.chunk_bytes = config_.chunk_bytes;
  topts.peer_timeout_seconds = config_.timeout_seconds;
  topts.on_event = [this] { Wake(); };
  topts.abort_control_type = kAbortMessage;
  topts.vacant_slots = config_.elastic_slots;
  topts.lazy_connections = config_.lazy_connections;
  topts.connect_timeout_seconds = config_.start_timeout_seconds;
  // The job's token and secret are known only after the rendezvous, which needs the port: set
  // below, before the mesh is connected (nothing is accepted before that).
  transport_ = std::make_unique<TcpTransport>(topts);
  transport_->set_data_streams_in_use(config_.tcp_streams);
  const MeshPlan plan = rendezvous(transport_->listen_endpoint());
  job_id_ = plan.credentials.job_id;
  transport_->set_job_token(plan.credentials.job_id);
  transport_->set_secret(plan.credentials.secret);
  transport_->ConnectMesh(plan.endpoints, deadline);
}

void Engine::StartR2spSessions() {
  r2sp_ = std::make_unique<R2spSessions>(
      transport_.get(), config_, rank(), [this] { return failure(); },
      [this](const Status& s) {
        Fail(s);
        Wake();
      });
}

uint32_t Engine::R2spBegin(const float* initial, int64_t count, double lr, double momentum, double weight_decay) {
  if (!running()) throw Error(Status::Shutdown("R2SP: the engine is not running (call hvd.init() first)"));
  if (is_dedicated_server()) throw Error(Status::InvalidArgument("R2SP: only workers train"));
  return r2sp_->Begin(initial, count, lr, momentum, weight_decay, ProcessSetRanks(0), ProcessSetServers(0));
}

void Engine::R2spStep(uint32_t session, const float* grad, float* params, int64_t count) {
  r2sp_->Step(session, grad, params, count);
}

void Engine::R2spEnd(uint32_t session) { r2sp_->End(session); }

std::map<std::string, uint64_t> Engine::CountersSnapshot() const {
  std::map<std::string, uint64_t> snapshot = counters_.Snapshot();
  if (transport_) {
    const TcpTransport::Stats stats = transport_->stats();
    snapshot["open_sockets"] = stats.open_sockets;
    snapshot["connected_peers"] = stats.connected_peers;
  }
  return snapshot;
}

// Horovod's local and cross ranks count workers only (the global process set's layout).
int Engine::local_rank() const { return is_dedicated_server() ? -1 : global_set_->my_local_index; }
int Engine::local_size() const {
  return is_dedicated_server() ? 0 : static_cast<int>(global_set_->local_members().size());
}
int Engine::cross_rank() const { return is_dedicated_server() ? -1 : global_set_->my_host; }
int Engine::cross_size() const { return static_cast<int>(global_set_->hosts.size()); }

bool Engine::ServeUntilShutdown(Deadline deadline, Status* outcome) {
  std::unique_lock<std::mutex> lock(loop_done_mu_);
  if (!loop_done_cv_.wait_until(lock, deadline.when(), [this] { return loop_done_; })) return false;
  *outcome = failure();
  return true;
}

std::string Engine::ArenaName(int32_t set_id) const {
  return "/herring." + JobIdHex(job_id_) + "." + std::to_string(set_id) + "." +
         std::to_string(topo_.host_of(rank()));
}

void Engine::CreateProcessSet(int32_t id, const std::vector<int>& ranks, Deadline deadline) {
  auto set = ProcessSetTable::Make(id, ranks, rank(), topo_);
  if (config_.dedicated_servers > 0) {
    set->servers = ServerLayout::Dedicated(membership_.ActiveServers());
  } else {
    set->servers = ServerLayout::Colocated(set->hosts, set->ranks, config_.num_servers);
  }
  if (set->my_index >= 0 && set->local_members().size() > 1) {
    ShmArenaOptions o;
    o.name = ArenaName(id);
    o.local_index = set->my_local_index;
    o.local_size = static_cast<int>(set->local_members().size());
    o.member_ranks = set->local_members();
    o.slot_bytes = SlotBytes(config_, set->hosts.size() > 1);
    o.spin = DataArenaSpin(o.local_size, available_cpus_);
    o.deadline = deadline;
    o.check_abort = [this] { return CheckAbort(); };
    set->arena = ShmArena::Attach(o);
  }
  std::lock_guard<std::mutex> lock(sets_mu_);
  if (id == 0) global_set_ = set.get();
  sets_.Add(std::move(set));
}

Status Engine::CheckAbort() const {
  Status f = failure();
  if (!f.ok()) return f;
  return transport_ ? WorldFailure() : Status::OK();
}

Status Engine::WorldFailure() const {
  Status f = transport_->FirstFailure();
  if (f.ok() || f.code() != StatusCode::kShutdown) return f;
  // Only goodbyes so far: those of retired servers are expected; any other rank's is not. A
  // server retired by this cycle says goodbye once it has executed the cycle, which may be before
  // this rank has (everything it sent was delivered before its goodbye): expected too.
  for (int r : membership_.world()) {
    if (r == rank() || membership_.LeavingThisCycle(r)) continue;
    Status s = transport_->PeerStatus(r);
    if (!s.ok()) return s;
  }
  return Status::OK();
}

bool Engine::running() const { return !stopped_.load(); }

Status Engine::failure() const {
  std::lock_guard<std::mutex> lock(failure_mu_);
  return failure_;
}

std::vector<int32_t> Engine::ProcessSetIds() const {
  std::lock_guard<std::mutex> lock(sets_mu_);
  return sets_.ids();
}

ServerLayout Engine::ProcessSetServers(int32_t id) const {
  std::lock_guard<std::mutex> lock(sets_mu_);
  const ProcessSet* s = sets_.Find(id);
  if (!s) throw Error(Status::InvalidArgument("process set " + std::to_string(id) + " does not exist"));
  return s->servers;
}

std::vector<int> Engine::ProcessSetRanks(int32_t id) const {
  std::lock_guard<std::mutex> lock(sets_mu_);
  const ProcessSet* s = sets_.Find(id);
  if (!s) throw Error(Status::InvalidArgument("process set " + std::to_string(id) + " does not exist"));
  return s->ranks;
}

void Engine::ValidateAndComplete(Request* request) const {
  RequestMeta& m = request->meta;
  m.rank = rank();
  const std::string op = OpTypeName(m.type);
  auto bad = [&](const std::string& why) {
    throw Error(Status::InvalidArgument(op + " '" + m.name + "' on rank " + std::to_string(rank()) + ": " + why));
  };
  // What is needed of the set, read under its lock (no copy of its ranks: this runs per tensor).
  int n = 0;
  bool root_is_member = false;
  {
    std::lock_guard<std::mutex> lock(sets_mu_);
    const ProcessSet* set = sets_.Find(m.process_set);
    if (!set) bad("process set " + std::to_string(m.process_set) + " does not exist (was it removed?)");
    const std::vector<int>& members = set->ranks;
    n = static_cast<int>(members.size());
    if (!std::binary_search(members.begin(), members.end(), rank())) {
      bad("this rank is not a member of process set " + std::to_string(m.process_set) + " " +
          ShapeToString({members.begin(), members.end()}));
    }
    root_is_member = std::binary_search(members.begin(), members.end(), m.root);
    const int departed = m.type == OpType::kLeave ? -1 : DepartedMemberLocked(*set);
    if (departed >= 0) {
      throw Error(Status::Aborted(op + " '" + m.name + "' on rank " + std::to_string(rank()) + ": " +
                                  DepartureText(departed) + ", and process set " + std::to_string(m.process_set) +
                                  " " + ShapeToString({members.begin(), members.end()}) + " includes it"));
    }
  }
  if (request->buffers.size() != m.tensors.size()) bad("internal: buffers do not match tensors");
  const bool carries_tensors = m.type == OpType::kAllreduce || m.type == OpType::kAllgather ||
                               m.type == OpType::kBroadcast || m.type == OpType::kAlltoall ||
                               m.type == OpType::kReducescatter;
  if (carries_tensors && m.tensors.empty()) bad("no tensors given");
  if (!std::isfinite(m.prescale) || !std::isfinite(m.postscale)) bad("scale factors must be finite");
  for (const auto& t : m.tensors) {
    for (auto d : t.shape) {
      if (d < 0) bad("negative dimension in shape " + ShapeToString(t.shape));
    }
  }
  switch (m.type) {
    case OpType::kAllreduce:
    case OpType::kReducescatter: {
      if (m.reduce_op == ReduceOp::kAdasum) {
        if (m.type == OpType::kReducescatter) bad("Adasum is an allreduce; reducescatter does not take it");
        const std::string why = AdasumUnsupportedReason(m.dtype, n);
        if (!why.empty()) bad(why);
        // Dedicated servers serve herring's byte ranges; Adasum's exchanges are between workers.
        if (config_.dedicated_servers > 0) bad("Adasum does not run with dedicated servers (HERRING_DEDICATED_SERVERS)");
        break;
      }
      ReduceOp effective = m.reduce_op == ReduceOp::kAverage ? ReduceOp::kSum : m.reduce_op;
      if (!ReductionSupported(m.dtype, effective)) {
        bad(std::string(ReduceOpName(m.reduce_op)) + " is not supported for " + DataTypeName(m.dtype) + " tensors");
      }
      if (m.dtype == DataType::kBool && (m.prescale != 1.0 || m.postscale != 1.0 || m.reduce_op == ReduceOp::kAverage)) {
        bad("bool tensors cannot be scaled or averaged");
      }
      if (m.type == OpType::kReducescatter) {
        for (const auto& t : m.tensors) {
          if (t.shape.empty()) bad("reducescatter needs tensors with at least one dimension");
        }
      }
      break;
    }
    case OpType::kAllgather:
      for (const auto& t : m.tensors) {
        if (t.shape.empty()) bad("allgather needs tensors with at least one dimension");
      }
      break;
    case OpType::kBroadcast:
      if (m.root < 0 || m.root >= size()) {
        bad("root rank " + std::to_string(m.root) + " is out of range [0, " + std::to_string(size()) + ")");
      }
      if (!root_is_member) {
        bad("root rank " + std::to_string(m.root) + " is not a member of process set " +
            std::to_string(m.process_set));
      }
      break;
    case OpType::kAlltoall:
      for (auto& t : m.tensors) {
        if (t.shape.empty()) bad("alltoall needs tensors with at least one dimension");
        int64_t dim0 = t.shape[0];
        if (t.splits.empty()) {
          if (dim0 % n != 0) {
            bad("first dimension " + std::to_string(dim0) + " is not divisible by " + std::to_string(n) +
                " ranks; pass splits");
          }
          t.splits.assign(n, dim0 / n);
        }
        if (static_cast<int>(t.splits.size()) != n) {
          bad("splits has " + std::to_string(t.splits.size()) + " entries for " + std::to_string(n) + " ranks");
        }
        int64_t sum = 0;
        for (auto s : t.splits) {
          if (s < 0) bad("splits must not be negative");
          sum += s;
        }
        if (sum != dim0) {
          bad("splits sum to " + std::to_string(sum) + " but the first dimension is " + std::to_string(dim0));
        }
      }
      break;
    case OpType::kAddProcessSet:
    case OpType::kRemoveProcessSet:
      if (!config_.dynamic_process_sets) {
        bad("set HOROVOD_DYNAMIC_PROCESS_SETS=1 to add or remove process sets after init");
      }
      for (int r : m.set_ranks) {
        if (r < 0 || r >= size()) bad("rank " + std::to_string(r) + " does not exist");
      }
      break;
    default:
      break;
  }
}

void Engine::StartTimeline(const std::string& path, bool mark_cycles) {
  if (!config_.timeline_enabled) {
    throw Error(Status::InvalidArgument("Set HOROVOD_TIMELINE=DYNAMIC to enable dynamic timeline usage."));
  }
  auto fresh = Timeline::Open(path, rank(), mark_cycles);  // opened before the lock: a bad path fails here
  std::lock_guard<std::mutex> cycle(cycle_mu_);
  timeline_ = std::move(fresh);
}

void Engine::StopTimeline() {
  std::unique_ptr<Timeline> old;
  {
    std::lock_guard<std::mutex> cycle(cycle_mu_);
    old.swap(timeline_);
  }
}

Request MakeRequest(int op_type, const std::string& name, int process_set, int dtype, int reduce_op, double prescale,
                    double postscale, int root, bool waiter_follows) {
  if (op_type < 0 || op_type >= kNumOpTypes) throw Error(Status::InvalidArgument("bad op type"));
  if (!IsValidDataType(dtype)) throw Error(Status::InvalidArgument("bad dtype"));
  if (!IsValidReduceOp(reduce_op)) throw Error(Status::InvalidArgument("bad reduce op"));
  Request req;
  req.meta.type = static_cast<OpType>(op_type);
  req.meta.name = name;
  req.meta.process_set = process_set;
  req.meta.dtype = static_cast<DataType>(dtype);
  req.meta.reduce_op = static_cast<ReduceOp>(reduce_op);
  req.meta.prescale = prescale;
  req.meta.postscale = postscale;
  req.meta.root = root;
  req.waiter_follows = waiter_follows;
  return req;
}

int64_t Engine::Enqueue(Request request) {
  if (stopped_.load()) {
    Status f = failure();
    throw Error(f.ok() ? Status::Shutdown(ShutDownText(0.5, shutdown_requested_.load())) : f);
  }
  ValidateAndComplete(&request);
  // One clock read for both uses (a synchronous call read the clock 8 times: a uprobe counted).
  const Clock::time_point now = Clock::now();
  request.enqueued_us = Timeline::MicrosOf(now);  // read only by a timeline, which may start at any time
  RequestMeta& m = request.meta;
  // Decided once here: the waiter reads the flag (RunCycleForWaiter).
  request.waiter_follows = WaiterRuns(request);
  const bool wake_loop = !request.waiter_follows;
  int64_t handle;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (m.name.empty()) {
      m.name = std::string(m.tensors.size() > 1 ? "grouped_" : "") + OpTypeName(m.type) + ".noname." +
               std::to_string(++auto_names_[{static_cast<int>(m.type), m.process_set}]);
    }
    Key key{m.process_set, m.name};
    const bool name_in_flight = in_flight_.count(key) > 0;
    if (name_in_flight && request.in_program_order) {
      handle = handles_.Create(std::move(request.on_complete));
      held_[key].emplace_back(std::move(request), handle);
      return handle;  // the loop is busy with its name: nothing to wake
    }
    if (name_in_flight) {
      throw Error(Status::InvalidArgument(std::string(OpTypeName(m.type)) + " '" + m.name + "' on rank " +
                                          std::to_string(rank()) +
                                          ": a collective with this name is already in flight; names must "
                                          "stay unique until the earlier one completes"));
    }
    if (spare_name_.empty()) {
      in_flight_.insert(std::move(key));
    } else {
      spare_name_.value() = std::move(key);
      in_flight_.insert(std::move(spare_name_));  // leaves spare_name_ empty
    }
    last_enqueue_ticks_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    handle = handles_.Create(std::move(request.on_complete));
    incoming_.emplace_back(std::move(request), handle);
  }
  if (wake_loop) WakeForNewWork();
  return handle;
}

Status Engine::Wait(int64_t handle, Deadline deadline) {
  bool done;
  try {
    done = handles_.Poll(handle);
  } catch (const Error& e) {
    return e.status();  // an unknown handle
  }
  if (!done) RunCycleForWaiter(handle);
  return handles_.Wait(handle, deadline);
}

uint64_t Engine::WakeSeq() {
  std::lock_guard<std::mutex> lock(wake_mu_);
  return wake_seq_;
}

void Engine::AwaitWake(uint64_t seen, Clock::time_point until) {
  std::unique_lock<std::mutex> lock(wake_mu_);
  wake_cv_.wait_until(lock, until, [&] { return wake_seq_ != seen; });
}

void Engine::Wake() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    ++wake_seq_;
  }
  wake_cv_.notify_all();
  if (ShmBitsExchange* bits = shm_bell_.load(std::memory_order_acquire)) bits->Wake();
}

void Engine::WakeForNewWork() {
  // Only an idle loop needs a nudge: a loop that is busy, or already waiting out the cycle time
  // for work it has, finds the queue when it looks next. Skipping the notify spares a context
  // switch per tensor when a backward pass submits hundreds of them.
  bool notify;
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    ++wake_seq_;
    notify = idle_waiting_;
  }
  if (!notify) return;
  wake_cv_.notify_all();
  if (ShmBitsExchange* bits = shm_bell_.load(std::memory_order_acquire)) bits->Wake();
}

void Engine::Fail(const Status& status) {
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    if (!failure_.ok()) return;
    failure_ = status;
  }
  HLOG(Error) << status.message();
  stopped_ = true;
  if (transport_) {
    transport_->Abort(status);
    for (int r : membership_.world()) {
      if (r != rank() && transport_->PeerStatus(r).ok()) transport_->SendControl(r, kAbortMessage, status.message());
    }
  }
  // The host's ranks waiting for this rank's post or result (the control plane) learn the cause.
  if (ShmBitsExchange* bits = shm_bell_.load(std::memory_order_acquire)) bits->Poison(status.message());
  std::lock_guard<std::mutex> lock(sets_mu_);
  for (int32_t id : sets_.ids()) {
    if (ProcessSet* s = sets_.Find(id); s && s->arena) s->arena->Poison(status.message());
  }
}

void Engine::Shutdown() {
  if (loop_.joinable()) {
    shutdown_requested_ = true;
    Wake();
    std::unique_lock<std::mutex> lock(loop_done_mu_);
    bool done = loop_done_cv_.wait_for(lock, std::chrono::duration<double>(config_.timeout_seconds),
                                       [this] { return loop_done_; });
    lock.unlock();
    if (!done) {
      Fail(Status::Timeout("shutdown could not be agreed with the other ranks within " +
                           std::to_string(config_.timeout_seconds) + " s"));
    }
    loop_.join();
  }
  stopped_ = true;
  if (r2sp_) r2sp_->StopAllServers();
  if (transport_) transport_->Close();
  // Only now: a receive an R2SP server had posted may have been pending until the close.
  if (r2sp_) r2sp_->Clear();
  handles_.FailAll(Status::Shutdown(ShutDownText(0, true)));
  std::lock_guard<std::mutex> lock(sets_mu_);
  for (int32_t id : sets_.ids()) sets_.Remove(id);
  timeline_.reset();  // closes the trace: valid JSON from here on
}

}  // namespace herring
