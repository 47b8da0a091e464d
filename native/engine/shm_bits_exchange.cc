#include "engine/shm_bits_exchange.h"

#include <algorithm>
#include <cstring>

#include "common/cpus.h"

namespace herring {

bool ShmBitsExchange::Fits(size_t words) { return HeaderOffset(words) + 64 <= kHalfBytes - kMaxInputBytes; }

std::unique_ptr<ShmBitsExchange> ShmBitsExchange::Attach(const std::string& name, int rank, int size,
                                                         Deadline deadline, std::function<Status()> check_abort) {
  std::vector<int> everyone(size);
  for (int r = 0; r < size; ++r) everyone[r] = r;
  return AttachHost(name, rank, everyone, 0, deadline, std::move(check_abort));
}

std::unique_ptr<ShmBitsExchange> ShmBitsExchange::AttachHost(const std::string& name, int local_index,
                                                             const std::vector<int>& member_ranks, size_t result_words,
                                                             Deadline deadline, std::function<Status()> check_abort) {
  ShmArenaOptions o;
  o.name = name;
  o.local_index = local_index;
  o.local_size = static_cast<int>(member_ranks.size());
  // The vectors travel in the notice areas; the result area (slot_bytes long) holds the leader's
  // two halves of results, if any.
  o.slot_bytes = result_words > 0 ? 2 * ResultHalfBytes(result_words) : 64;
  o.notice_bytes = 2 * kHalfBytes;
  o.member_ranks = member_ranks;
  o.deadline = deadline;
  o.check_abort = std::move(check_abort);
  // The other ranks usually post within microseconds of each other; a futex sleep and wake-up
  // costs tens of microseconds on a virtual machine.
  o.spin = kSpin;
  static_assert(kInvitationGrace < kSpin, "the grace before invitations is spent spinning, not asleep");
  return std::unique_ptr<ShmBitsExchange>(new ShmBitsExchange(ShmArena::Attach(o)));
}

ShmBitsExchange::ShmBitsExchange(std::unique_ptr<ShmArena> arena) : arena_(std::move(arena)) {
  for (int r = 0; r < arena_->local_size(); ++r) present_.push_back(r);
}

void ShmBitsExchange::MarkDeparted(int rank) {
  present_.erase(std::remove(present_.begin(), present_.end(), rank), present_.end());
}

uint64_t* ShmBitsExchange::half(int rank, uint64_t cycle) {
  return reinterpret_cast<uint64_t*>(arena_->notice(rank) + (cycle % 2) * kHalfBytes);
}

size_t ShmBitsExchange::HeaderOffset(size_t words) { return (words * sizeof(uint64_t) + 63) & ~size_t{63}; }

size_t ShmBitsExchange::InputCapacity(size_t words) {
  const size_t used = HeaderOffset(words) + 64;  // the header has a cache line to itself
  return used < kHalfBytes ? kHalfBytes - used : 0;
}

ShmBitsExchange::InputHeader* ShmBitsExchange::header(int rank, uint64_t cycle, size_t words) {
  return reinterpret_cast<InputHeader*>(reinterpret_cast<uint8_t*>(half(rank, cycle)) + HeaderOffset(words));
}

uint8_t* ShmBitsExchange::InputArea(uint64_t cycle, size_t words) {
  return reinterpret_cast<uint8_t*>(header(arena_->local_index(), cycle, words)) + 64;
}

void ShmBitsExchange::Post(uint64_t cycle, const std::vector<uint64_t>& bits) {
  PostWithInput(cycle, bits, 0, 0);  // the header still says "no input": the half held older cycles'
}

void ShmBitsExchange::PostWithInput(uint64_t cycle, const std::vector<uint64_t>& bits, uint32_t position,
                                    uint32_t bytes) {
  std::memcpy(half(arena_->local_index(), cycle), bits.data(), bits.size() * sizeof(uint64_t));
  *header(arena_->local_index(), cycle, bits.size()) = InputHeader{bytes, position, CurrentCpu()};
  posted_cycle_ = cycle;
  posted_words_ = bits.size();
  // Release: the vector, the header and the input are visible before the cycle number.
  arena_->Publish(kPostedFlag, cycle);
}

bool ShmBitsExchange::MoveOffSharedCpu(uint64_t cycle, size_t words) {
  if (posted_cycle_ == 0 || posted_cycle_ + 1 != cycle) return false;
  const int mine = CurrentCpu();
  if (mine < 0) return false;
  // A peer's newest header: `cycle`'s if it posted it (final until it posts cycle + 2, which
  // needs this rank's cycle + 1), else the last cycle's (final until it posts cycle + 1, which
  // needs this rank's `cycle`).
  auto cpu_of = [&](int r) {
    const bool posted = arena_->Load(kPostedFlag, r) >= cycle;
    return header(r, posted ? cycle : posted_cycle_, posted ? words : posted_words_)->cpu;
  };
  const int me = arena_->local_index();
  bool shared = false;
  for (int r : present_) shared = shared || (r != me && cpu_of(r) == mine);
  if (!shared) return false;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_move_ < kMoveInterval) return false;
  last_move_ = now;
  std::vector<int> taken;
  for (int r : present_) {
    if (r != me) taken.push_back(cpu_of(r));
  }
  return MoveCallingThreadOff(taken) >= 0;
}

bool ShmBitsExchange::EveryonePostedInput(uint64_t cycle, size_t words, uint32_t* position,
                                          std::vector<const void*>* inputs) {
  // Only while every rank takes part: the inputs are reduced as the whole world's.
  if (static_cast<int>(present_.size()) != arena_->local_size()) return false;
  const InputHeader first = *header(0, cycle, words);
  if (first.bytes == 0) return false;
  std::vector<const void*> found(arena_->local_size());
  for (int r = 0; r < arena_->local_size(); ++r) {
    const InputHeader h = *header(r, cycle, words);
    if (h.bytes != first.bytes || h.position != first.position) return false;
    found[r] = reinterpret_cast<const uint8_t*>(header(r, cycle, words)) + 64;
  }
  *position = first.position;
  inputs->swap(found);
  return true;
}

void ShmBitsExchange::InviteLate(uint64_t cycle) {
  for (int r : present_) {
    if (arena_->Load(kPostedFlag, r) < cycle) arena_->Ring(r);
  }
}

bool ShmBitsExchange::SomeonePosted(uint64_t cycle) const {
  for (int r : present_) {
    if (arena_->Load(kPostedFlag, r) >= cycle) return true;
  }
  return false;
}

Status ShmBitsExchange::AwaitAnd(uint64_t cycle, size_t words, Deadline deadline, std::vector<uint64_t>* agreed) {
  const bool everyone = static_cast<int>(present_.size()) == arena_->local_size();
  Status s = everyone ? arena_->WaitAll(kPostedFlag, cycle, deadline) : Status::OK();
  for (size_t i = 0; !everyone && s.ok() && i < present_.size(); ++i) s = arena_->WaitFor(kPostedFlag, present_[i], cycle, deadline);
  if (!s.ok()) return s;
  std::vector<uint64_t> result(half(present_[0], cycle), half(present_[0], cycle) + words);
  for (size_t i = 1; i < present_.size(); ++i) {
    const uint64_t* theirs = half(present_[i], cycle);
    for (size_t w = 0; w < words; ++w) result[w] &= theirs[w];
  }
  agreed->swap(result);
  return Status::OK();
}

uint64_t* ShmBitsExchange::result_half(uint64_t cycle) {
  return reinterpret_cast<uint64_t*>(arena_->result() + (cycle % 2) * (arena_->slot_bytes() / 2));
}

ShmBitsExchange::InputHeader* ShmBitsExchange::result_header(uint64_t cycle, size_t words) {
  return reinterpret_cast<InputHeader*>(reinterpret_cast<uint8_t*>(result_half(cycle)) + HeaderOffset(words));
}

void ShmBitsExchange::PostResult(uint64_t cycle, const std::vector<uint64_t>& bits, uint32_t position,
                                 const void* total, uint32_t total_bytes) {
  if (ResultHalfBytes(bits.size()) > arena_->slot_bytes() / 2 || total_bytes > kMaxInputBytes) {
    throw Error(Status::Internal("a control-plane result of " + std::to_string(bits.size()) + " words and " +
                                 std::to_string(total_bytes) + " bytes does not fit the host's result area"));
  }
  std::memcpy(result_half(cycle), bits.data(), bits.size() * sizeof(uint64_t));
  InputHeader* h = result_header(cycle, bits.size());
  *h = InputHeader{total_bytes, position, -1};
  if (total_bytes) std::memcpy(reinterpret_cast<uint8_t*>(h) + 64, total, total_bytes);
  arena_->Publish(kResultFlag, cycle);  // release: the vector and the total before the cycle number
}

const uint8_t* ShmBitsExchange::ResultTotal(uint64_t cycle, size_t words, uint32_t* position, uint32_t* bytes) {
  const InputHeader* h = result_header(cycle, words);
  if (h->bytes == 0) return nullptr;
  *position = h->position;
  *bytes = h->bytes;
  return reinterpret_cast<const uint8_t*>(h) + 64;
}

Status ShmBitsExchange::AwaitResult(uint64_t cycle, size_t words, Deadline deadline, std::vector<uint64_t>* agreed) {
  Status s = arena_->WaitFor(kResultFlag, 0, cycle, deadline);
  if (!s.ok()) return s;
  const uint64_t* r = result_half(cycle);
  agreed->assign(r, r + words);
  return Status::OK();
}

}  // namespace herring
