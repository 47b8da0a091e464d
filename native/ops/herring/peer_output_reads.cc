#include "ops/herring/peer_output_reads.h"


namespace herring {

bool PeerOutputReads::Prepare(ExecContext& ctx, const AllreduceBatch& batch, uint64_t round) {
  ReadPeerTensors(ctx, batch, &peers_);
  layout_.Reset(batch);
  return EveryoneCanCopy(ctx, batch, peers_, round, /*write=*/false, &ctx.set.peers_readable, "read each other's tensors",
                         "one-host allreduces copy their sums through the shared result area instead");
}

void PeerOutputReads::Read(ExecContext& ctx, const AllreduceBatch& batch, int member, int64_t begin, int64_t end) {
  const size_t esz = ElementSize(batch.dtype);
  local_.clear();
  remote_.clear();
  layout_.ForEachPiece(begin, end, [&](size_t e, int64_t offset, int64_t count) {
    const size_t bytes = static_cast<size_t>(count) * esz;
    local_.push_back({static_cast<uint8_t*>(batch.entries[e].output) + offset * esz, bytes});
    remote_.push_back({reinterpret_cast<void*>(peers_[member].addresses[e].second + offset * esz), bytes});
  });
  const Status s = CopyCrossMemory(peers_[member].pid, CrossMemory::kRead, local_.data(), remote_.data(), local_.size());
  if (!s.ok()) {
    throw Error(Status(s.code(), "copying " + LocalRankName(ctx, member) + "'s slice of the sum of '" + batch.label +
                                     "' out of its tensors (" + s.message() + ")"));
  }
  ctx.counters.peer_output_reads++;
}

}  // namespace herring
