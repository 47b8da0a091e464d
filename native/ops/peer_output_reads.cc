#include "ops/peer_output_reads.h"

#include <limits.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/logging.h"
#include "ops/tensor_notice.h"

namespace herring {
namespace {

// "rank 3 (local rank 1)": the rank is what a user finds in their logs.
std::string LocalRankName(const ExecContext& ctx, int member) {
  return "rank " + std::to_string(ctx.member_rank(ctx.set.local_members()[member])) + " (local rank " +
         std::to_string(member) + ")";
}

}  // namespace

bool PeerOutputReads::Offers(const ExecContext& ctx, size_t bytes) {
  switch (ctx.config.read_peer_tensors) {
    case PeerTensorReads::kAlways: return true;
    case PeerTensorReads::kNever: return false;
    case PeerTensorReads::kAuto: break;
  }
  return ctx.set.arena->local_size() <= available_cpus_ && chooser_.Next(bytes);
}

void PeerOutputReads::Finished(const ExecContext& ctx, size_t bytes, bool read_peers, double seconds) {
  if (ctx.config.read_peer_tensors == PeerTensorReads::kAuto) chooser_.Record(bytes, read_peers, seconds);
}

bool PeerOutputReads::Prepare(ExecContext& ctx, const AllreduceBatch& batch, uint64_t round) {
  ShmArena& arena = *ctx.set.arena;
  const int local_size = arena.local_size();
  pids_.resize(local_size);
  outputs_.resize(local_size);
  for (int i = 0; i < local_size; ++i) {
    const TensorNoticeHeader& header = NoticeHeaderOf(arena.notice(i));
    if (header.entries != batch.entries.size()) {
      throw Error(Status::Internal("allreduce of '" + batch.label + "': " + LocalRankName(ctx, i) + " announced " +
                                   std::to_string(header.entries) + " tensors, this rank has " +
                                   std::to_string(batch.entries.size())));
    }
    const TensorNoticeEntry* entries = NoticeEntriesOf(arena.notice(i));
    outputs_[i].resize(header.entries);
    for (uint32_t e = 0; e < header.entries; ++e) outputs_[i][e] = entries[e].output;
    pids_[i] = arena.MemberPid(i);
  }
  layout_.Reset(batch);

  if (ctx.set.peers_readable < 0) {  // the set's first such batch: every rank asks at this batch
    std::string why;
    const bool mine = CanReadEveryone(ctx, batch, &why);
    ctx.set.peers_readable = EveryoneReaches(ctx, round, mine, "asking whether local ranks can read each other's memory") ? 1 : 0;
    if (!ctx.set.peers_readable && !warned_) {
      HLOG(Info) << "local ranks cannot read each other's tensors" << (why.empty() ? std::string(" (some rank)") : " (" + why + ")")
                 << "; one-host allreduces copy their sums through the shared result area instead";
      warned_ = true;
    }
  }
  return ctx.set.peers_readable == 1;
}

bool PeerOutputReads::CanReadEveryone(ExecContext& ctx, const AllreduceBatch& batch, std::string* why) {
  // Reads one element of each other rank's first non-empty output (every batch that gets here has
  // one: it is above the small-message size), as Read will.
  const auto first = std::find_if(batch.entries.begin(), batch.entries.end(), [](const ReduceEntry& e) { return e.count > 0; });
  if (first == batch.entries.end()) return true;
  const size_t e = static_cast<size_t>(first - batch.entries.begin());
  const size_t esz = ElementSize(batch.dtype);
  uint64_t probe[2];
  for (int i = 0; i < static_cast<int>(pids_.size()); ++i) {
    if (i == ctx.set.my_local_index) continue;
    if (pids_[i] < 0) {
      *why = LocalRankName(ctx, i) + " runs in another pid namespace";
      return false;
    }
    iovec local{probe, esz};
    iovec remote{reinterpret_cast<void*>(outputs_[i][e]), esz};
    if (process_vm_readv(pids_[i], &local, 1, &remote, 1, 0) != static_cast<ssize_t>(esz)) {
      *why = "process_vm_readv of " + LocalRankName(ctx, i) + ": " + std::strerror(errno);
      return false;
    }
  }
  return true;
}

void PeerOutputReads::Read(ExecContext& ctx, const AllreduceBatch& batch, int member, int64_t begin, int64_t end) {
  const size_t esz = ElementSize(batch.dtype);
  local_.clear();
  remote_.clear();
  layout_.ForEachPiece(begin, end, [&](size_t e, int64_t offset, int64_t count) {
    const size_t bytes = static_cast<size_t>(count) * esz;
    local_.push_back({static_cast<uint8_t*>(batch.entries[e].output) + offset * esz, bytes});
    remote_.push_back({reinterpret_cast<void*>(outputs_[member][e] + offset * esz), bytes});
  });
  // At most IOV_MAX pieces per call; a call can also stop short (a fault in the other process).
  for (size_t at = 0; at < local_.size(); at += IOV_MAX) {
    const size_t n = std::min<size_t>(IOV_MAX, local_.size() - at);
    size_t want = 0;
    for (size_t k = at; k < at + n; ++k) want += local_[k].iov_len;
    const ssize_t got = process_vm_readv(pids_[member], &local_[at], n, &remote_[at], n, 0);
    if (got != static_cast<ssize_t>(want)) {
      const std::string what = "copying " + LocalRankName(ctx, member) + "'s slice of the sum of '" + batch.label +
                               "' out of its tensors (process_vm_readv): " +
                               (got < 0 ? std::string(std::strerror(errno))
                                        : std::to_string(got) + " of " + std::to_string(want) + " bytes");
      throw Error(got < 0 && errno == ESRCH ? Status::PeerLost(what + "; the process is gone") : Status::Internal(what));
    }
  }
  ctx.counters.peer_output_reads++;
}

}  // namespace herring
