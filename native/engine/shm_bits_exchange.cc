#include "engine/shm_bits_exchange.h"

#include <cstring>

namespace herring {

bool ShmBitsExchange::Fits(size_t words) { return words * sizeof(uint64_t) <= ShmArena::kNoticeBytes / 2; }

std::unique_ptr<ShmBitsExchange> ShmBitsExchange::Attach(const std::string& name, int rank, int size,
                                                         Deadline deadline, std::function<Status()> check_abort) {
  ShmArenaOptions o;
  o.name = name;
  o.local_index = rank;
  o.local_size = size;
  o.slot_bytes = 64;  // the vectors travel in the notice areas; the slots go unused
  for (int r = 0; r < size; ++r) o.member_ranks.push_back(r);
  o.deadline = deadline;
  o.check_abort = std::move(check_abort);
  // The other ranks usually post within microseconds of each other; a futex sleep and wake-up
  // costs tens of microseconds on a virtual machine. Spinning longer than the arena's default
  // pays off here, where the whole exchange is a few cache lines.
  o.spin = kSpin;
  return std::unique_ptr<ShmBitsExchange>(new ShmBitsExchange(ShmArena::Attach(o)));
}

uint64_t* ShmBitsExchange::half(int rank, uint64_t cycle) {
  return reinterpret_cast<uint64_t*>(arena_->notice(rank) + (cycle % 2) * (ShmArena::kNoticeBytes / 2));
}

void ShmBitsExchange::Post(uint64_t cycle, const std::vector<uint64_t>& bits) {
  std::memcpy(half(arena_->local_index(), cycle), bits.data(), bits.size() * sizeof(uint64_t));
  arena_->Publish(kPostedFlag, cycle);  // release: the vector is visible before the cycle number
}

void ShmBitsExchange::InviteLate(uint64_t cycle) {
  for (int r = 0; r < arena_->local_size(); ++r) {
    if (arena_->Load(kPostedFlag, r) < cycle) arena_->Ring(r);
  }
}

bool ShmBitsExchange::SomeonePosted(uint64_t cycle) const {
  for (int r = 0; r < arena_->local_size(); ++r) {
    if (arena_->Load(kPostedFlag, r) >= cycle) return true;
  }
  return false;
}

Status ShmBitsExchange::AwaitAnd(uint64_t cycle, size_t words, Deadline deadline, std::vector<uint64_t>* agreed) {
  Status s = arena_->WaitAll(kPostedFlag, cycle, deadline);
  if (!s.ok()) return s;
  std::vector<uint64_t> result(half(0, cycle), half(0, cycle) + words);
  for (int r = 1; r < arena_->local_size(); ++r) {
    const uint64_t* theirs = half(r, cycle);
    for (size_t w = 0; w < words; ++w) result[w] &= theirs[w];
  }
  agreed->swap(result);
  return Status::OK();
}

}  // namespace herring
