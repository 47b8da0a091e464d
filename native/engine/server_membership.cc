#include "engine/server_membership.h"

#include <algorithm>

#include "common/logging.h"

namespace herring {

void ServerMembership::Reset(int workers, std::vector<int> world, std::vector<std::string> hostnames) {
  workers_ = workers;
  world_ = std::move(world);
  hostnames_ = std::move(hostnames);
}

std::vector<int> ServerMembership::ActiveServers() const {
  std::vector<int> servers;
  for (int r : world_) {
    if (r >= workers_) servers.push_back(r);
  }
  return servers;
}

std::string ServerMembership::RequestJoin(int our_rank, const std::string& our_fingerprint, int from,
                                          const JoinRequest& request) {
  // The same check as at init: the knobs that change what goes on the wire must agree.
  std::string differs = FingerprintDifference(our_fingerprint, our_rank, request.fingerprint, from);
  if (!differs.empty()) return differs;
  HLOG(Info) << "rank " << from << " on " << request.hostname << " asks to join as a dedicated server";
  pending_.push_back({MembershipChange::kJoin, from, request.hostname});
  return "";
}

void ServerMembership::RequestLeave(int from, const std::string& payload) {
  int target = -1;
  try {
    target = std::stoi(payload);
  } catch (...) {
  }
  int leaving = 0;
  for (const auto& c : pending_) leaving += c.kind == MembershipChange::kLeave ? 1 : 0;
  const auto servers = ActiveServers();
  if (std::find(servers.begin(), servers.end(), target) == servers.end()) {
    HLOG(Warning) << "ignoring a request (from rank " << from << ") that rank " << target
                  << " leave: it is not an active dedicated server";
  } else if (static_cast<int>(servers.size()) - leaving <= 1) {
    HLOG(Warning) << "ignoring a request that server " << target << " leave: it is the last one";
  } else {
    HLOG(Info) << "dedicated server " << target << " leaves (asked by rank " << from << ")";
    pending_.push_back({MembershipChange::kLeave, target, ""});
  }
}

const std::vector<MembershipChange>& ServerMembership::AnnouncePending() {
  now_.swap(pending_);
  pending_.clear();
  return now_;
}

std::vector<MembershipChange> ServerMembership::TakeAnnounced() {
  std::vector<MembershipChange> changes;
  changes.swap(now_);
  return changes;
}

bool ServerMembership::LeavingThisCycle(int rank) const {
  return std::any_of(now_.begin(), now_.end(),
                     [rank](const MembershipChange& c) { return c.kind == MembershipChange::kLeave && c.rank == rank; });
}

void ServerMembership::Apply(const MembershipChange& c) {
  if (c.kind == MembershipChange::kJoin) {
    world_.insert(std::upper_bound(world_.begin(), world_.end(), c.rank), c.rank);
    if (static_cast<int>(hostnames_.size()) <= c.rank) hostnames_.resize(c.rank + 1);
    hostnames_[c.rank] = c.hostname;
  } else {
    world_.erase(std::remove(world_.begin(), world_.end(), c.rank), world_.end());
  }
}

void ServerMembership::Publish(const std::string& store_addr, int store_port, int epoch, Deadline deadline) {
  if (!store_) store_ = std::make_unique<HttpStore>(store_addr, store_port, kRendezvousScope);
  WorldRecord world;
  world.workers = workers_;
  world.next_rank = static_cast<int>(hostnames_.size());
  world.active = world_;
  PublishRunningJob(*store_, epoch, world, deadline);
}

void ServerMembership::EncodeTo(WireWriter& w) const {
  w.I32(workers_);
  w.I32s(world_);
  w.U32(static_cast<uint32_t>(hostnames_.size()));
  for (const auto& h : hostnames_) w.Str(h);
}

void ServerMembership::RestoreFrom(WireReader& r) {
  workers_ = r.I32();
  auto world = r.I32s();
  world_.assign(world.begin(), world.end());
  hostnames_.clear();
  uint32_t n = r.Count(4);
  for (uint32_t i = 0; i < n; ++i) hostnames_.push_back(r.Str());
}

}  // namespace herring
