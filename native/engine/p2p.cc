// Point-to-point transfers (torch.distributed send/recv): one tagged transfer on the mesh, between
// the two ranks only, outside the negotiation cycles, as R2SP's training mode does. Nothing is
// negotiated, so a send never waits for the other ranks; a lost peer fails the transfer through
// the transport (PeerLost naming the rank), and the caller waits with its own deadline.
#include "engine/engine.h"
#include "runtime/collective.h"

namespace herring {
namespace {

// The unit below R2SP's (0xffff) in MakeTagBase's layout, which no cycle hands out (a cycle's
// units count its responses):
//   [sequence: 28 bits][unit 0xfffe: 16 bits][user tag: 20 bits].
// The sequence numbers the messages of one (peer, tag, direction), so that several in flight at
// once never share a tag, and both ends count them in the same order (MPI's non-overtaking rule).
constexpr uint64_t kP2pUnit = 0xfffe;
constexpr uint32_t kMaxUserTag = (1u << ExecContext::kSubTagBits) - 1;

uint64_t MakeP2pTag(uint64_t sequence, uint32_t tag) {
  return ((sequence & 0xfffffffull) << 36) | (kP2pUnit << ExecContext::kSubTagBits) | tag;
}

void CheckP2p(const Engine& e, int peer, uint32_t tag, const char* what) {
  if (!e.running()) throw Error(Status::Shutdown(std::string(what) + ": the engine is not running"));
  if (peer < 0 || peer >= e.size()) {
    throw Error(Status::InvalidArgument(std::string(what) + ": rank " + std::to_string(peer) +
                                        " is out of range [0, " + std::to_string(e.size()) + ")"));
  }
  if (tag > kMaxUserTag) {
    throw Error(Status::InvalidArgument(std::string(what) + ": tag " + std::to_string(tag) + " is above " +
                                        std::to_string(kMaxUserTag)));
  }
}

}  // namespace

CompletionPtr Engine::P2pSend(int peer, uint32_t tag, const void* data, size_t bytes) {
  CheckP2p(*this, peer, tag, "send");
  uint64_t sequence;
  {
    std::lock_guard<std::mutex> lock(p2p_mu_);
    sequence = p2p_sequence_[{peer, tag, true}]++;
  }
  return transport_->Send(peer, MakeP2pTag(sequence, tag), data, bytes);
}

CompletionPtr Engine::P2pRecv(int peer, uint32_t tag, void* data, size_t bytes) {
  CheckP2p(*this, peer, tag, "recv");
  uint64_t sequence;
  {
    std::lock_guard<std::mutex> lock(p2p_mu_);
    sequence = p2p_sequence_[{peer, tag, false}]++;
  }
  return transport_->Recv(peer, MakeP2pTag(sequence, tag), data, bytes);
}

}  // namespace herring
