// ShmArena implementation. Segment layout (every region 4096-aligned except the 128-byte lines):
//
//   [0, 4096)            Header: magic (published last), version, geometry, attach count and its
//                        futex, poison flag, reason and poisoner.
//   members region       local_size MemberLines: attach state, pid, pid namespace.
//   counters region      kMaxFlags x local_size CounterLines: the 64-bit counter, its futex word
//                        and the number of processes sleeping on it.
//   slots, result        local_size slots then the result area, each slot_bytes rounded up to 4096.
//   notices              local_size notice areas of notice_bytes: what a member tells the others
//                        about a collective besides its data (the zero-copy path's descriptors).
//
// Each counter has its own futex word next to it, so a publish wakes only the processes waiting
// for that very counter (WaitAll sleeps on the first member that lags), and a publisher touches a
// single cache line. Lines are 128 bytes because the adjacent-line prefetcher pairs 64-byte lines.
//
// Wake-up protocol (no lost wake-ups, no syscall when nobody sleeps):
//   waiter:    sleepers += 1; g = generation; re-check counter; futex_wait(generation, g)
//   publisher: counter = v; if (sleepers != 0) { generation += 1; futex_wake(all) }
// The counter store, the sleepers increment and both re-reads are seq_cst (a Dekker handshake):
// the waiter cannot miss the new value while the publisher misses the sleeper. If the waiter read
// the new generation, the release increment makes the new value visible to its re-check. (seq_cst
// loads are plain loads on x86 and ldar on ARM, so the spin loop pays nothing for them.) The
// same handshake covers poisoning and a member leaving. The futex word is a generation number
// compared only for equality, so its 32-bit wrap-around is harmless; conditions are always
// evaluated on the 64-bit counters.
#include "transport/shm_arena.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <thread>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <new>
#include <sstream>
#include <utility>

#include "common/cpus.h"
#include "common/logging.h"
#include "common/pid_namespace.h"

namespace herring {
namespace {

constexpr uint64_t kMagic = 0x31764153474e5248ull;  // "HRNGSAv1"
constexpr uint32_t kLayoutVersion = 5;  // 3: a doorbell per member; 4: notice_bytes; 5: cpus per member
constexpr size_t kPage = 4096;
constexpr size_t kLineBytes = 128;
constexpr int kMaxLocalSize = 1024;
constexpr size_t kReasonBytes = 1024;

constexpr uint32_t kNotAttached = 0;
constexpr uint32_t kAttached = 1;
constexpr uint32_t kDetached = 2;

static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex words must be plain integers");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "counters must be lock free");
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word layout");

// A futex word and the number of processes (possibly) sleeping on it.
struct Waitable {
  std::atomic<uint32_t> generation;
  std::atomic<uint32_t> sleepers;
};

struct alignas(kLineBytes) CounterLine {
  std::atomic<uint64_t> value;
  Waitable waitable;
};

struct alignas(kLineBytes) MemberLine {
  std::atomic<uint32_t> state;  // kNotAttached, kAttached, kDetached
  std::atomic<int32_t> pid;
  std::atomic<uint64_t> pid_namespace;  // 0 when unknown: liveness is then not checked
  std::atomic<int32_t> cpus;            // CpusAvailable() of the member when it attached
  Waitable doorbell;                    // rung by anyone, waited on by this member (Ring)
};

struct Header {
  std::atomic<uint64_t> magic;
  uint32_t version;
  uint32_t local_size;
  uint64_t slot_bytes;
  uint64_t notice_bytes;
  uint64_t total_bytes;
  alignas(kLineBytes) std::atomic<uint32_t> attached_count;
  Waitable attach_waitable;
  alignas(kLineBytes) std::atomic<uint64_t> units_claimed;  // work units handed out by Claim, ever
  alignas(kLineBytes) std::atomic<uint32_t> poisoned;
  std::atomic<uint32_t> poison_claimed;
  std::atomic<uint32_t> poison_reason_ready;
  std::atomic<int32_t> poisoned_by;
  char poison_reason[kReasonBytes];
};
static_assert(sizeof(Header) <= kPage, "header must fit its page");

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Offsets of the regions; identical in every process because it depends only on the geometry.
struct Layout {
  size_t members_offset = 0;
  size_t counters_offset = 0;
  size_t slots_offset = 0;
  size_t slot_stride = 0;
  size_t result_offset = 0;
  size_t notices_offset = 0;
  size_t notice_stride = 0;
  size_t total_bytes = 0;

  // False when the segment would not fit in a size_t.
  bool Compute(int local_size, size_t slot_bytes, size_t notice_bytes) {
    const size_t n = static_cast<size_t>(local_size);
    if (slot_bytes > SIZE_MAX / 2 - kPage || notice_bytes > SIZE_MAX / 2 - kPage) return false;
    members_offset = kPage;
    counters_offset = members_offset + n * kLineBytes;
    size_t counters_end = counters_offset + n * ShmArena::kMaxFlags * kLineBytes;
    slots_offset = RoundUp(counters_end, kPage);
    // A zero-byte slot still gets a page so that slot(i) pointers stay distinct.
    slot_stride = std::max(kPage, RoundUp(slot_bytes, kPage));
    if (slot_stride > (SIZE_MAX - slots_offset) / (n + 1)) return false;
    result_offset = slots_offset + n * slot_stride;
    notices_offset = result_offset + slot_stride;
    notice_stride = std::max(kPage, RoundUp(notice_bytes, kPage));
    if (notice_stride > (SIZE_MAX - notices_offset) / std::max<size_t>(n, 1)) return false;
    total_bytes = notices_offset + n * notice_stride;
    return true;
  }
};

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

uint32_t* FutexAddress(std::atomic<uint32_t>* word) { return reinterpret_cast<uint32_t*>(word); }

// Shared (not PRIVATE) futex: the waiters live in other processes.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  timeout = std::max(timeout, std::chrono::nanoseconds(1000));
  timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  // EAGAIN (value changed), EINTR and ETIMEDOUT all mean "re-check": the caller loops.
  syscall(SYS_futex, FutexAddress(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, FutexAddress(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void WakeAll(Waitable& waitable) {
  waitable.generation.fetch_add(1, std::memory_order_acq_rel);
  FutexWakeAll(&waitable.generation);
}

// Wakes the sleepers of `waitable` after the caller stored (seq_cst) the state they wait for.
void WakeIfSleeping(Waitable& waitable) {
  if (waitable.sleepers.load(std::memory_order_seq_cst) != 0) WakeAll(waitable);
}

std::string SystemError(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

// Closes a descriptor on every exit path.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

int64_t Millis(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

Status ValidateOptions(const ShmArenaOptions& o) {
  if (o.name.size() < 2 || o.name[0] != '/' || o.name.find('/', 1) != std::string::npos ||
      o.name.size() > NAME_MAX) {
    return Status::InvalidArgument("shared-memory arena name '" + o.name +
                                   "' must be '/' followed by at most " +
                                   std::to_string(NAME_MAX - 1) + " characters without '/'");
  }
  if (o.local_size < 1 || o.local_size > kMaxLocalSize) {
    return Status::InvalidArgument("shared-memory arena " + o.name + ": local_size " +
                                   std::to_string(o.local_size) + " is not in [1, " +
                                   std::to_string(kMaxLocalSize) + "]");
  }
  if (o.local_index < 0 || o.local_index >= o.local_size) {
    return Status::InvalidArgument("shared-memory arena " + o.name + ": local_index " +
                                   std::to_string(o.local_index) + " is not in [0, " +
                                   std::to_string(o.local_size) + ")");
  }
  if (!o.member_ranks.empty() && static_cast<int>(o.member_ranks.size()) != o.local_size) {
    return Status::InvalidArgument("shared-memory arena " + o.name + ": " +
                                   std::to_string(o.member_ranks.size()) + " member ranks for local_size " +
                                   std::to_string(o.local_size));
  }
  Layout layout;
  if (!layout.Compute(o.local_size, o.slot_bytes, o.notice_bytes)) {
    return Status::InvalidArgument("shared-memory arena " + o.name + ": slot_bytes " +
                                   std::to_string(o.slot_bytes) + " or notice_bytes " +
                                   std::to_string(o.notice_bytes) + " is too large");
  }
  return Status::OK();
}

// Where a wait would sleep: the futex of the first unmet condition, and the member whose
// publication it waits for (-1: none), watched for departure and death.
struct Blocker {
  Waitable* waitable = nullptr;
  int member = -1;
};

}  // namespace

struct ShmArena::Impl {
  explicit Impl(const ShmArenaOptions& o)
      : name(o.name),
        local_index(o.local_index),
        local_size(o.local_size),
        slot_bytes(o.slot_bytes),
        notice_bytes(o.notice_bytes),
        member_ranks(o.member_ranks),
        check_abort(o.check_abort),
        spin(std::max(o.spin, std::chrono::nanoseconds(0))),
        yield_each_look(o.local_size > CpusAvailable()),
        poll_interval(std::clamp<std::chrono::nanoseconds>(
            o.poll_interval, std::chrono::microseconds(100), std::chrono::hours(1))),
        pid_namespace(OwnPidNamespace()) {
    layout.Compute(local_size, slot_bytes, notice_bytes);
  }

  ~Impl() {
    if (base != nullptr) {
      if (joined) Leave();
      munmap(base, mapped_bytes);
    }
    // Only reached with the name still linked when Attach failed: leave nothing in /dev/shm.
    if (owns_name) shm_unlink(name.c_str());
  }

  Header* header() const { return reinterpret_cast<Header*>(base); }
  MemberLine& member_line(int m) const {
    return reinterpret_cast<MemberLine*>(base + layout.members_offset)[m];
  }
  CounterLine& counter(int flag, int m) const {
    return reinterpret_cast<CounterLine*>(base + layout.counters_offset)[flag * local_size + m];
  }
  std::string Describe() const { return "shared-memory arena " + name; }
  // Member `m`'s part of a per-member region (its slot, its notice); `what` names the region in
  // the error for an `m` out of range.
  uint8_t* MemberRegion(const char* what, int m, size_t offset, size_t stride) const {
    if (m < 0 || m >= local_size) {
      throw Error(Status::InvalidArgument(Describe() + ": " + what + " " + std::to_string(m) + " out of range [0, " +
                                          std::to_string(local_size) + ")"));
    }
    return base + offset + static_cast<size_t>(m) * stride;
  }
  // "rank 5 (local member 1)": the rank is what a user can find in their logs.
  std::string Member(int m) const {
    const std::string local = "local member " + std::to_string(m);
    if (m < 0 || m >= static_cast<int>(member_ranks.size())) return local;
    return "rank " + std::to_string(member_ranks[m]) + " (" + local + ")";
  }

  // ---- Attach -----------------------------------------------------------------------------

  void Map(int fd, size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      throw Error(Status::Internal(SystemError(Describe() + ": mmap of " + std::to_string(bytes) +
                                               " bytes failed", err)));
    }
    base = static_cast<uint8_t*>(p);
    mapped_bytes = bytes;
  }

  void Unmap() {
    munmap(base, mapped_bytes);
    base = nullptr;
    mapped_bytes = 0;
  }

  // Reserves the pages now: tmpfs is sparse, and running out of /dev/shm later would be a SIGBUS
  // in the middle of a collective instead of an error here.
  void Reserve(int fd) {
    if (fallocate(fd, 0, 0, static_cast<off_t>(layout.total_bytes)) == 0) return;
    int err = errno;
    if (err == EOPNOTSUPP || err == ENOSYS) return;  // not tmpfs: keep the sparse file
    std::ostringstream m;
    m << Describe() << ": cannot reserve " << (layout.total_bytes >> 20) << " MiB of shared memory";
    struct statvfs vfs;
    if (err == ENOSPC && fstatvfs(fd, &vfs) == 0) {
      m << " (" << (static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize >> 20)
        << " MiB free in /dev/shm; enlarge it, e.g. docker --shm-size)";
    }
    throw Error(Status::Internal(SystemError(m.str(), err)));
  }

  void CreateSegment() {
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      int err = errno;
      if (err == EEXIST) {
        throw Error(Status::Internal(
            Describe() + " already exists: the name is meant to be unique per job, so another "
            "job uses the same name or a crashed job left it behind (remove /dev/shm" + name +
            " if no job is running)"));
      }
      throw Error(Status::Internal(SystemError(Describe() + ": shm_open(O_CREAT) failed", err)));
    }
    owns_name = true;
    FdCloser closer(fd);
    if (ftruncate(fd, static_cast<off_t>(layout.total_bytes)) != 0) {
      int err = errno;
      throw Error(Status::Internal(SystemError(
          Describe() + ": ftruncate to " + std::to_string(layout.total_bytes) + " failed", err)));
    }
    Reserve(fd);
    Map(fd, layout.total_bytes);
    // The file is zero-filled; constructing the objects only starts their lifetime.
    Header* h = new (base) Header();
    for (int m = 0; m < local_size; ++m) new (&member_line(m)) MemberLine();
    for (int f = 0; f < kMaxFlags; ++f) {
      for (int m = 0; m < local_size; ++m) new (&counter(f, m)) CounterLine();
    }
    h->version = kLayoutVersion;
    h->local_size = static_cast<uint32_t>(local_size);
    h->slot_bytes = slot_bytes;
    h->notice_bytes = notice_bytes;
    h->total_bytes = layout.total_bytes;
    h->magic.store(kMagic, std::memory_order_release);  // last: the others may now read the rest
  }

  // Sleeps before the next existence/initialisation probe; false when the deadline passed.
  // Polling is unavoidable here (nothing to wait on before the segment exists) but short and
  // backed off.
  bool Backoff(const Deadline& deadline, std::chrono::microseconds* delay) {
    if (deadline.Expired()) return false;
    if (check_abort) ThrowIfError(check_abort());
    auto sleep = std::min<std::chrono::nanoseconds>(*delay, deadline.Remaining());
    timespec ts{static_cast<time_t>(sleep.count() / 1000000000),
                static_cast<long>(sleep.count() % 1000000000)};
    nanosleep(&ts, nullptr);
    *delay = std::min(*delay * 2, std::chrono::microseconds(5000));
    return true;
  }

  void OpenSegment(const Deadline& deadline) {
    std::chrono::microseconds delay(50);
    int fd = -1;
    while ((fd = shm_open(name.c_str(), O_RDWR, 0)) < 0) {
      int err = errno;
      if (err != ENOENT) {
        throw Error(Status::Internal(SystemError(Describe() + ": shm_open failed", err)));
      }
      if (!Backoff(deadline, &delay)) {
        throw Error(Status::Timeout(Describe() + ": " + Member(local_index) +
                                    " timed out waiting for " + Member(0) + " to create it"));
      }
    }
    FdCloser closer(fd);
    try {
      AwaitInitialised(fd, deadline, &delay);
      CheckGeometry();
      Unmap();
      Map(fd, layout.total_bytes);
    } catch (...) {
      if (base != nullptr) Unmap();
      throw;
    }
  }

  // Maps the header page once member 0 sized the file, then waits for its magic.
  void AwaitInitialised(int fd, const Deadline& deadline, std::chrono::microseconds* delay) {
    for (;;) {
      if (base == nullptr) {
        struct stat st;
        if (fstat(fd, &st) != 0) {
          throw Error(Status::Internal(SystemError(Describe() + ": fstat failed", errno)));
        }
        if (static_cast<size_t>(st.st_size) >= kPage) Map(fd, kPage);
      }
      if (base != nullptr) {
        uint64_t magic = header()->magic.load(std::memory_order_acquire);
        if (magic == kMagic) return;
        if (magic != 0) {
          throw Error(Status::Internal(Describe() + " exists but is not a herring arena"));
        }
      }
      if (!Backoff(deadline, delay)) {
        throw Error(Status::Timeout(Describe() + ": " + Member(local_index) +
                                    " found the segment but " + Member(0) + " never initialised it"));
      }
    }
  }

  void CheckGeometry() {
    const Header& h = *header();
    if (h.version != kLayoutVersion) {
      throw Error(Status::Mismatch(Describe() + ": layout version " + std::to_string(h.version) +
                                   " created by local member 0, but local member " +
                                   std::to_string(local_index) + " uses version " +
                                   std::to_string(kLayoutVersion) + " (mixed installations?)"));
    }
    if (h.local_size != static_cast<uint32_t>(local_size) || h.slot_bytes != slot_bytes ||
        h.notice_bytes != notice_bytes || h.total_bytes != layout.total_bytes) {
      std::ostringstream m;
      m << Describe() << ": local member 0 created it with local_size=" << h.local_size
        << ", slot_bytes=" << h.slot_bytes << ", notice_bytes=" << h.notice_bytes << " but local member "
        << local_index << " expects local_size=" << local_size << ", slot_bytes=" << slot_bytes
        << ", notice_bytes=" << notice_bytes;
      Status s = Status::Mismatch(m.str());
      // The creator and the other members would otherwise wait for this member until their
      // deadline; the header is valid, so poisoning is safe and gives them the reason.
      Poison(local_index, s.message());
      throw Error(s);
    }
  }

  void Join(const Deadline& deadline) {
    MemberLine& me = member_line(local_index);
    me.pid.store(static_cast<int32_t>(getpid()), std::memory_order_relaxed);
    me.pid_namespace.store(pid_namespace, std::memory_order_relaxed);
    me.cpus.store(CpusAvailable(), std::memory_order_relaxed);
    if (me.state.exchange(kAttached, std::memory_order_acq_rel) != kNotAttached) {
      throw Error(Status::InvalidArgument(Describe() + ": local member " +
                                          std::to_string(local_index) +
                                          " attached twice (duplicate local_index?)"));
    }
    joined = true;
    Header& h = *header();
    uint32_t count = h.attached_count.fetch_add(1, std::memory_order_seq_cst) + 1;
    WakeAll(h.attach_waitable);
    if (count > static_cast<uint32_t>(local_size)) {
      throw Error(Status::Internal(Describe() + ": more than local_size=" +
                                   std::to_string(local_size) + " processes attached"));
    }
    auto find = [&]() -> Blocker {
      if (h.attached_count.load(std::memory_order_seq_cst) >= static_cast<uint32_t>(local_size)) {
        return {};
      }
      return {&h.attach_waitable, local_index == 0 ? -1 : 0};
    };
    auto on_timeout = [&](Clock::duration waited) {
      std::ostringstream m;
      m << Describe() << ": only " << h.attached_count.load() << " of " << local_size
        << " local members attached within " << Millis(waited) << " ms (missing:";
      const char* sep = " ";
      for (int i = 0; i < local_size; ++i) {
        if (member_line(i).state.load(std::memory_order_acquire) != kNotAttached) continue;
        m << sep << Member(i);
        sep = ", ";
      }
      m << ")";
      return Status::Timeout(m.str());
    };
    ThrowIfError(Await(find, deadline, on_timeout));
    // Every member stored its count before it counted itself attached.
    for (int i = 0; i < local_size; ++i) {
      if (member_line(i).cpus.load(std::memory_order_relaxed) < local_size) some_member_without_a_core = true;
    }
  }

  // Tells the waiters of this member's counters that nothing more will come from it.
  void Leave() {
    member_line(local_index).state.store(kDetached, std::memory_order_seq_cst);
    for (int f = 0; f < kMaxFlags; ++f) WakeIfSleeping(counter(f, local_index).waitable);
  }

  // ---- Poison -----------------------------------------------------------------------------

  bool Poisoned() const { return header()->poisoned.load(std::memory_order_seq_cst) != 0; }

  void Poison(int by, const std::string& reason) {
    Header& h = *header();
    uint32_t unclaimed = 0;
    if (h.poison_claimed.compare_exchange_strong(unclaimed, 1, std::memory_order_acq_rel)) {
      h.poisoned_by.store(by, std::memory_order_relaxed);
      size_t n = std::min(reason.size(), kReasonBytes - 1);
      std::memcpy(h.poison_reason, reason.data(), n);
      h.poison_reason[n] = '\0';
      h.poison_reason_ready.store(1, std::memory_order_release);
    }
    h.poisoned.store(1, std::memory_order_seq_cst);
    WakeIfSleeping(h.attach_waitable);
    // Before the geometry was checked only the header page is mapped, and nobody can be waiting
    // on a counter anyway (Attach has not returned anywhere).
    if (mapped_bytes < layout.total_bytes) return;
    for (int f = 0; f < kMaxFlags; ++f) {
      for (int m = 0; m < local_size; ++m) WakeIfSleeping(counter(f, m).waitable);
    }
  }

  Status PoisonStatus() const {
    const Header& h = *header();
    std::string m = Describe() + " poisoned by a local peer";
    if (h.poison_reason_ready.load(std::memory_order_acquire) != 0) {
      // Copied with a bound: the writer may have been another (now dead) process.
      char reason[kReasonBytes];
      std::memcpy(reason, h.poison_reason, kReasonBytes);
      reason[kReasonBytes - 1] = '\0';
      m += " (" + Member(h.poisoned_by.load(std::memory_order_relaxed)) + ")";
      if (reason[0] != '\0') m += std::string(": ") + reason;
    }
    return Status::Aborted(m);
  }

  // ---- Waiting ----------------------------------------------------------------------------

  // Non-OK when `m` will never publish again: it destroyed its arena or its process is gone.
  Status CheckMemberGone(int m, bool probe_process) const {
    if (m < 0 || m == local_index) return Status::OK();
    const MemberLine& line = member_line(m);
    if (line.state.load(std::memory_order_seq_cst) == kDetached) {
      return Status::PeerLost(Member(m) + " left " + Describe() + " while this process (" +
                              Member(local_index) + ") waited for it");
    }
    if (!probe_process || line.state.load(std::memory_order_acquire) != kAttached) {
      return Status::OK();
    }
    uint64_t ns = line.pid_namespace.load(std::memory_order_relaxed);
    pid_t pid = line.pid.load(std::memory_order_relaxed);
    if (ns == 0 || ns != pid_namespace || pid <= 0) return Status::OK();
    if (kill(pid, 0) != 0 && errno == ESRCH) {
      return Status::PeerLost(Member(m) + ", pid " + std::to_string(pid) + ", of " + Describe() +
                              " died while this process (" + Member(local_index) +
                              ") waited for it");
    }
    return Status::OK();
  }

  // Whether the member `blocker` names will never publish again (CheckMemberGone). A member that
  // published what we wait for and then left is no failure: it may have done both between our
  // find() and this check (a waiter failed so, 1 launch in a few hundred, at the end of a test's
  // last round). So a gone member is looked at again; once gone its counters never change, and a
  // seq_cst read of its state saw the leave, which came after its last publish: this look is final.
  // Updates *blocker to what blocks now (nothing, or another member the caller then checks).
  template <typename Find>
  Status BlockerGone(Find& find, Blocker* blocker, bool probe_process) const {
    Status gone = CheckMemberGone(blocker->member, probe_process);
    if (gone.ok()) return gone;
    const Blocker again = find();
    if (again.waitable != nullptr && again.member == blocker->member) return gone;
    *blocker = again;
    return Status::OK();
  }

  // Waits until find() reports nothing left to wait for: spins `spin`, then sleeps on the
  // blocker's futex, polling check_abort and the blocker's liveness every poll_interval.
  template <typename Find, typename OnTimeout>
  Status Await(Find&& find, const Deadline& deadline, OnTimeout&& on_timeout) {
    if (Poisoned()) return PoisonStatus();
    Blocker blocker = find();
    if (blocker.waitable == nullptr) return Status::OK();
    const Clock::time_point start = Clock::now();
    if (spin.count() > 0) {
      const Clock::time_point spin_end = start + spin;
      for (unsigned i = 1;; ++i) {
        if (yield_each_look) {
          std::this_thread::yield();
        } else {
          CpuRelax();
        }
        blocker = find();
        if (blocker.waitable == nullptr) return Status::OK();
        // A yield costs a system call, far more than reading the clock.
        if (yield_each_look || i % 8 == 0) {
          if (Poisoned()) return PoisonStatus();
          if (Clock::now() >= spin_end) break;
          // Give the core to a runnable thread now and then: another process's thread may need
          // it (the member we wait for, if the scheduler put it here).
          if (!yield_each_look && i % 64 == 0) std::this_thread::yield();
        }
      }
    }
    Clock::time_point next_poll = start;
    for (;;) {
      if (Poisoned()) return PoisonStatus();
      Status gone = BlockerGone(find, &blocker, /*probe_process=*/false);
      if (!gone.ok()) return gone;
      if (blocker.waitable == nullptr) return Status::OK();
      const Clock::time_point now = Clock::now();
      if (deadline.Expired()) return on_timeout(now - start);
      if (now >= next_poll) {
        if (check_abort) {
          Status s = check_abort();
          if (!s.ok()) return s;
        }
        Status dead = BlockerGone(find, &blocker, /*probe_process=*/true);
        if (!dead.ok()) return dead;
        if (blocker.waitable == nullptr) return Status::OK();
        next_poll = now + poll_interval;
      }
      Waitable& w = *blocker.waitable;
      w.sleepers.fetch_add(1, std::memory_order_seq_cst);
      const uint32_t generation = w.generation.load(std::memory_order_acquire);
      Blocker now_blocking = find();
      bool stop = Poisoned() || CheckMemberGone(blocker.member, false).code() != StatusCode::kOk;
      if (!stop && now_blocking.waitable == blocker.waitable) {
        auto timeout = std::min<std::chrono::nanoseconds>(next_poll - now, deadline.Remaining());
        FutexWait(&w.generation, generation, timeout);
      }
      w.sleepers.fetch_sub(1, std::memory_order_relaxed);
      blocker = find();
      if (blocker.waitable == nullptr) return Poisoned() ? PoisonStatus() : Status::OK();
    }
  }

  Status AwaitCounters(int flag, int first, int end, uint64_t value, const Deadline& deadline) {
    int next = first;  // members before `next` already reached `value`; counters never go back
    auto find = [&]() -> Blocker {
      for (; next < end; ++next) {
        CounterLine& line = counter(flag, next);
        if (line.value.load(std::memory_order_seq_cst) < value) return {&line.waitable, next};
      }
      return {};
    };
    auto on_timeout = [&](Clock::duration waited) {
      std::ostringstream m;
      m << Describe() << ": " << Member(local_index) << " timed out after "
        << Millis(waited) << " ms waiting for flag " << flag << " to reach " << value << " on";
      const char* sep = " ";
      for (int i = first; i < end; ++i) {
        uint64_t v = counter(flag, i).value.load(std::memory_order_acquire);
        if (v >= value) continue;
        m << sep << Member(i) << " (at " << v << ")";
        sep = ", ";
      }
      return Status::Timeout(m.str());
    };
    return Await(find, deadline, on_timeout);
  }

  std::string name;
  int local_index;
  int local_size;
  size_t slot_bytes;
  size_t notice_bytes;
  std::vector<int> member_ranks;
  std::function<Status()> check_abort;
  std::chrono::nanoseconds spin;
  // More members than CPUs (4 ranks on 2 cores): the member a wait is for usually needs this
  // very core, so the spin gives the core away at every look instead of pausing between looks,
  // as Open MPI's pollers do when oversubscribed (mpi_yield_when_idle). Measured at np=4 on 2
  // cores, herring allreduce medians over 2 launches each, pausing against yielding: 16 KiB
  // 29.6-32.2 against 25.4-25.8 us, 64 KiB 54.2-54.6 against 44.0-44.3 us, 4 MiB 1017-1046
  // against 694-699 us (4 KiB 23.9-27.2 against 20.5-27.0 us).
  bool yield_each_look;
  std::chrono::nanoseconds poll_interval;
  uint64_t pid_namespace;
  Layout layout;
  uint8_t* base = nullptr;
  size_t mapped_bytes = 0;
  bool owns_name = false;  // created the name and has not unlinked it yet
  bool joined = false;
  bool some_member_without_a_core = false;  // from every member's count, once all attached
};

std::chrono::nanoseconds DataArenaSpin(int local_size, int cpus) {
  if (local_size > 2 * std::max(cpus, 1)) return kCrowdedSpin;
  return kDefaultSpin;
}

std::unique_ptr<ShmArena> ShmArena::Attach(const ShmArenaOptions& options) {
  ThrowIfError(ValidateOptions(options));
  auto impl = std::make_unique<Impl>(options);
  bool initialised = false;  // the header is valid, so peers can be told about a failure
  try {
    if (options.local_index == 0) {
      impl->CreateSegment();
    } else {
      impl->OpenSegment(options.deadline);
    }
    initialised = true;
    impl->Join(options.deadline);
  } catch (const Error& e) {
    // Members that attached would otherwise wait for us until their own deadline.
    if (initialised && !impl->Poisoned()) impl->Poison(options.local_index, e.what());
    throw;  // ~Impl unmaps and, for member 0, unlinks the name
  }
  if (impl->owns_name) {
    impl->owns_name = false;
    if (shm_unlink(options.name.c_str()) != 0) {
      HLOG(Warning) << "shm_unlink(" << options.name << ") failed: " << std::strerror(errno);
    }
  }
  return std::unique_ptr<ShmArena>(new ShmArena(std::move(impl)));
}

ShmArena::ShmArena(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShmArena::~ShmArena() = default;

int ShmArena::local_index() const { return impl_->local_index; }
int ShmArena::local_size() const { return impl_->local_size; }
const std::vector<int>& ShmArena::member_ranks() const { return impl_->member_ranks; }
size_t ShmArena::slot_bytes() const { return impl_->slot_bytes; }

uint8_t* ShmArena::slot(int member) {
  return impl_->MemberRegion("slot", member, impl_->layout.slots_offset, impl_->layout.slot_stride);
}

uint8_t* ShmArena::result() { return impl_->base + impl_->layout.result_offset; }

int ShmArena::MemberPid(int member) const {
  const auto& line = impl_->member_line(member);
  const uint64_t ns = line.pid_namespace.load(std::memory_order_relaxed);
  const pid_t pid = line.pid.load(std::memory_order_relaxed);
  return ns != 0 && ns == impl_->pid_namespace && pid > 0 ? pid : -1;
}

bool ShmArena::SomeMemberWithoutACore() const { return impl_->some_member_without_a_core; }

uint8_t* ShmArena::notice(int member) {
  return impl_->MemberRegion("notice", member, impl_->layout.notices_offset, impl_->layout.notice_stride);
}

size_t ShmArena::notice_bytes() const { return impl_->layout.notice_stride; }

uint64_t ShmArena::Claim(uint64_t limit) {
  std::atomic<uint64_t>& claimed = impl_->header()->units_claimed;
  uint64_t v = claimed.load(std::memory_order_relaxed);
  // Never past `limit`: the next round of claims starts exactly where this one ended.
  while (v < limit && !claimed.compare_exchange_weak(v, v + 1, std::memory_order_relaxed)) {
  }
  return v;
}

namespace {

Status CheckFlag(int flag) {
  if (flag < 0 || flag >= ShmArena::kMaxFlags) {
    return Status::InvalidArgument("shared-memory arena flag " + std::to_string(flag) +
                                   " out of range [0, " + std::to_string(ShmArena::kMaxFlags) +
                                   ")");
  }
  return Status::OK();
}

}  // namespace

void ShmArena::Publish(int flag, uint64_t value) {
  ThrowIfError(CheckFlag(flag));
  CounterLine& line = impl_->counter(flag, impl_->local_index);
  line.value.store(value, std::memory_order_seq_cst);
  WakeIfSleeping(line.waitable);
}

uint32_t ShmArena::Doorbell() const {
  return impl_->member_line(impl_->local_index).doorbell.generation.load(std::memory_order_seq_cst);
}

void ShmArena::Ring(int member) {
  if (member < 0 || member >= impl_->local_size) {
    throw Error(Status::InvalidArgument(impl_->Describe() + ": member " + std::to_string(member) + " out of range"));
  }
  Waitable& bell = impl_->member_line(member).doorbell;
  bell.generation.fetch_add(1, std::memory_order_seq_cst);
  if (bell.sleepers.load(std::memory_order_seq_cst) != 0) FutexWakeAll(&bell.generation);
}

void ShmArena::WaitDoorbell(uint32_t seen, std::chrono::nanoseconds timeout) {
  Waitable& bell = impl_->member_line(impl_->local_index).doorbell;
  // Spin first, as the counter waits do: the ring usually comes within microseconds, and a futex
  // sleep costs a wake-up that is slow on a virtual machine.
  const auto spin_until = std::chrono::steady_clock::now() + std::min(impl_->spin, timeout);
  // Yielding, not pausing: who rings is often this process's own thread that needs this core.
  while (std::chrono::steady_clock::now() < spin_until) {
    if (bell.generation.load(std::memory_order_acquire) != seen) return;
    std::this_thread::yield();
  }
  // Announce the sleep before the last look, so that a Ring after the look sees a sleeper.
  bell.sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (bell.generation.load(std::memory_order_seq_cst) == seen) FutexWait(&bell.generation, seen, timeout);
  bell.sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

uint64_t ShmArena::Load(int flag, int member) const {
  ThrowIfError(CheckFlag(flag));
  if (member < 0 || member >= impl_->local_size) {
    throw Error(Status::InvalidArgument(impl_->Describe() + ": member " + std::to_string(member) +
                                        " out of range"));
  }
  return impl_->counter(flag, member).value.load(std::memory_order_acquire);
}

Status ShmArena::WaitFor(int flag, int member, uint64_t value, Deadline deadline) {
  Status s = CheckFlag(flag);
  if (!s.ok()) return s;
  if (member < 0 || member >= impl_->local_size) {
    return Status::InvalidArgument(impl_->Describe() + ": member " + std::to_string(member) +
                                   " out of range [0, " + std::to_string(impl_->local_size) + ")");
  }
  return impl_->AwaitCounters(flag, member, member + 1, value, deadline);
}

Status ShmArena::WaitAll(int flag, uint64_t value, Deadline deadline) {
  Status s = CheckFlag(flag);
  if (!s.ok()) return s;
  return impl_->AwaitCounters(flag, 0, impl_->local_size, value, deadline);
}

void ShmArena::Poison() { Poison(std::string()); }

void ShmArena::Poison(const std::string& reason) { impl_->Poison(impl_->local_index, reason); }

bool ShmArena::Poisoned() const { return impl_->Poisoned(); }

bool ShmArena::MemberGone(int member) const {
  return !impl_->CheckMemberGone(member, /*probe_process=*/true).ok();
}

}  // namespace herring
