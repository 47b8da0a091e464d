#include "ops/herring/one_host_routes.h"

namespace herring {

RouteChooser* OneHostRoutes::ChooserFor(const ExecContext& ctx, size_t bytes) {
  // The host's answer, not this rank's CPU count: local rank 0, whose vote decides, must choose
  // among the same candidates as the ranks that withhold their addresses.
  if (!ctx.set.arena->SomeMemberWithoutACore()) return &every_rank_a_core_;
  return bytes >= kOversubscribedCrossMinBytes ? &oversubscribed_ : nullptr;
}

AddressOffer OneHostRoutes::Offer(const ExecContext& ctx, size_t bytes) {
  switch (ctx.config.read_peer_tensors) {
    case PeerTensorReads::kAlways: return {true, TensorReach::kTensorsByAddress};
    case PeerTensorReads::kOutputs: return {true, TensorReach::kOutputsByAddress};
    case PeerTensorReads::kNever: return {false, TensorReach::kStaged};
    case PeerTensorReads::kAuto: break;
  }
  RouteChooser* chooser = ChooserFor(ctx, bytes);
  if (chooser == nullptr) return {false, TensorReach::kStaged};
  return {true, static_cast<TensorReach>(chooser->Next(bytes))};
}

void OneHostRoutes::Finished(const ExecContext& ctx, size_t bytes, TensorReach route, double seconds) {
  if (ctx.config.read_peer_tensors != PeerTensorReads::kAuto) return;
  if (RouteChooser* chooser = ChooserFor(ctx, bytes)) chooser->Record(bytes, static_cast<int>(route), seconds);
}

}  // namespace herring
