#include "rendezvous/host_rendezvous.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>

#include "common/crypto.h"
#include "common/status.h"
#include "transport/shm_arena.h"

namespace herring {

bool CanGroupByHost(const LaunchInfo& launch) {
  return launch.launcher == Launcher::kHorovodrun && !launch.hostname.empty() && launch.local_size >= 1 &&
         launch.local_rank >= 0 && launch.local_rank < launch.local_size && launch.cross_size >= 1 &&
         launch.cross_rank >= 0 && launch.cross_rank < launch.cross_size;
}

std::string PackRecords(const std::vector<std::pair<int, std::string>>& records) {
  std::string out;
  for (const auto& [rank, text] : records) out += std::to_string(rank) + " " + std::to_string(text.size()) + "\n" + text;
  return out;
}

std::vector<std::pair<int, std::string>> UnpackRecords(const std::string& text) {
  std::vector<std::pair<int, std::string>> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t space = text.find(' ', pos), newline = text.find('\n', pos);
    if (space == std::string::npos || newline == std::string::npos || space > newline) {
      throw Error(Status::Internal("unreadable host record in the rendezvous store"));
    }
    int rank;
    size_t bytes;
    try {
      rank = std::stoi(text.substr(pos, space - pos));
      bytes = static_cast<size_t>(std::stoull(text.substr(space + 1, newline - space - 1)));
    } catch (const std::logic_error&) {
      throw Error(Status::Internal("unreadable host record in the rendezvous store"));
    }
    if (newline + 1 + bytes > text.size()) throw Error(Status::Internal("truncated host record in the rendezvous store"));
    out.push_back({rank, text.substr(newline + 1, bytes)});
    pos = newline + 1 + bytes;
  }
  return out;
}

std::string HostArenaName(const HttpStore& store, const std::string& prefix, const LaunchInfo& launch) {
  const std::string identity = store.Where() + "|" + prefix + "|" + launch.hostname;
  const Digest digest = Sha256(identity.data(), identity.size());
  return "/herring.rendezvous." + ToHex(digest.data(), 12) + "." + std::to_string(getuid());
}

namespace {

// The counters of a host's rendezvous arena (one per member).
constexpr int kRecordWritten = 0;  // this member's record is in its notice
constexpr int kWorldWritten = 1;   // (the leader) the world is in the result area, or too large for it
// Room per rank for the world in the arena: a record is a few hundred bytes (host name, address,
// port, the knobs that must match, and rank 0's credentials). A larger world is read from the
// store instead, so this bounds only the arena's size, never what works.
constexpr size_t kWorldBytesPerRank = 1024;
constexpr uint64_t kTooLargeForTheArena = ~uint64_t{0};

// The host's ranks meet in one arena. A name left behind by a job killed during its rendezvous
// (the name is unlinked as soon as every member attached, so only then) is removed by the leader
// before it creates its own. A member that opened such a leftover first fails in it (its creator
// is dead, or it was never finished), waits until the name is the leader's new segment and opens
// that.
std::unique_ptr<ShmArena> AttachHostArena(const HttpStore& store, const std::string& prefix, const LaunchInfo& launch,
                                          Deadline deadline) {
  ShmArenaOptions o;
  o.name = HostArenaName(store, prefix, launch);
  o.local_index = launch.local_rank;
  o.local_size = launch.local_size;
  o.slot_bytes = static_cast<size_t>(launch.size) * kWorldBytesPerRank;
  o.deadline = deadline;
  o.spin = std::chrono::nanoseconds(0);  // hundreds of ranks share a few cores while they start
  if (launch.local_rank == 0) shm_unlink(o.name.c_str());
  const std::string path = "/dev/shm" + o.name;  // where glibc's shm_open keeps the name
  auto in_context = [&](const Error& e) {
    return Error(Status(e.status().code(), "rendezvous of host " + launch.hostname + ": " + e.what()));
  };
  for (;;) {
    struct stat before;
    const bool existed = launch.local_rank != 0 && stat(path.c_str(), &before) == 0;
    try {
      return ShmArena::Attach(o);
    } catch (const Error& e) {
      if (!existed || deadline.Expired()) throw in_context(e);
      // Possibly a leftover: try again once the name is another segment (or gone), at the deadline
      // report what this one said.
      struct stat now;
      while (stat(path.c_str(), &now) == 0 && now.st_ino == before.st_ino) {
        if (deadline.Expired()) throw in_context(e);
        std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(20), deadline.Remaining()));
      }
    }
  }
}

// [8-byte length][bytes] into `room` bytes at `at`; false (and the length says so) if it does not fit.
bool WriteSized(uint8_t* at, size_t room, const std::string& text) {
  const bool fits = sizeof(uint64_t) + text.size() <= room;
  const uint64_t length = fits ? text.size() : kTooLargeForTheArena;
  std::memcpy(at, &length, sizeof length);
  if (fits) std::memcpy(at + sizeof length, text.data(), text.size());
  return fits;
}

bool ReadSized(const uint8_t* at, size_t room, std::string* text) {
  uint64_t length;
  std::memcpy(&length, at, sizeof length);
  if (length == kTooLargeForTheArena) return false;
  if (sizeof length + length > room) throw Error(Status::Internal("corrupt record in the host's rendezvous arena"));
  text->assign(reinterpret_cast<const char*>(at + sizeof length), length);
  return true;
}

// Host 0's leader: the world, by rank, from the H host records.
std::string GatherWorld(HttpStore& store, const std::string& prefix, const LaunchInfo& launch, Deadline deadline) {
  std::vector<std::string> world(launch.size);
  std::vector<bool> seen(launch.size, false);
  for (int h = 0; h < launch.cross_size; ++h) {
    for (auto& [rank, text] : UnpackRecords(store.Get(prefix + ".h" + std::to_string(h), deadline))) {
      if (rank < 0 || rank >= launch.size || seen[rank]) {
        throw Error(Status::Internal("host " + std::to_string(h) + " reported rank " + std::to_string(rank) +
                                     " twice or outside a job of " + std::to_string(launch.size)));
      }
      seen[rank] = true;
      world[rank] = std::move(text);
    }
  }
  std::string missing;
  for (int r = 0; r < launch.size; ++r) {
    if (!seen[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!missing.empty()) {
    throw Error(Status::Internal("the " + std::to_string(launch.cross_size) + " hosts' records miss ranks " +
                                 missing + " (HOROVOD_LOCAL_SIZE / HOROVOD_CROSS_SIZE inconsistent?)"));
  }
  std::vector<std::pair<int, std::string>> all;
  for (int r = 0; r < launch.size; ++r) all.push_back({r, world[r]});
  return PackRecords(all);
}

// A host's leader: its host's records (from the arena) as one host record in the store, the world
// from the store (host 0's leader makes it), and the world into the arena for the host's ranks.
std::string LeaderRound(HttpStore& store, const std::string& prefix, const LaunchInfo& launch, const std::string& own,
                        ShmArena* arena, Deadline deadline) {
  std::string host_record = own;
  if (arena != nullptr) {
    arena->Publish(kRecordWritten, 1);  // its own is `own`: WaitAll then waits for the others
    ThrowIfError(arena->WaitAll(kRecordWritten, 1, deadline));
    for (int l = 1; l < launch.local_size; ++l) {
      std::string theirs;
      if (!ReadSized(arena->notice(l), ShmArena::kNoticeBytes, &theirs)) {
        throw Error(Status::InvalidArgument("rendezvous of host " + launch.hostname + ": local rank " +
                                            std::to_string(l) + "'s record is larger than " +
                                            std::to_string(ShmArena::kNoticeBytes) + " bytes"));
      }
      host_record += theirs;  // packed records concatenate
    }
  }
  store.Set(prefix + ".h" + std::to_string(launch.cross_rank), host_record, deadline);
  if (launch.cross_rank == 0) store.Set(prefix + ".all", GatherWorld(store, prefix, launch, deadline), deadline);
  // The hosts' leaders wait for this one record at once.
  std::string world = store.Get(prefix + ".all", deadline, launch.cross_size);
  if (arena != nullptr) {
    WriteSized(arena->result(), arena->slot_bytes(), world);
    arena->Publish(kWorldWritten, 1);
  }
  return world;
}

}  // namespace

std::vector<std::string> HostGroupedAllGather(HttpStore& store, const std::string& prefix, const LaunchInfo& launch,
                                              const std::string& mine, Deadline deadline) {
  const std::string own = PackRecords({{launch.rank, mine}});
  std::unique_ptr<ShmArena> arena;
  if (launch.local_size > 1) arena = AttachHostArena(store, prefix, launch, deadline);
  std::string world;
  if (arena != nullptr && launch.local_rank != 0) {
    if (!WriteSized(arena->notice(launch.local_rank), ShmArena::kNoticeBytes, own)) {
      // Still published: the leader names this rank instead of waiting for it until its deadline.
      arena->Publish(kRecordWritten, 1);
      throw Error(Status::InvalidArgument("rendezvous: rank " + std::to_string(launch.rank) + "'s record is larger than " +
                                          std::to_string(ShmArena::kNoticeBytes) + " bytes"));
    }
    arena->Publish(kRecordWritten, 1);
    ThrowIfError(arena->WaitFor(kWorldWritten, 0, 1, deadline));
    if (!ReadSized(arena->result(), arena->slot_bytes(), &world)) {
      world = store.Get(prefix + ".all", deadline, launch.size);  // too large for the arena
    }
  } else {
    try {
      world = LeaderRound(store, prefix, launch, own, arena.get(), deadline);
    } catch (const Error& e) {
      // The host's ranks wait for the world in the arena: they report this reason, not a leader
      // that left.
      if (arena != nullptr) arena->Poison(e.what());
      throw;
    }
  }
  auto all = UnpackRecords(world);
  if (static_cast<int>(all.size()) != launch.size) {
    throw Error(Status::Internal("the world record holds " + std::to_string(all.size()) + " records for " +
                                 std::to_string(launch.size) + " ranks"));
  }
  std::vector<std::string> out(launch.size);
  for (auto& [rank, text] : all) out.at(rank) = std::move(text);
  return out;
}

}  // namespace herring
