#include "ops/one_host_routes.h"

namespace herring {

RouteChooser& OneHostRoutes::ChooserFor(const ExecContext& ctx) {
  return choosers_[ctx.set.arena->local_size() > available_cpus_ ? 1 : 0];
}

AddressOffer OneHostRoutes::Offer(const ExecContext& ctx, size_t bytes) {
  switch (ctx.config.read_peer_tensors) {
    case PeerTensorReads::kAlways: return {true, TensorReach::kTensorsByAddress};
    case PeerTensorReads::kOutputs: return {true, TensorReach::kOutputsByAddress};
    case PeerTensorReads::kNever: return {false, TensorReach::kStaged};
    case PeerTensorReads::kAuto: break;
  }
  return {true, static_cast<TensorReach>(ChooserFor(ctx).Next(bytes))};
}

void OneHostRoutes::Finished(const ExecContext& ctx, size_t bytes, TensorReach route, double seconds) {
  if (ctx.config.read_peer_tensors == PeerTensorReads::kAuto) {
    ChooserFor(ctx).Record(bytes, static_cast<int>(route), seconds);
  }
}

}  // namespace herring
