#include "ops/cross_memory_copy.h"

#include <limits.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/logging.h"
#include "ops/tensor_notice.h"

namespace herring {

Status CopyCrossMemory(int pid, CrossMemory direction, const iovec* local, const iovec* remote, size_t pieces) {
  const bool read = direction == CrossMemory::kRead;
  for (size_t at = 0; at < pieces; at += IOV_MAX) {
    const size_t n = std::min<size_t>(IOV_MAX, pieces - at);
    size_t want = 0;
    for (size_t k = at; k < at + n; ++k) want += local[k].iov_len;
    // A call can also stop short: a fault in the other process's range.
    const ssize_t got = read ? process_vm_readv(pid, local + at, n, remote + at, n, 0)
                             : process_vm_writev(pid, local + at, n, remote + at, n, 0);
    if (got == static_cast<ssize_t>(want)) continue;
    const int error = errno;
    const char* call = read ? "process_vm_readv" : "process_vm_writev";
    if (got < 0) {
      std::string m = std::string(call) + ": " + std::strerror(error);
      return error == ESRCH ? Status::PeerLost(m + "; the process is gone") : Status::Internal(m);
    }
    return Status::Internal(std::string(call) + ": " + std::to_string(got) + " of " + std::to_string(want) + " bytes");
  }
  return Status::OK();
}

std::string LocalRankName(const ExecContext& ctx, int member) {
  return "rank " + std::to_string(ctx.member_rank(ctx.set.local_members()[member])) + " (local rank " +
         std::to_string(member) + ")";
}

void ReadPeerTensors(const ExecContext& ctx, const AllreduceBatch& batch, std::vector<PeerTensors>* peers) {
  ShmArena& arena = *ctx.set.arena;
  peers->resize(arena.local_size());
  for (int i = 0; i < arena.local_size(); ++i) {
    const TensorNoticeHeader& header = NoticeHeaderOf(arena.notice(i));
    if (header.entries != batch.entries.size()) {
      throw Error(Status::Internal("allreduce of '" + batch.label + "': " + LocalRankName(ctx, i) + " announced " +
                                   std::to_string(header.entries) + " tensors, this rank has " +
                                   std::to_string(batch.entries.size())));
    }
    const TensorNoticeEntry* entries = NoticeEntriesOf(arena.notice(i));
    PeerTensors& peer = (*peers)[i];
    peer.addresses.resize(header.entries);
    for (uint32_t e = 0; e < header.entries; ++e) peer.addresses[e] = {entries[e].input, entries[e].output};
    peer.pid = arena.MemberPid(i);
  }
}

namespace {

// Whether this rank can copy one element of each other rank's first non-empty tensors: out of
// its input and output, and with `write` back into its output what it found there (nobody
// writes an output before every rank has answered). `why` says why not.
bool CanCopyEveryone(const ExecContext& ctx, const AllreduceBatch& batch, const std::vector<PeerTensors>& peers,
                     bool write, std::string* why) {
  const auto first = std::find_if(batch.entries.begin(), batch.entries.end(), [](const ReduceEntry& e) { return e.count > 0; });
  if (first == batch.entries.end()) return true;
  const size_t e = static_cast<size_t>(first - batch.entries.begin());
  const size_t esz = ElementSize(batch.dtype);
  uint64_t probe[2];
  for (int i = 0; i < static_cast<int>(peers.size()); ++i) {
    if (i == ctx.set.my_local_index) continue;
    if (peers[i].pid < 0) {
      *why = LocalRankName(ctx, i) + " runs in another pid namespace";
      return false;
    }
    iovec local{probe, esz};
    iovec input{reinterpret_cast<void*>(peers[i].addresses[e].first), esz};
    iovec output{reinterpret_cast<void*>(peers[i].addresses[e].second), esz};
    Status s = CopyCrossMemory(peers[i].pid, CrossMemory::kRead, &local, &output, 1);
    if (s.ok() && write) s = CopyCrossMemory(peers[i].pid, CrossMemory::kWrite, &local, &output, 1);
    if (s.ok() && write) s = CopyCrossMemory(peers[i].pid, CrossMemory::kRead, &local, &input, 1);
    if (!s.ok()) {
      *why = LocalRankName(ctx, i) + ": " + s.message();
      return false;
    }
  }
  return true;
}

}  // namespace

bool EveryoneCanCopy(ExecContext& ctx, const AllreduceBatch& batch, const std::vector<PeerTensors>& peers,
                     uint64_t round, bool write, int* answer, const char* what, const char* instead) {
  if (*answer < 0) {
    std::string why;
    const bool mine = CanCopyEveryone(ctx, batch, peers, write, &why);
    *answer = EveryoneReaches(ctx, round, mine, write ? "asking whether local ranks can read and write each other's memory"
                                                      : "asking whether local ranks can read each other's memory")
                  ? 1
                  : 0;
    if (*answer == 0 && !mine) {
      HLOG(Info) << "local ranks cannot " << what << " (" << why << "); " << instead;
    }
  }
  return *answer == 1;
}

}  // namespace herring
