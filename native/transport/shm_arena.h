// ShmArena: one POSIX shared-memory segment shared by the processes of one process set on one
// host. It holds a staging slot per member, a shared result area, and per-member sequence
// counters that the collectives use to hand buffers to each other without a global barrier.
//
// Lifetime: member 0 creates the segment, the others open it; once all have mapped it the name is
// unlinked, so nothing is left in /dev/shm even if every process is killed afterwards.
// Waiting: spin briefly, then sleep on a futex in the segment; every wait has a deadline and polls
// check_abort, so a dead neighbour turns into an error, never a hang.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"

namespace herring {

// The default size of a member's notice area (ShmArena::notice).
constexpr size_t kDefaultNoticeBytes = 64 << 10;
// The default spin of a wait before it sleeps (ShmArenaOptions::spin).
constexpr std::chrono::microseconds kDefaultSpin{100};
// The spin of a data arena's waits where a host's members are more than twice its CPUs (the
// scale benchmark's 8 ranks per simulated host, 32 on 2 cores). There a waiter's looks, a yield
// each, take turns from the members doing the work, and most waits outlast any spin anyway
// (measured in docs/architecture.md, "a crowded host spins less"). At two members per CPU (np=4
// on 2 cores) kDefaultSpin stays: it measured faster there (ShmArenaOptions::spin).
constexpr std::chrono::microseconds kCrowdedSpin{5};

struct ShmArenaOptions {
  std::string name;       // "/herring.<job>.<set>.<host>": unique per job, process set and host
  int local_index = 0;    // this process's index among the members on this host
  int local_size = 1;
  size_t slot_bytes = 0;  // bytes of each member slot and of the result area
  size_t notice_bytes = kDefaultNoticeBytes;  // bytes of each member's notice area (rounded up to 4096)
  // Global rank of each local member, so that errors name the rank a user knows; empty: errors
  // name local indices only.
  std::vector<int> member_ranks;
  Deadline deadline = Deadline::Never();  // for Attach
  // Polled while waiting (at least every poll_interval); a non-OK status ends the wait with that
  // status.
  std::function<Status()> check_abort;
  // How long a wait spins before it sleeps on the futex (0: at once). Where every member has a
  // core it pauses between looks, with more members than cores it gives the core away at every
  // look (which still takes turns from the others where they are more than twice the cores: data
  // arenas then spin less, DataArenaSpin). A futex sleep and wake-up costs tens
  // of microseconds on a virtual machine: with 5 us of spin, a 4 MiB cross-memory allreduce at
  // np=2 slept in 10-50% of its iterations (a rank done with its units waiting for the other's)
  // and took 382-447 us against 367-389 us with 100 us; at np=4 on 2 cores, 256 KiB 205 against
  // 189 us and 1 MiB 678 against 626 us (3 interleaved launches each).
  std::chrono::nanoseconds spin = kDefaultSpin;
  // Longest futex sleep: check_abort and the liveness of the awaited member are polled this
  // often. Tests raise it so that a lost wake-up shows up as a failure instead of a 20 ms delay.
  std::chrono::nanoseconds poll_interval = std::chrono::milliseconds(20);
};

// The spin for the waits of a data arena of `local_size` members on a host whose ranks have `cpus`
// CPUs: kDefaultSpin, or kCrowdedSpin where the members are more than twice the CPUs.
std::chrono::nanoseconds DataArenaSpin(int local_size, int cpus);

class ShmArena {
 public:
  static constexpr int kMaxFlags = 8;
  static constexpr size_t kNoticeBytes = kDefaultNoticeBytes;

  // Creates (member 0) or opens the segment, waits until every member attached, unlinks the name.
  // Throws Error (Timeout naming the members that never attached, or the system error).
  static std::unique_ptr<ShmArena> Attach(const ShmArenaOptions& options);
  ~ShmArena();
  ShmArena(const ShmArena&) = delete;
  ShmArena& operator=(const ShmArena&) = delete;

  int local_index() const;
  int local_size() const;
  // ShmArenaOptions::member_ranks as attached (empty if none were given).
  const std::vector<int>& member_ranks() const;
  size_t slot_bytes() const;
  uint8_t* slot(int member);  // 64-byte aligned
  uint8_t* result();          // 64-byte aligned
  // notice_bytes() that `member` writes and the others read (4096-aligned); its meaning is the
  // collective's, and so is the flag that says it is ready.
  uint8_t* notice(int member);
  size_t notice_bytes() const;
  // The process id of `member` as this process names it (to read its memory by process_vm_readv),
  // or -1 when it lives in another pid namespace, where its id means another process.
  int MemberPid(int member) const;
  // Whether some member may use fewer CPUs than the arena has members (4 ranks on 2 cores, or a
  // rank bound to one core): the same answer on every member, as each stored its count when it
  // attached, so a choice of algorithm made on it is the same everywhere. A member's own count
  // would not be: ranks bound to different CPU sets would take different paths.
  bool SomeMemberWithoutACore() const;

  // Hands out work units to whichever member asks first: returns the next unit below `limit`, or
  // `limit` once every unit was handed out. The counter only grows, across collectives: the
  // members agree on where each round of units begins (the previous round's limit) and start it
  // only after everyone finished the previous one, so a late member cannot claim the next round's.
  uint64_t Claim(uint64_t limit);

  // Per-member monotonically increasing counters, kMaxFlags of them per member; their meaning is
  // the collective's. Publish stores `value` into this member's counter `flag` (release order)
  // and wakes waiters.
  void Publish(int flag, uint64_t value);
  uint64_t Load(int flag, int member) const;  // acquire order
  // Waits until member's counter `flag` >= value. Returns Timeout (naming the member), the
  // check_abort status, Aborted if the arena was poisoned, or PeerLost if the awaited member
  // destroyed its arena or its process died (checked when they share a pid namespace).
  Status WaitFor(int flag, int member, uint64_t value, Deadline deadline);
  // Waits until every member's counter `flag` >= value.
  Status WaitAll(int flag, uint64_t value, Deadline deadline);

  // A doorbell per member, for a member whose wait has several causes (the engine's idle loop:
  // a request from its own threads, or a peer starting a cycle), where one counter will not do.
  // Read Doorbell() before looking at the causes, then WaitDoorbell(that value): any Ring since
  // the read returns at once, so no wake-up is lost. The wait may return early (a signal).
  uint32_t Doorbell() const;
  void Ring(int member);
  void WaitDoorbell(uint32_t seen, std::chrono::nanoseconds timeout);

  // Marks the arena failed and wakes everyone: all present and future waits in every attached
  // process return Aborted promptly.
  void Poison();
  // Same, and the peers' Aborted message carries `reason` (the first poisoner's reason wins), so
  // every local process reports the real cause rather than "poisoned by a peer".
  void Poison(const std::string& reason);
  bool Poisoned() const;
  // Whether `member` left the arena or its process died, as the waits check it (its pid probed
  // where the two share a pid namespace). Never true for this member.
  bool MemberGone(int member) const;

 private:
  struct Impl;
  explicit ShmArena(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace herring
