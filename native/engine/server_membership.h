// ServerMembership: who takes part in the job now. The world (the ranks in negotiation), every
// rank's host, the number of workers, and on rank 0 the join and leave requests of elastic
// dedicated servers waiting to be announced with a cycle's result (membership.cc describes the
// protocol).
//
// A collaborator of its own because these are membership's rules (who may leave, whose knobs
// let it join, what joiners read from horovodrun's store), not the loop's. The engine applies the
// consequences of a change to its own state (process sets' server layouts, topology, counters,
// the join snapshot of its negotiation state); this class keeps the roster.
//
// Used by the engine's loop thread, and during init before the loop starts. (Engine::Fail also
// reads world() from whichever thread fails the job, unsynchronised, as it did before this class
// existed.)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "rendezvous/http_store.h"
#include "rendezvous/rendezvous_protocol.h"
#include "runtime/control_messages.h"
#include "runtime/wire.h"

namespace herring {

class ServerMembership {
 public:
  // The roster as of now: `workers` workers, `world` taking part (sorted), hosts by rank.
  void Reset(int workers, std::vector<int> world, std::vector<std::string> hostnames);
  void set_hostnames(std::vector<std::string> hostnames) { hostnames_ = std::move(hostnames); }

  int workers() const { return workers_; }
  const std::vector<int>& world() const { return world_; }
  const std::vector<std::string>& hostnames() const { return hostnames_; }
  // The dedicated servers taking part now (ranks from workers() on).
  std::vector<int> ActiveServers() const;

  // Rank 0 (`our_rank`, with knobs `our_fingerprint`): server `from` asks to join. Returns why it
  // is refused (the knobs that must match differ), or "" when queued for the next announcement.
  std::string RequestJoin(int our_rank, const std::string& our_fingerprint, int from, const JoinRequest& request);
  // Rank 0: rank `from` asks that the server named in `payload` leave. Ignored (with a warning)
  // unless it is an active dedicated server and not the last one.
  void RequestLeave(int from, const std::string& payload);
  bool HasPending() const { return !pending_.empty(); }
  // Rank 0: the changes to announce with this cycle's result; from now on they are this cycle's.
  const std::vector<MembershipChange>& AnnouncePending();
  // Other ranks: where the changes rank 0 announced with this cycle's result go.
  std::vector<MembershipChange>* announced() { return &now_; }
  // After the cycle's collectives: its changes, to apply (and forget).
  std::vector<MembershipChange> TakeAnnounced();
  // Whether this cycle's announced changes retire `rank`: it leaves once it has executed the
  // cycle, possibly before this rank has, and its goodbye then is expected, not a failure.
  bool LeavingThisCycle(int rank) const;
  // The roster's side of a change: the world and, for a join, the new rank's host.
  void Apply(const MembershipChange& change);

  // Rank 0 of a horovodrun job: the world as joiners read it (rendezvous/rendezvous_protocol.h).
  void Publish(const std::string& store_addr, int store_port, int epoch, Deadline deadline);

  // The roster's part of the join snapshot.
  void EncodeTo(WireWriter& w) const;
  void RestoreFrom(WireReader& r);

 private:
  int workers_ = 0;
  std::vector<int> world_;                 // ranks taking part in negotiation, sorted
  std::vector<std::string> hostnames_;     // by rank, every rank that ever took part
  std::vector<MembershipChange> pending_;  // rank 0: to announce with the next result
  std::vector<MembershipChange> now_;      // announced this cycle: applied after it
  std::unique_ptr<HttpStore> store_;       // rank 0 of an elastic job: publishes the world
};

}  // namespace herring
