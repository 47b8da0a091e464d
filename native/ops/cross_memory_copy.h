// Copies between this process's memory and another local rank's, through the kernel
// (process_vm_readv / process_vm_writev: one copy, as Open MPI's shared-memory transport makes with
// its CMA single copy), for the one-host paths that reach the other ranks' tensors in place:
// ops/herring/peer_output_reads.h and ops/cross_memory_allreduce.h.
//
// Both need what ptrace's attach check allows (same user, no seccomp profile blocking the calls)
// and a pid that names the process here (same pid namespace: ShmArena::MemberPid).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "runtime/collective.h"

namespace herring {

enum class CrossMemory { kRead, kWrite };

// Moves pieces[i] of the other process (`remote`, in process `pid`) from or into local[i], for
// every i < pieces, in calls of at most IOV_MAX pieces. Each pair has the same length. Returns OK,
// or what failed ("process_vm_readv: No such process", "4096 of 8192 bytes"): PeerLost when the
// process is gone, Internal otherwise.
Status CopyCrossMemory(int pid, CrossMemory direction, const iovec* local, const iovec* remote, size_t pieces);

// "rank 3 (local rank 1)": the rank is what a user finds in their logs.
std::string LocalRankName(const ExecContext& ctx, int member);

// A local rank's tensors of a batch, as its notice gives them (ops/tensor_notice.h).
struct PeerTensors {
  int pid = -1;  // -1: another pid namespace, where its pid means another process
  std::vector<std::pair<uint64_t, uint64_t>> addresses;  // (input, output) per entry
};
// Every local rank's tensors from the notices of a batch that gave addresses. Throws Error when a
// rank announced another number of tensors than this one has.
void ReadPeerTensors(const ExecContext& ctx, const AllreduceBatch& batch, std::vector<PeerTensors>* peers);

// Whether every local rank can copy out of (and, with `write`, into) every other's tensors:
// asked at the set's first batch that needs it, in one round with notice round `round`, and
// remembered in *answer (-1: not asked yet; then 0 or 1) for the set's life. A rank that cannot
// says why once (`what` names the path, `instead` what it does then).
bool EveryoneCanCopy(ExecContext& ctx, const AllreduceBatch& batch, const std::vector<PeerTensors>& peers,
                     uint64_t round, bool write, int* answer, const char* what, const char* instead);

}  // namespace herring
