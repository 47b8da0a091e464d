// Point-to-point transfers (torch.distributed send/recv): tagged transfers on the mesh, between
// the two ranks only, outside the negotiation cycles, as R2SP's training mode does. Nothing is
// negotiated, so a send never waits for the other ranks; a lost peer fails the transfer through
// the transport (PeerLost naming the rank), and the caller waits with its own deadline. The
// matching rules (tags, order, receives from any source) are engine/p2p_matcher.h's.
#include <algorithm>

#include "engine/engine.h"

namespace herring {
namespace {

void CheckP2p(const Engine& e, int peer, uint32_t tag, const char* what) {
  if (!e.running()) throw Error(Status::Shutdown(std::string(what) + ": the engine is not running"));
  if (peer < 0 || peer >= e.size()) {
    throw Error(Status::InvalidArgument(std::string(what) + ": rank " + std::to_string(peer) +
                                        " is out of range [0, " + std::to_string(e.size()) + ")"));
  }
  if (tag > P2pMatcher::kMaxUserTag) {
    throw Error(Status::InvalidArgument(std::string(what) + ": tag " + std::to_string(tag) + " is above " +
                                        std::to_string(P2pMatcher::kMaxUserTag)));
  }
}

}  // namespace

P2pMatcher& Engine::p2p() {
  std::lock_guard<std::mutex> lock(p2p_mu_);
  if (!p2p_) p2p_ = std::make_unique<P2pMatcher>(transport_.get());
  return *p2p_;
}

CompletionPtr Engine::P2pSend(int peer, uint32_t tag, const void* data, size_t bytes) {
  CheckP2p(*this, peer, tag, "send");
  return p2p().Send(peer, tag, data, bytes);
}

CompletionPtr Engine::P2pRecv(int peer, uint32_t tag, void* data, size_t bytes) {
  CheckP2p(*this, peer, tag, "recv");
  return p2p().Recv(peer, tag, data, bytes);
}

AnySourceReceivePtr Engine::P2pRecvAny(const std::vector<int>& peers, uint32_t tag, void* data, size_t bytes) {
  std::vector<int> others;
  for (int peer : peers) {
    CheckP2p(*this, peer, tag, "recv from any source");
    if (peer != rank() && std::find(others.begin(), others.end(), peer) == others.end()) others.push_back(peer);
  }
  if (others.empty()) {
    throw Error(Status::InvalidArgument("recv from any source: no other rank to receive from (ranks " +
                                        ShapeToString(std::vector<int64_t>(peers.begin(), peers.end())) + ")"));
  }
  return p2p().RecvAny(others, tag, data, bytes);
}

}  // namespace herring
