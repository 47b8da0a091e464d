// The per-cycle AND of the ranks' bit vectors through shared memory, for a world that lives on
// one host: every rank writes its vector into its notice area of a small arena and publishes the
// cycle; every rank waits (spin briefly, then a futex) until all have, and ANDs the vectors
// itself. Everyone ANDs the same vectors, so everyone agrees without an answer from rank 0: one
// shared-memory hand-off per cycle instead of two TCP messages through rank 0.
//
// A vector posted for cycle c lives in half c % 2 of the notice area. A rank writes cycle c + 2's
// vector into the same half only after every rank posted c + 1, which each did after reading
// cycle c's: no vector is overwritten while someone may still read it.
//
// Inputs with the bits: a rank whose only request is one small cached allreduce may post its
// input in the same half, after its vector, saying which cache position it is for. When every
// rank posted one for the same position, that position is the cycle's only collective and every
// rank already holds every input: the allreduce needs no second hand-off (ops/shm_staging.h,
// AllreduceBatch::posted_inputs). Otherwise the inputs are ignored and the allreduce stages its
// own. Either way all ranks decide alike, from the same posted headers.
//
// Across hosts (the hierarchical control plane) each host has its own exchange, whose members
// are that host's ranks: they AND their vectors here, the host's leader (local index 0) combines
// the host's AND with the other hosts' over TCP and posts the job's result (PostResult); the
// others read it (AwaitResult). A result for cycle c lives in half c % 2 of the result area; the
// leader writes cycle c + 2's only after every member posted c + 2, after reading c's. Inputs
// with the bits work there too, within the host: when every member posted one for the same
// position, the leader reduces the host's sum from them and carries it up the leaders' tree;
// when every host did, rank 0 sends the job's total down with the result, and the leader posts
// it beside the result (ResultTotal): the allreduce needs no exchange of its own
// (engine/control_plane.cc). Otherwise the host's sum needs no second hand-off before the
// leaders exchange the hosts' sums (ops/herring/small_exchange.h).
//
// Each vector also says which CPU its poster ran on, for MoveOffSharedCpu: read from the halves
// this rank's caches already hold (the last cycle's, or the current one's where the peer posted
// it), so the check adds no cache-line transfer to a cycle.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "transport/shm_arena.h"

namespace herring {

class ShmBitsExchange {
 public:
  // Whether vectors of `words` 64-bit words fit the notice area's halves.
  static bool Fits(size_t words);
  // Attaches every rank of the world (local_index == rank); throws Error like ShmArena::Attach.
  static std::unique_ptr<ShmBitsExchange> Attach(const std::string& name, int rank, int size, Deadline deadline,
                                                 std::function<Status()> check_abort);
  // Attaches one host's ranks (`member_ranks`, by local index; errors name them) with a result
  // area for vectors of up to `result_words` words (the hierarchical plane).
  static std::unique_ptr<ShmBitsExchange> AttachHost(const std::string& name, int local_index,
                                                     const std::vector<int>& member_ranks, size_t result_words,
                                                     Deadline deadline, std::function<Status()> check_abort);

  // Before this rank posts `cycle`: when the thread running its cycle is on the CPU a local
  // rank's cycle last ran on, moves it to a CPU of its mask that no local rank's cycle is on
  // (common/cpus.h) and returns true. Lockstep ranks that share a core take turns on it while
  // another core idles: measured at np=2 on 2 cores, 4 KiB allreduces took 100-400 us each
  // while the scheduler kept both ranks' threads on one core (for tens of milliseconds, in 4 of 10
  // launches) and 5-12 us apart. At most once per kMoveInterval: a thread that the scheduler
  // keeps putting back is not moved on every cycle.
  bool MoveOffSharedCpu(uint64_t cycle, size_t words);
  static constexpr std::chrono::milliseconds kMoveInterval{1};
  // Publishes this rank's vector for `cycle`, with no input (the header says so).
  void Post(uint64_t cycle, const std::vector<uint64_t>& bits);
  // Bytes of input that fit beside vectors of `words` words.
  static size_t InputCapacity(size_t words);
  // Where this rank writes the input it posts with its vector of `words` words for `cycle`.
  uint8_t* InputArea(uint64_t cycle, size_t words);
  // Publishes the vector and the input written into InputArea: `bytes` of cache position
  // `position`'s allreduce.
  void PostWithInput(uint64_t cycle, const std::vector<uint64_t>& bits, uint32_t position, uint32_t bytes);
  // After AwaitAnd (or, across hosts, AwaitResult): if every rank posted an input for `cycle`,
  // all for one position and of one size, returns true with that position and every rank's input
  // (by local index); otherwise false, leaving both untouched.
  bool EveryonePostedInput(uint64_t cycle, size_t words, uint32_t* position, std::vector<const void*>* inputs);
  // Rings the doorbell of every rank that has not posted `cycle` yet: it may be idle, waiting in
  // WaitForInvitation.
  void InviteLate(uint64_t cycle);
  // How long a rank that posted for a synchronous collective waits for the others to come on
  // their own before it invites the late ones (the engine's AgreeOnBitsInSharedMemory says why).
  // Within the waits' spin.
  static constexpr std::chrono::microseconds kInvitationGrace{20};
  // The global rank of each member, by local index (on one host: every rank, in order).
  const std::vector<int>& member_ranks() const { return arena_->member_ranks(); }
  // Whether some rank posted `cycle` (a cycle to join).
  bool SomeonePosted(uint64_t cycle) const;
  // The idle wait of this rank's loop: returns when a peer invites it, when Wake() is called
  // (its own threads have work), after `timeout`, or early; the caller re-checks. `seen` is
  // Doorbell() read before the caller last looked for work.
  uint32_t Doorbell() const { return arena_->Doorbell(); }
  void WaitForInvitation(uint32_t seen, std::chrono::nanoseconds timeout) { arena_->WaitDoorbell(seen, timeout); }
  void Wake() { arena_->Ring(arena_->local_index()); }
  // Rank `rank` left the job (engine/departures.cc), agreed by every rank after the same cycle:
  // from the next cycle on nobody waits for its vector, invites it, or counts its input.
  void MarkDeparted(int rank);
  // Waits until every rank posted `cycle` and returns the AND of their vectors; on failure
  // (a peer gone, the deadline, check_abort) returns the status with `*agreed` untouched.
  Status AwaitAnd(uint64_t cycle, size_t words, Deadline deadline, std::vector<uint64_t>* agreed);
  // Fails every present and future wait of the host's ranks with `reason` (the engine's failure).
  void Poison(const std::string& reason) { arena_->Poison(reason); }
  // The leader (local index 0): publishes the job's agreed vector for `cycle`, after AwaitAnd,
  // with the job's total of the cycle's lone small allreduce (cache position `position`) when the
  // leaders' tree carried one (`total_bytes` > 0, at most kMaxInputBytes).
  void PostResult(uint64_t cycle, const std::vector<uint64_t>& bits, uint32_t position = 0,
                  const void* total = nullptr, uint32_t total_bytes = 0);
  // The others: waits until the leader posted `cycle`'s result and returns it; on failure
  // returns the status (the leader's death names its rank) with `*agreed` untouched.
  Status AwaitResult(uint64_t cycle, size_t words, Deadline deadline, std::vector<uint64_t>* agreed);
  // After AwaitResult: the total the leader posted with `cycle`'s result (vectors of `words`
  // words), with its position and size; null if none. It stays in place until the leader posts
  // cycle + 2, which waits for this rank's post of cycle + 2, after it executed this cycle.
  const uint8_t* ResultTotal(uint64_t cycle, size_t words, uint32_t* position, uint32_t* bytes);
  // The most bytes of input a rank posts beside its vector, and of a total beside a result.
  static constexpr size_t kMaxInputBytes = 64 << 10;

 private:
  explicit ShmBitsExchange(std::unique_ptr<ShmArena> arena);
  uint64_t* half(int rank, uint64_t cycle);
  // What follows a rank's vector in its half: which input (if any) it posted.
  struct InputHeader {
    uint32_t bytes;     // 0: no input
    uint32_t position;  // its cache position
    int32_t cpu;        // the CPU the poster ran on (-1: unknown)
  };
  static size_t HeaderOffset(size_t words);  // a cache line after the vector
  InputHeader* header(int rank, uint64_t cycle, size_t words);

  // A rank's notice area holds two halves (cycles alternate): in each its vector (up to 32 KiB, a
  // response cache of about 128k entries) and an input of up to kMaxInputBytes (above), the default
  // HERRING_SMALL_MESSAGE_BYTES: a lockstep allreduce of 64 KiB at np=2 took 15.7 us with its
  // input staged after the vectors met and 14.3 us (a copy saved, ReduceInOneStep) ... with it.
  static constexpr size_t kHalfBytes = kMaxInputBytes + (32 << 10);
  static constexpr int kPostedFlag = 0;
  static constexpr int kResultFlag = 1;  // the leader's: the cycle whose result it posted
  // A result half: the vector, then (a cache line on) an InputHeader saying which total follows
  // it, then the total.
  static size_t ResultHalfBytes(size_t words) { return HeaderOffset(words) + 64 + kMaxInputBytes; }
  uint64_t* result_half(uint64_t cycle);
  // The header saying which total follows a result half's vector of `words` words (as header()
  // does for a rank's half).
  InputHeader* result_header(uint64_t cycle, size_t words);
  static constexpr std::chrono::microseconds kSpin = kDefaultSpin;
  std::unique_ptr<ShmArena> arena_;
  std::vector<int> present_;  // the ranks that have not left, in order
  uint64_t posted_cycle_ = 0;  // the last cycle this rank posted (0: none yet)
  size_t posted_words_ = 0;    // and the words of its vector
  std::chrono::steady_clock::time_point last_move_{};
};

}  // namespace herring
