// Engine: one per process, owned by whoever created it (the Python front holds it; nothing in the
// core is a process-global singleton: the TensorFlow kernels reach it through an EngineSlot that
// the front owns, engine/engine_slot.h). It rendezvouses with the other ranks, connects the mesh,
// and runs one background thread that repeats negotiate -> fuse -> execute -> complete.
// Adapters (torch, TF) only Enqueue requests and wait on handles.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/cpus.h"
#include "common/knobs.h"
#include "runtime/control_messages.h"
#include "engine/coordinator.h"
#include "runtime/counters.h"
#include "engine/deadlock_detector.h"
#include "engine/idle_join_patience.h"
#include "engine/control_tree.h"
#include "engine/p2p_matcher.h"
#include "engine/shm_bits_exchange.h"
#include "runtime/fault_injector.h"
#include "runtime/handle_table.h"
#include "runtime/message.h"
#include "runtime/process_sets.h"
#include "engine/response_cache.h"
#include "engine/stall_inspector.h"
#include "runtime/timeline.h"
#include "ps/psld_policy.h"
#include "engine/r2sp_sessions.h"
#include "engine/server_membership.h"
#include "tuning/autotuner.h"
#include <optional>
#include "runtime/topology.h"
#include "ops/operation_manager.h"
#include "rendezvous/http_store.h"
#include "rendezvous/launch_env.h"
#include "rendezvous/rendezvous_protocol.h"
#include "transport/tcp_transport.h"
#include "transport/zero_copy_pool.h"

namespace herring {

struct EngineOptions {
  // Static process sets created at init, besides the global one (ids 1, 2... in this order).
  std::vector<std::vector<int>> process_sets;
  // Exchanges one record per rank (returns every rank's, by rank). Empty: horovodrun's HTTP store
  // from the launcher's environment (or nothing for a job of one). Python passes an mpi4py-based
  // exchange when launched by mpirun.
  std::function<std::vector<std::string>(const std::string& mine)> exchange;
  // How many times this process initialised before: keeps rendezvous keys of successive
  // init/shutdown rounds apart in the launcher's store.
  int epoch = 0;
  // Environment to read knobs and launcher variables from; empty: the process environment.
  std::map<std::string, std::string> env;
  // A dedicated server joining a running job (HERRING_ELASTIC_SLOTS) through horovodrun's
  // rendezvous store (HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT in `env`), instead of a launched rank.
  bool join_running_job = false;
  // The owner's zero-copy memory (hvd.zero_copy_empty), shared by the engines it creates in turn;
  // null: none. Algorithms see it as ExecContext::zero_copy.
  std::shared_ptr<ZeroCopyMemory> zero_copy;
};

// One tensor of a request as the adapter hands it over: the engine reads `input` and writes
// `output` (may be the same memory). output == nullptr for collectives whose output the engine
// allocates (allgather, alltoall, reducescatter).
struct TensorBuffers {
  const void* input = nullptr;
  void* output = nullptr;
};

struct Request {
  RequestMeta meta;
  std::vector<TensorBuffers> buffers;  // one per meta.tensors entry
  // If set, the result is pushed here (on the engine's thread) instead of being waited for.
  HandleTable::Callback on_complete;
  int64_t enqueued_us = 0;  // for the timeline
  // Matched in program order (torch.distributed): a request whose name is still in flight waits
  // behind it instead of being rejected, so the n-th request of a name pairs with every rank's
  // n-th. Such names can stay the same from step to step, and so hit the response cache.
  bool in_program_order = false;
  // The caller waits for the result right after enqueueing (a synchronous call). Enqueue keeps
  // it only where the waiter will run the request's cycle (Engine::WaiterRuns); the loop is not
  // woken for such a request, sparing its thread a wake-up it would spend blocked behind the waiter.
  bool waiter_follows = false;
};

// A request's scalar fields from a front end's plain integers, checked (Error: InvalidArgument
// for an op type, dtype or reduce op out of range): what every front end fills alike.
Request MakeRequest(int op_type, const std::string& name, int process_set, int dtype, int reduce_op, double prescale,
                    double postscale, int root, bool waiter_follows);

// With more local ranks than CPUs, a synchronous request of at most this many bytes runs on its
// caller (HERRING_CALLER_RUNS_CYCLES), a larger one on the loop's thread. Measured at np=4 on 2
// cores (3 interleaved launches each): 256 KiB 144 -> 113 us and 1 MiB 479 -> 228 us on the
// caller (the limit was HERRING_SMALL_MESSAGE_BYTES, 64 KiB); at 4 MiB the caller measured
// 1128 us against the loop's 1040, at 16 MiB the same.
constexpr int64_t kOversubscribedCallerBytes = int64_t{1} << 20;

class Engine {
 public:
  explicit Engine(EngineOptions options);  // throws Error
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Negotiated with every rank (Horovod semantics: one rank shutting down stops the job), then the
  // connections close. Never hangs: bounded by HERRING_TIMEOUT_SECONDS. Idempotent.
  void Shutdown();
  // This rank leaves the job in order while the others go on (torch.distributed: destroy_process_group,
  // or the end of a process whose engine torch started): agreed with every rank in one cycle,
  // then the connections close with a goodbye. Collectives of the process sets that include it
  // fail on their members, naming it; the other sets keep working. Rank 0, which coordinates
  // negotiation, first waits until the others have left (engine/departures.cc). Idempotent.
  void Leave();
  // This rank's process is failing (an uncaught exception: its exit handlers still run, but it
  // must not be taken for a departure in order): the job fails with `why` on every rank (each
  // gets it as "rank N aborted the job: <why>" before this rank's goodbye), then this rank shuts
  // down without agreeing anything. A job that failed already keeps its first failure.
  void AbortJob(const std::string& why);
  // hvd.start_timeline / stop_timeline (Horovod's): start writing this rank's trace to
  // Timeline::PathFor(path, rank()) (a running trace is closed first), or stop. Applied between two
  // cycles (under cycle_mu_). Throws InvalidArgument unless HOROVOD_TIMELINE is set (a path or
  // DYNAMIC), as Horovod refuses.
  void StartTimeline(const std::string& path, bool mark_cycles);
  void StopTimeline();
  bool running() const;

  int rank() const { return launch_.rank; }
  // Workers: what Horovod calls the job's size. Dedicated servers, if any, come after them.
  int size() const { return membership_.workers(); }
  // The processes launched with the job, workers and dedicated servers (before any joined).
  int world_size() const { return launch_.size; }
  // Asks rank 0 to retire dedicated server `server` (its ranges move to the others between two
  // steps, then it exits). Any process may ask; a server asks for itself on SIGTERM.
  void RequestLeave(int server);
  bool is_dedicated_server() const { return rank() >= size(); }
  // A dedicated server's whole life after init: serves until the job shuts down or fails.
  // Returns the job's failure (OK after an orderly shutdown).
  // Waits up to `deadline`; false if still serving (so Python can handle signals in between).
  bool ServeUntilShutdown(Deadline deadline, Status* outcome);
  int local_rank() const;
  int local_size() const;
  int cross_rank() const;
  int cross_size() const;
  const Config& config() const { return config_; }
  const Topology& topology() const { return topo_; }
  std::string launcher() const { return LauncherName(launch_.launcher); }

  // Validates the request locally (throws Error(InvalidArgument) naming the tensor), fills in
  // what the adapter may leave out (auto name, even alltoall splits, Average -> Sum + postscale),
  // queues it for the background thread and returns its handle.
  int64_t Enqueue(Request request);
  bool Poll(int64_t handle) const { return handles_.Poll(handle); }
  // Blocks until the handle completes or the deadline. The waiter of a synchronous call
  // (Request::waiter_follows: any size where every local rank has a core, else at most
  // HERRING_SMALL_MESSAGE_BYTES) that finds the loop idle runs the cycle its request needs on its
  // own thread (HERRING_CALLER_RUNS_CYCLES): the hand-offs to the loop's thread and back cost
  // wake-ups, more than a small collective itself.
  Status Wait(int64_t handle, Deadline deadline);
  OpResult Take(int64_t handle) { return handles_.Take(handle); }
  // The members of its process set that have not submitted the collective `handle` waits for
  // (global ranks, sorted), as rank 0's coordinator sees it once every member that has it pending
  // has announced it there: what a wait that timed out names (engine/missing_ranks.cc). nullopt
  // when that is not known by `deadline`: the request is not pending here (complete, or not taken
  // by a cycle yet), rank 0 has no entry for it, or did not answer in time.
  std::optional<std::vector<int>> MissingRanks(int64_t handle, Deadline deadline);
  // The ranks this rank lost, as data (global ranks, sorted): the rank the job's failure started
  // from and every rank whose connection closed without a goodbye, never one that left in order
  // (departures.cc). What a survivor hands to torch.distributed.shrink_group without parsing an
  // error's text.
  std::vector<int> LostRanks() const;

  std::vector<int32_t> ProcessSetIds() const;
  // Throws Error(InvalidArgument) for an unknown id.
  std::vector<int> ProcessSetRanks(int32_t id) const;
  // The server shards of a process set: their ranks, current shares and map version.
  ServerLayout ProcessSetServers(int32_t id) const;

  // R2SP training mode (engine/r2sp_sessions.h, ps/r2sp_server.h). Every worker calls R2spBegin with the
  // same initial parameters (float32, `count` elements) and hyper-parameters; the server shards
  // of the global process set take them over. Returns the session id.
  uint32_t R2spBegin(const float* initial, int64_t count, double lr, double momentum, double weight_decay);
  // This worker's next turn: pushes `grad`, and once the servers applied it (after every worker
  // before it in the turn order), pulls the resulting parameters into `params`.
  void R2spStep(uint32_t session, const float* grad, float* params, int64_t count);
  // After every worker's last step (the caller synchronises them): the servers stop.
  void R2spEnd(uint32_t session);

  // Point-to-point transfers outside the negotiation cycles (p2p.cc; torch.distributed send/recv):
  // only the two ranks take part. Matched in order per (peer, tag); `tag` < 2^20.
  CompletionPtr P2pSend(int peer, uint32_t tag, const void* data, size_t bytes);
  CompletionPtr P2pRecv(int peer, uint32_t tag, void* data, size_t bytes);
  // From whichever of `peers` (global ranks; this rank is left out) sends first with `tag`:
  // torch's recv without a source. The result names the sender (engine/p2p_matcher.h).
  AnySourceReceivePtr P2pRecvAny(const std::vector<int>& peers, uint32_t tag, void* data, size_t bytes);

  // The counters, plus the transport's sockets: open_sockets (connected TCP sockets to peers) and
  // connected_peers (peers with any), which the scale benchmark reads per rank.
  std::map<std::string, uint64_t> CountersSnapshot() const;
  // The first failure of the job (OK while healthy).
  Status failure() const;

 private:
  enum class RequestState { kNew, kAnnounced, kCached };
  struct Pending {
    Request request;
    int64_t handle = -1;
    RequestState state = RequestState::kNew;
    uint32_t position = 0;  // cache position when kCached
    int64_t taken_us = 0;   // when a cycle first picked it up (timeline)
    Clock::time_point taken_at;     // same, for the stall inspector
    int64_t uncache_position = -1;  // stalled cached request: send it through the coordinator
  };
  using Key = CollectiveKey;

  // Init (engine.cc).
  void Rendezvous(const EngineOptions& options, Deadline deadline);
  // What must be the same on every rank, compared in the rendezvous before any rank connects: the
  // must-match knobs, and what a rank derives from its own environment that must match too.
  std::string MustMatchFingerprint() const;
  // What the rendezvous tells a process that is listening: every rank's endpoint (its own
  // included) and the job's credentials.
  struct MeshPlan {
    std::vector<Endpoint> endpoints;
    JobCredentials credentials;
  };
  // The one way this engine builds its transport, at init and when a server joins a running job:
  // listen on `ip` as rank `rank` of `size` (plus HERRING_ELASTIC_SLOTS vacant slots), let
  // `rendezvous` publish the listening endpoint and learn the plan, then connect the mesh.
  void ConnectTransport(int rank, int size, const std::string& ip,
                        const std::function<MeshPlan(const Endpoint& listening)>& rendezvous, Deadline deadline);
  // After the transport exists: the collaborators that need it.
  void StartR2spSessions();
  void CreateProcessSet(int32_t id, const std::vector<int>& ranks, Deadline deadline);
  std::string ArenaName(int32_t set_id) const;
  void ValidateAndComplete(Request* request) const;

  // MissingRanks' part in the loop (missing_ranks.cc), called as it looks for work: sends the
  // questions asked since (a cached collective first goes through the coordinator, as the stall
  // inspector sends one, so that rank 0 sees who submitted it) and, on rank 0, answers those
  // whose table has settled.
  void ServeMissingRanks();
  void AnswerMissingQueries();
  void DeliverMissing(const Key& key, const std::optional<std::vector<int>>& missing);
  void AbandonMissingQuestions();  // the loop ended: nobody will answer

  // Background loop (background_loop.cc).
  void StartLoop();  // starts the loop's thread, named for top -H and gdb (engine.cc)
  void Loop();
  // Horovod's "has been shut down" error text, word for word, and who shut down: this rank
  // (`by_this_rank`), or the rank(s) whose transport said goodbye (awaited up to `await_seconds`:
  // the asking rank closes its transport right after the cycle that agreed the shutdown).
  std::string ShutDownText(double await_seconds, bool by_this_rank) const;
  // What the loop does next, decided without blocking (holding cycle_mu_): stop, run a cycle, or
  // sleep until `until` (`idle`: with nothing of its own to do).
  struct Trigger {
    enum Kind { kStop, kRun, kSleep } kind;
    Clock::time_point until{};
    bool idle = false;
  };
  // `known_new_work`: the caller saw this rank's queue non-empty with cycle_mu_ held (a waiter's
  // request), so the queue need not be looked at again.
  Trigger LookForCycle(bool known_new_work = false);
  // The loop's wait for a cycle to run; sleeps without `cycle` (cycle_mu_). False: stop.
  bool WaitForTrigger(std::unique_lock<std::mutex>& cycle);
  // Whether the waiter of `request` runs its cycle (RunCycleForWaiter) instead of the loop: a
  // synchronous request (Request::waiter_follows), with HERRING_CALLER_RUNS_CYCLES on, of any size
  // where every local rank has a core and small ones elsewhere. The loop is not woken for it.
  bool WaiterRuns(const Request& request) const;
  // A waiter's turn at running the cycle that takes its small synchronous request `handle` from the
  // queue, if no cycle took it yet and the loop is not in one. A request already taken waits for
  // its peers; the loop answers their invitations (and the waiter stays "blocked" for the
  // deadlock detector).
  void RunCycleForWaiter(int64_t handle);
  void RunCycle();  // one negotiation cycle and the execution of what it decided
  void RunCycleSteps();
  void TakeNewRequests(std::vector<RequestMeta>* uncached, std::vector<uint32_t>* stale);
  std::vector<uint64_t> ReadyBits(bool has_uncached, bool has_stale) const;
  // How the ranks agree on the bits (control_plane.cc: shared memory and TCP in one place).
  // What rode with a cycle's bit vectors for its lone small allreduce: part of the negotiated
  // cycle's result, handed to the execution with the cycle's responses (Execute), never kept on the
  // engine. Valid until the cycle ends: the inputs live in the notice areas, the total in a
  // leader's copy of the result message or in the host's result area, which the next cycles reuse.
  // The inputs: every local rank posted one for the same cached allreduce; by rank; empty: none.
  struct InputsWithBits {
    int32_t process_set = -1;
    std::string name;
    uint32_t position = 0;
    std::vector<const void*> by_rank;
  };
  // The total, when every host's sum rode the leaders' tree (host_sums_in_tree.cc); bytes 0: none.
  struct TotalWithBits {
    int32_t process_set = -1;
    std::string name;
    uint32_t position = 0;
    size_t bytes = 0;
    const uint8_t* in_host_area = nullptr;
    std::string held;
    const uint8_t* data() const {
      return in_host_area ? in_host_area : reinterpret_cast<const uint8_t*>(held.data());
    }
  };
  struct CarriedWithBits {
    InputsWithBits inputs;
    TotalWithBits total;
  };
  // A negotiated cycle's result: the agreed bit vectors and what came with them.
  struct AgreedCycle {
    std::vector<uint64_t> bits;
    CarriedWithBits with_bits;
  };
  AgreedCycle AgreeOnBits(const std::vector<uint64_t>& mine);
  AgreedCycle AgreeOnBitsInSharedMemory(const std::vector<uint64_t>& mine);
  // Before this rank posts its vector in shared memory (HERRING_SPREAD_CPUS).
  void MoveOffSharedCpu(size_t words);
  // Waits for this host's ranks through `await` (the shared-memory AND, or the leader's posted
  // result), inviting the late ones; throws the world's failure.
  std::vector<uint64_t> AwaitLocalRanks(const std::function<Status(Deadline, std::vector<uint64_t>*)>& await);
  // The request whose input may travel with this cycle's bit vector (HERRING_INPUTS_WITH_BITS):
  // this rank's only request, a cached allreduce of the whole world that fits beside the vector
  // and within HERRING_SMALL_MESSAGE_BYTES; null if there is none. The one-step path uses the
  // inputs (ReduceHostInOneStep); any other algorithm ignores them.
  const Pending* LoneSmallAllreduce(size_t words) const;
  void PostBitsInSharedMemory(const std::vector<uint64_t>& mine);  // with that input, if there is one
  // After this host's vectors for the cycle met: the inputs that came with them, if every local
  // rank posted one for the same allreduce (else none).
  InputsWithBits TakeInputsWithBits(size_t words);
  // The lone request's inputs, as the one-step path stages them (prescaled, end to end).
  AllreduceBatch InputsOf(const Pending& lone) const;
  // The small allreduce across hosts whose total rides the hierarchical plane (host_sums_in_tree.cc).
  // A leader, after its host's vectors met: its host's sum of the cycle's lone allreduce, if every
  // local rank's input came with the bits (or it is alone on its host with one); else none.
  std::vector<HostSum> HostSumToCarry(size_t words, const InputsWithBits& posted);
  // Rank 0: the total of every host's sum, reduced in host order, if every host sent one for the
  // same allreduce; else none.
  CarriedTotal TotalOfHostSums(std::vector<HostSum> sums) const;
  // Keeps the cycle's total for the execution: a leader's from the result message, the others'
  // from the host's result area.
  TotalWithBits TakeTotalWithBits(CarriedTotal total);
  TotalWithBits TakeTotalWithBitsFromHost(size_t words);
  TotalWithBits NameTotalWithBits(uint32_t position, size_t bytes);  // throws if this rank's cache disagrees
  // Whether an allreduce of `bytes` in `set` may have its total carried: the whole world, the
  // host-sums exchange's layout (ops/herring/small_exchange.h), and every host's sum within one message.
  bool TotalMayRideTree(const ProcessSet& set, size_t bytes) const;
  // Posts `mine` in this host's exchange, invites the late local ranks and returns the host's AND.
  std::vector<uint64_t> AwaitHostAnd(const std::vector<uint64_t>& mine);
  // The hierarchical plane (control_plane.cc): the host ANDs in shared memory, its leader combines
  // the hosts' ANDs in a binomial tree over TCP and posts the result for the host's other ranks.
  AgreedCycle AgreeOnBitsAcrossHosts(const std::vector<uint64_t>& mine);
  // The TCP part, over `tree` (the star, or the leaders' tree): invites the children that have not
  // contributed, ANDs their contributions into `mine`, sends the subtree's AND up and the result
  // down; the root adds PSLD's maps and membership announcements.
  void InviteChildren(const ControlTree& tree);
  // Host sums (the leaders' tree: HostSumToCarry) climb with the contributions unreduced; the
  // root's total of them (TotalOfHostSums) comes down with the result.
  AgreedCycle AgreeInTree(const ControlTree& tree, std::vector<uint64_t> mine, std::vector<HostSum> sums = {});
  // The star over today's world (HERRING_CONTROL_PLANE=tcp and the combinations that need it).
  ControlTree StarTree() const;
  void AttachShmControlPlane(Deadline deadline);
  void CoordinatorRound(const std::vector<RequestMeta>& uncached, const std::vector<uint32_t>& stale,
                        std::vector<Response>* responses, std::vector<uint32_t>* evict);
  // The same over the hierarchical plane: each leader gathers its host's and its children's
  // requests, sends them up in one message, and passes rank 0's responses down.
  void CoordinatorRoundAcrossHosts(const std::vector<RequestMeta>& uncached, const std::vector<uint32_t>& stale,
                                   std::vector<Response>* responses, std::vector<uint32_t>* evict);
  // Every negotiation message goes through here: counted (control_messages_sent).
  void SendNegotiation(int peer, uint32_t type, const std::string& payload);
  // A blocked report of rank `origin` (kBlockedReport's payload): rank 0's detector takes it;
  // on the hierarchical plane other ranks pass it to their leader, leaders to their parent.
  void RouteBlockedReport(int origin, const std::string& report);
  void RevertCachedAt(uint32_t position);
  // `now`: LookForCycle's one reading of the clock (these checks count in seconds).
  void UncacheStalled(Clock::time_point now);
  // A cached request goes to rank 0's coordinator in the next cycle, so that rank 0 sees who
  // submitted it (the stall inspector's and MissingRanks' way).
  void SendThroughCoordinator(Pending* p);
  // Deadlocks (engine/deadlock_detector.h): every rank reports what it is blocked on; rank 0
  // fails the collectives of ranks that can only wait for each other.
  void ReportBlocked(bool new_work, Clock::time_point now);
  void CheckDeadlock(Clock::time_point now);
  void ApplyMapUpdate(const MapUpdate& update);
  Status WorldFailure() const;  // a failure of a rank still in the job (retired ranks say goodbye)

  // Departures (departures.cc): ranks that left in order.
  std::string DepartureText(int departed) const;
  int DepartedMemberLocked(const ProcessSet& set) const;  // sets_mu_ held: a member that left, or -1
  void BeginDepartures(const std::vector<Response>& ready);     // the cycle's agreed leaves, before execution
  void CompleteDepartures(const std::vector<Response>& ready);  // ... and after it
  void FailRequestsOfDepartedSets();  // pending, queued and held requests of sets with a member that left

  // Elastic dedicated servers (membership.cc).
  void JoinRunningJob(const EngineOptions& options, Deadline deadline);
  void PublishWorld();
  void HandleMembershipRequest(const ControlMessage& m);
  void ApplyMembership(const MembershipChange& change);
  std::string EncodeSnapshot() const;
  void RestoreSnapshot(const std::string& payload, Deadline deadline);
  void DrainControl();
  ControlMessage AwaitControl(int from, uint32_t type);
  void Fail(const Status& status);
  void Wake();
  void WakeForNewWork();
  Status CheckAbort() const;

  // Execution (execution.cc).
  // The cycle's responses, with what rode with its bit vectors (for the batch of its lone allreduce).
  void Execute(const std::vector<Response>& ready, const CarriedWithBits& with_bits);
  void ExecuteAllreduceBatch(const std::vector<const Response*>& responses, uint32_t unit,
                             const CarriedWithBits& with_bits);
  void ServeAllreduceBatch(const std::vector<const Response*>& responses, uint32_t unit);
  void ExecuteOne(const Response& response, uint32_t unit);
  void ApplyProcessSetChange(const Response& response);
  Pending* FindPending(const Response& response);
  void Finish(const Response& response, OpResult result);
  // Finish for a batch that succeeded (a fused allreduce): one lock of the queue and of the
  // handle table for all of it, not one per tensor, which the adapters' threads contend for.
  void FinishSucceeded(const std::vector<const Response*>& responses);
  // Frees `key` for the next request of that name, or queues the request held behind it.
  // Called with queue_mu_ held.
  void ReleaseNameLocked(const Key& key);
  bool HeldRequestAwaited(const Key& key) const;  // a request held behind `key` is waited on
  ExecContext MakeContext(ProcessSet& set, uint32_t unit);

  // HOROVOD_AUTOTUNE (autotune.cc).
  void StartAutotune();
  // Data streams the transport connects per peer: more than HERRING_TCP_STREAMS when autotune
  // tries counts (autotune.cc).
  int ConnectedTcpStreams() const;
  void ObserveForAutotune(const Response& response);  // a collective this cycle ran (rank 0)
  // After each cycle: puts received settings in force, schedules the next broadcast of rank 0's.
  void AutotuneAfterCycle();
  void PublishTunedSettings();  // into the counters (hvd_herring.counters())
  // The operation manager of the allreduce algorithm in force.
  OperationManager& Ops();

  Config config_;
  // This process's CPUs at start-up: with at least one per local rank, a synchronous request of
  // any size runs on its caller (WaiterRuns).
  const int available_cpus_ = CpusAvailable();
  // Whether a cycle's thread leaves a CPU another local rank's cycle is on (HERRING_SPREAD_CPUS):
  // where each local rank can have a core.
  bool SpreadCpus() const { return config_.spread_cpus && local_size() <= available_cpus_; }
  LaunchInfo launch_;
  Topology topo_;
  uint64_t job_id_ = 0;
  int epoch_ = 0;
  std::unique_ptr<TcpTransport> transport_;
  std::shared_ptr<ZeroCopyMemory> zero_copy_;  // from EngineOptions, for ExecContext
  mutable std::mutex sets_mu_;  // guards the table's structure: adapters look sets up
  ProcessSetTable sets_;
  std::vector<int> departed_;  // ranks that left the job in order (guarded by sets_mu_)
  std::atomic<int> departures_{0};  // how many: a check without the lock (the loop; rank 0's Leave)
  std::mutex departures_mu_;         // with departures_cv_: rank 0's Leave waits for the others'
  std::condition_variable departures_cv_;
  const ProcessSet* global_set_ = nullptr;  // id 0: every worker
  ResponseCache cache_;
  std::unique_ptr<Coordinator> coordinator_;  // rank 0 only
  std::unique_ptr<OperationManager> ops_;
  HandleTable handles_;
  Counters counters_;
  std::unique_ptr<Timeline> timeline_;
  StallInspector stall_;
  std::unique_ptr<DeadlockDetector> deadlock_;  // rank 0, unless HERRING_DEADLOCK_TIME_SECONDS=0
  FaultInjector faults_;
  // PSLD (HERRING_BALANCER=psld): who times the shards and, on rank 0, decides to move ranges.
  std::unique_ptr<PsldPolicy> psld_;
  // Where the bit vectors meet when the world is on one host (HERRING_CONTROL_PLANE); null: TCP.
  std::unique_ptr<ShmBitsExchange> shm_bits_;
  // The same, for Wake() on other threads (the transport's, the application's): set once, after
  // the attach, before the loop starts.
  std::atomic<ShmBitsExchange*> shm_bell_{nullptr};
  // The hierarchical plane (HERRING_CONTROL_PLANE=auto across hosts): shm_bits_ is this host's
  // exchange; host_leader_ (the host's first rank) talks over TCP in leader_tree_, whose root is
  // rank 0; host_ranks_ are this host's ranks, by local index.
  bool hierarchical_ = false;
  int host_leader_ = -1;
  std::vector<int> host_ranks_;
  ControlTree leader_tree_;
  // The cycle running now was started by a waiter (RunCycleForWaiter), not by the loop.
  bool waiter_cycle_ = false;
  // Who takes part: the workers, the world in negotiation, every rank's host, and rank 0's
  // pending joins and leaves of elastic dedicated servers.
  ServerMembership membership_;
  // R2SP training mode: the sessions this worker trains in and the servers this process hosts.
  // After transport_: destroyed before it (its servers use the transport).
  std::unique_ptr<R2spSessions> r2sp_;
  std::mutex p2p_mu_;
  std::unique_ptr<P2pMatcher> p2p_;  // point-to-point matching, made at the first transfer (p2p_mu_)
  P2pMatcher& p2p();

  // Shared between adapters and the loop.
  mutable std::mutex queue_mu_;
  std::deque<std::pair<Request, int64_t>> incoming_;
  std::unordered_set<Key, CollectiveKeyHash> in_flight_;  // names queued or pending: duplicates are rejected
  decltype(in_flight_)::node_type spare_name_;  // see spare_pending_ (guarded by queue_mu_)
  // Requests in program order whose name was in flight (Request::in_program_order), oldest first:
  // the next one enters the queue when the one ahead of it finishes.
  std::map<Key, std::deque<std::pair<Request, int64_t>>> held_;
  // Per (op type, process set), for requests without a name: only the set's members call it.
  std::map<std::pair<int, int32_t>, uint64_t> auto_names_;
  std::atomic<bool> shutdown_requested_{false};
  std::atomic<Clock::rep> last_enqueue_ticks_{0};  // Clock ticks of the newest Enqueue

  // Counts wake-ups (guarded by wake_mu_): a thread that read it before looking for work, and
  // sees it changed, looks again. A count rather than a flag, as the loop and a waiter running a
  // cycle (AwaitControl) may both wait for wake-ups, and neither may consume the other's.
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  uint64_t wake_seq_ = 0;
  bool idle_waiting_ = false;  // the loop sleeps with nothing to do (guarded by wake_mu_)
  uint64_t WakeSeq();
  // Sleeps until a wake-up after `seen`, or `until`.
  void AwaitWake(uint64_t seen, Clock::time_point until);

  // Held by whoever runs the loop's part: the loop's thread, or a waiter running a cycle
  // (RunCycleForWaiter). Everything below "Owned by the loop" is guarded by it.
  std::mutex cycle_mu_;

  mutable std::mutex failure_mu_;
  Status failure_;
  std::atomic<bool> stopped_{false};

  // MissingRanks' questions, by handle (guarded by missing_mu_): `sent` once the loop took one
  // up, `done` once answered (`missing` then holds what rank 0 knew).
  struct MissingQuestion {
    bool sent = false;
    bool done = false;
    std::optional<std::vector<int>> missing;
  };
  std::mutex missing_mu_;
  std::condition_variable missing_cv_;
  std::map<int64_t, MissingQuestion> missing_questions_;
  std::atomic<bool> missing_question_new_{false};  // one not sent yet: read without the lock

  // Owned by the loop (cycle_mu_).
  // MissingRanks: the handles asking about each collective, and rank 0's questions to answer
  // (from whom, about what, and the last cycle run when it came).
  std::map<Key, std::vector<int64_t>> missing_asked_;
  struct MissingQuery {
    int origin;
    Key key;
    uint64_t came_after_cycle;
  };
  std::vector<MissingQuery> missing_queries_;
  // Hashed (looked up per tensor); what is built by walking it is put in (set, name) order.
  std::unordered_map<Key, Pending, CollectiveKeyHash> pending_;
  // Scratch of TakeNewRequests and FinishSucceeded, kept between cycles so that a cycle allocates
  // neither: a std::deque allocates its map and a block even empty, and a synchronous call of one
  // tensor made 30 allocations (a uprobe on malloc).
  std::deque<std::pair<Request, int64_t>> taken_;
  std::vector<int64_t> finished_handles_;
  // The same for RunCycleSteps' responses and Execute's fusion: a cycle of one cached allreduce
  // made 8 more allocations in these (a perf profile at np=1).
  std::vector<Response> ready_;
  std::vector<Response> spare_responses_;  // ready_'s earlier responses, at most kSpareResponses
  static constexpr size_t kSpareResponses = 64;
  std::vector<bool> fused_;
  std::vector<const Response*> fusion_;
  std::vector<Pending*> fusion_requests_;
  AllreduceBatch fusion_batch_;
  // An integer Average's batch as it runs: the int64 Sum of quotients and remainders
  // (kernels/integer_average.h) over this scratch.
  AllreduceBatch average_split_batch_;
  ScratchBuffer average_split_;
  // Nodes of pending_ and in_flight_ kept from the last request finished: a synchronous call
  // adds one to each and removes it, and would otherwise allocate and free both every time.
  decltype(pending_)::node_type spare_pending_;
  std::vector<ControlMessage> inbox_;
  uint64_t cycle_ = 0;
  Clock::time_point last_cycle_start_{};
  Clock::time_point looked_at_{};  // LookForCycle's reading of the clock, which starts the cycle it decides on
  bool queued_after_cycle_ = false;  // requests were queued when RunCycle ended (read under queue_mu_)
  // Requests arrived while the last cycle ran (since batch_since_): wait for the burst to pause.
  bool batching_ = false;
  bool took_requests_ = false;  // the current cycle took new requests from this rank's queue
  Clock::time_point batch_since_{};
  // A burst has paused when no request came for this long: far less than a negotiation round
  // trip, far more than the gap between two enqueues of a loop of asynchronous calls.
  static constexpr std::chrono::microseconds kBurstPause{50};
  // An idle rank invited to a peer's cycle: since when (and to which cycle), how long it waits
  // for its own threads' request before joining with nothing, and whether the cycle it is about
  // to run is such an empty-handed join.
  std::optional<Clock::time_point> invited_at_;
  uint64_t invited_to_ = 0;
  IdleJoinPatience idle_join_patience_{kBurstPause};
  bool empty_handed_ = false;
  bool joined_ = false;
  bool reannounce_ = false;       // a cached request lost its entry and must be announced again
  Clock::time_point last_activity_ = Clock::now();  // a request taken or completed here
  std::vector<AwaitedCollective> reported_awaited_;
  // config_ with the autotuner's settings in force: what cycles read (config_ is what the
  // environment said; threads outside cycles read that).
  Config cycle_config_;
  std::unique_ptr<Autotuner> autotuner_;  // rank 0, with HOROVOD_AUTOTUNE
  struct AutotuneState {
    bool enabled = false;    // still syncing settings
    bool in_flight = false;  // a settings broadcast is queued or running
    bool received = false;   // it completed in this cycle
    uint64_t applied_version = 0;
    std::array<double, 7> buffer{};       // version, active, then TunedSettings' fields
    std::vector<std::string> names;       // rank 0: what this cycle ran
    int64_t bytes = 0;
  } autotune_;
  std::map<int, std::unique_ptr<OperationManager>> ops_by_algorithm_;  // other than config_'s
  // what rank 0 last heard we are blocked on
  bool stop_after_cycle_ = false; // shutdown was agreed
  ScratchBuffer joined_zeros_, joined_sink_;

  std::thread loop_;
  std::mutex loop_done_mu_;
  std::condition_variable loop_done_cv_;
  bool loop_done_ = false;
};

}  // namespace herring
